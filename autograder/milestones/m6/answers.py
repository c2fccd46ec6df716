"""Milestone 6's right answers, as the judge computes them: its own copy of each model (stepper: the
oracle, or reference.TorchModel with the same weights), a plain greedy loop, a sampler replaying the
contract's one multinomial call per step with the same seed, a beam search kept as Python lists per
item, an exhaustive search, its own cached decoder written from the weights, and the matrix-multiply
FLOPs a cached and an uncached step need. Each decoder has switches that reproduce known mistakes;
the CATALOGUE entries of sampling and beam search are registered here, beside them."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.milestones.reference import D, D_FF, HEADS, TorchModel
from autograder.milestones.m6.mistakes import CATALOGUE
from autograder.milestones.m6.recipes import OracleModel

PAD, BOS, EOS = 0, 1, 2
V = 9                 # vocabulary of every model here: <pad> <bos> <eos> and six tokens
MAX_POS = 40          # the random Transformers' positional table


# ---- the judge's models and decoders --------------------------------------------------------------

def stepper(spec, src, src_mask, *, causal=True):
    """step(prefixes [N, t], rows [N]) -> next-token logits [N, V] of the judge's copy of the model."""
    if spec["kind"] == "oracle":
        model = OracleModel(**spec["options"]).requires_grad_(False)      # the judge builds no graph
        memory = model.encode(src, src_mask)

        def step(prefixes, rows):
            return model.generator(model.decode(prefixes, memory[rows])[:, -1])
        return step
    model = TorchModel(spec["params"], spec["layers"], spec["norm_first"], "relu", torch.float64, MAX_POS)
    with torch.no_grad():
        memory = model.encode(src, src_mask)

    def step(prefixes, rows):
        t = prefixes.size(1)
        mask = torch.ones(t, t, dtype=torch.bool).tril() if causal else None
        with torch.no_grad():
            return model.gen(model.decode(prefixes, memory[rows], src_mask[rows], mask)[:, -1])
    return step


def judge_greedy(step, B, max_len, *, pad_after_eos=True):
    """(tokens [B, T], steps run, logits per step [B, V])."""
    ys = torch.full((B, 1), BOS, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    seen = []
    for _ in range(max_len):
        logits = step(ys, torch.arange(B))
        seen.append(logits)
        nxt = logits.argmax(-1)
        if pad_after_eos:
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == EOS)
        if bool(done.all()):
            break
    return ys, len(seen), seen


def filtered_probs(logits, temperature=1.0, top_k=None, top_p=None, *, temp_ignored=False, temp_multiplied=False,
                   k_extra=0, drop_crossing=False, p_before_renorm=False, p_unscattered=False, temp_late=False):
    """The contract's sampling distribution [B, V] (or one known mistake's)."""
    if temp_late:           # filtered on the raw logits, divided by the temperature only at the end
        q = filtered_probs(logits, 1.0, top_k, top_p) ** (1.0 / temperature)   # softmax(kept / T)
        return q / q.sum(-1, keepdim=True)
    z = logits * temperature if temp_multiplied else logits if temp_ignored else logits / temperature
    unfiltered = z
    if top_k is not None:
        k = min(top_k + k_extra, z.size(-1))
        kth = z.sort(-1, descending=True).values[:, k - 1:k]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        probs = torch.softmax(unfiltered if p_before_renorm else z, -1)
        sorted_p, order = probs.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p
        keep_sorted = (sorted_p.cumsum(-1) < top_p) if drop_crossing else (before < top_p)
        keep_sorted[:, 0] = True
        keep = keep_sorted if p_unscattered else torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, float("-inf"))
    return torch.softmax(z, -1)


def judge_sample(step, B, max_len, seed, temperature=1.0, top_k=None, top_p=None, **dev):
    gen = torch.Generator().manual_seed(seed)
    ys = torch.full((B, 1), BOS, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    steps = 0
    for _ in range(max_len):
        probs = filtered_probs(step(ys, torch.arange(B)), temperature, top_k, top_p, **dev)
        nxt = torch.multinomial(probs, 1, generator=gen)[:, 0]
        steps += 1
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == EOS)
        if bool(done.all()):
            break
    return ys, steps


def gnmt(score, n, alpha):
    return score / ((5.0 + n) / 6.0) ** alpha


def judge_beam(step, B, max_len, K, alpha, *, dup_start=False, extend_finished=False, pad_cost=False,
               no_norm=False, n_extra=0, eos_uncounted=False, n_counts_pads=False, norm_each_step=False,
               stop_top=False):
    """The beam search of the contract with Python lists (or one known mistake): (tokens [B, T], scores [B]).
    A hypothesis is (tokens, summed log-probability, finished, n). The items move in lockstep, as in a
    batched search (several mistakes show only through the batch's common number of steps)."""
    def length(h):
        n = len(h[0]) - 1 if n_counts_pads else h[3]
        return n + n_extra - (1 if eos_uncounted and h[2] else 0)

    def final(h):
        return h[1] if no_norm else gnmt(h[1], length(h), alpha)

    beams = [[([BOS], 0.0, False, 0)] * (K if dup_start else 1) for _ in range(B)]
    for _ in range(max_len):
        if all(h[2] for item in beams for h in item):
            break
        if stop_top and all(max(item, key=lambda h: h[1])[2] for item in beams):
            break
        prefixes = torch.tensor([h[0] for item in beams for h in item])
        rows = torch.tensor([b for b, item in enumerate(beams) for _ in item])
        logp = torch.log_softmax(step(prefixes, rows), -1).tolist()
        j, new = 0, []
        for item in beams:
            cands = []
            for toks, s, fin, n in item:
                if fin and not extend_finished:
                    cands.append((toks + [PAD], s + (logp[j][PAD] if pad_cost else 0.0), True, n))
                else:
                    cands += [(toks + [v], s + lp, fin or v == EOS, n + (0 if fin else 1)) for v, lp in enumerate(logp[j])]
                j += 1
            rank = (lambda c: gnmt(c[1], length(c), alpha)) if norm_each_step else (lambda c: c[1])
            new.append(sorted(cands, key=rank, reverse=True)[:K])
        beams = new
    winners = [max(item, key=final) for item in beams]
    T = max(len(w[0]) for w in winners)
    tokens = torch.tensor([w[0] + [PAD] * (T - len(w[0])) for w in winners])
    return tokens, torch.tensor([final(w) for w in winners], dtype=torch.float64)


def exhaustive(step, b, max_len, alpha):
    """The best hypothesis of item b over every possible output (tiny vocabulary): (tokens, score)."""
    best = None
    frontier = [([BOS], 0.0)]
    for depth in range(1, max_len + 1):
        logp = torch.log_softmax(step(torch.tensor([f[0] for f in frontier]), torch.full((len(frontier),), b)), -1).tolist()
        nxt = []
        for i, (toks, s) in enumerate(frontier):
            for v, lp in enumerate(logp[i]):
                h = (toks + [v], s + lp)
                if v == EOS or depth == max_len:
                    score = gnmt(h[1], depth, alpha)
                    if best is None or score > best[1]:
                        best = (h[0], score)
                else:
                    nxt.append(h)
        frontier = nxt
    return best


def judge_cached_greedy(spec, src, src_mask, max_len, *, exclude_self=False, pe_first_row=False,
                        pe_next_row=False, no_final_norm=False, raw_keys=False):
    """The judge's own cached decoder, written from the weights (or one known mistake): (tokens, logits
    per step). Correct, it gives the plain greedy loop's tokens."""
    p, n, norm_first, table = spec["params"], spec["layers"], spec["norm_first"], spec["table"]
    B, dk = src.size(0), D // HEADS
    judge = TorchModel(p, n, norm_first, "relu", torch.float64, MAX_POS)
    with torch.no_grad():
        memory = judge.encode(src, src_mask)

    def lin(x, name):
        return F.linear(x, p[f"{name}.weight"], p[f"{name}.bias"])

    def norm(x, name):
        return F.layer_norm(x, (D,), p[f"{name}.weight"], p[f"{name}.bias"])

    def heads(x):
        return x.reshape(B, -1, HEADS, dk).transpose(1, 2)

    def attend(q, k, v, mask=None):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        s = q @ k.transpose(-1, -2) / math.sqrt(dk)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, -1) @ v

    def merge(x):
        return x.transpose(1, 2).reshape(B, -1, D)

    cross = [(heads(lin(memory, f"decoder.layers.{i}.cross_attn.w_k")),
              heads(lin(memory, f"decoder.layers.{i}.cross_attn.w_v"))) for i in range(n)]
    cache = [(memory.new_zeros(B, HEADS, 0, dk), memory.new_zeros(B, HEADS, 0, dk)) for _ in range(n)]
    ys = torch.full((B, 1), BOS, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    seen = []
    for t in range(max_len):
        row = 0 if pe_first_row else t + 1 if pe_next_row else t
        x = F.embedding(ys[:, -1:], p["tgt_embed.embedding.weight"]) * math.sqrt(D) + table[row]
        for i in range(n):
            L = f"decoder.layers.{i}"

            def self_attention(h, kv_from):
                q = heads(lin(h, f"{L}.self_attn.w_q"))
                k, v = heads(lin(kv_from, f"{L}.self_attn.w_k")), heads(lin(kv_from, f"{L}.self_attn.w_v"))
                old_k, old_v = cache[i]
                cache[i] = (torch.cat([old_k, k], 2), torch.cat([old_v, v], 2))
                keys, values = (old_k, old_v) if exclude_self else cache[i]
                return lin(merge(attend(q, keys, values)), f"{L}.self_attn.w_o")

            def cross_attention(h):
                q = heads(lin(h, f"{L}.cross_attn.w_q"))
                return lin(merge(attend(q, *cross[i], src_mask[:, None])), f"{L}.cross_attn.w_o")

            def ffn(h):
                return lin(torch.relu(lin(h, f"{L}.feed_forward.linear1")), f"{L}.feed_forward.linear2")

            if norm_first:
                h = norm(x, f"{L}.norm1")
                x = x + self_attention(h, x if raw_keys else h)
                x = x + cross_attention(norm(x, f"{L}.norm2"))
                x = x + ffn(norm(x, f"{L}.norm3"))
            else:
                x = norm(x + self_attention(x, x), f"{L}.norm1")
                x = norm(x + cross_attention(x), f"{L}.norm2")
                x = norm(x + ffn(x), f"{L}.norm3")
        if norm_first and not no_final_norm:
            x = norm(x, "decoder.norm")
        logits = F.linear(x[:, -1], p["generator.weight"], p["generator.bias"])
        seen.append(logits)
        nxt = torch.where(done, torch.full_like(logits[:, 0], PAD, dtype=torch.long), logits.argmax(-1))
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == EOS)
        if bool(done.all()):
            break
    return ys, seen


def step_flops(B, t, Ls, layers, d=D, d_ff=D_FF, vocab=V):
    """Multiply FLOPs of one cached step with t positions cached (the newest included): the newest
    position's projections, attention over t keys and Ls memory positions, feed-forward, generator."""
    per_layer = (4 * 2 * B * d * d + 4 * B * t * d          # self-attention: q, k, v, o; scores and sum
                 + 2 * 2 * B * d * d + 4 * B * Ls * d       # cross-attention: q, o; scores and sum over memory
                 + 2 * 2 * B * d * d_ff)                    # feed-forward
    return layers * per_layer + 2 * B * d * vocab


def encoding_flops(B, Ls, layers, d=D, d_ff=D_FF):
    """Multiply FLOPs of the encoder on Ls positions, and of the keys and values of memory that every
    decoder layer's cross-attention needs (computed once by a cached decoder)."""
    encoder = layers * (4 * 2 * B * Ls * d * d + 4 * B * Ls * Ls * d + 2 * 2 * B * Ls * d * d_ff)
    return encoder + layers * 2 * 2 * B * Ls * d * d


def uncached_step_flops(B, t, Ls, layers, d=D, d_ff=D_FF, vocab=V):
    """The same for a decoder run on the whole prefix of t positions (generator on the last one)."""
    per_layer = (4 * 2 * B * t * d * d + 4 * B * t * t * d                      # self-attention
                 + 2 * 2 * B * t * d * d + 2 * 2 * B * Ls * d * d + 4 * B * t * Ls * d   # cross: q, o; k, v of memory
                 + 2 * 2 * B * t * d * d_ff)
    return layers * per_layer + 2 * B * d * vocab


# ---- the catalogue ---------------------------------------------------------------------------------

_SAMPLING = (
    ("temperature_ignored", "the temperature has no effect on the distribution: divide the logits by it before the "
     "softmax (dividing the probabilities after the softmax changes nothing once they are renormalised).",
     {"temp_ignored": True}),
    ("temperature_multiplied", "the logits are multiplied by the temperature; divide them by it (a temperature below "
     "1 sharpens the distribution).", {"temp_multiplied": True}),
    ("top_k_plus_one", "top-k keeps k + 1 tokens: keep exactly the k largest logits (torch.topk(logits, k)).",
     {"k_extra": 1}),
    ("top_k_minus_one", "top-k keeps k - 1 tokens: keep exactly the k largest logits (torch.topk(logits, k)).",
     {"k_extra": -1}),
    ("top_p_drops_crossing_token", "top-p drops the token whose probability makes the total cross top_p; it must be "
     "kept: keep a token when the total of the tokens BEFORE it (in descending order) is < top_p.",
     {"drop_crossing": True}),
    ("top_p_before_top_k_renormalised", "top-p is computed on the distribution before top-k; compute it on the "
     "softmax of what top-k kept (renormalised).", {"p_before_renorm": True}),
    ("temperature_after_filter", "the temperature is applied after top-k/top-p filtering, so top-p measures the "
     "untempered distribution; divide the logits by the temperature first, then filter.", {"temp_late": True}),
    ("top_p_not_scattered_back", "the top-p mask is applied in sorted order to the vocabulary: map it back to "
     "vocabulary order with the sort's indices (mask.scatter(-1, sorted_indices, keep_sorted)).",
     {"p_unscattered": True}),
)
_SAMPLING_DEVIATIONS = CATALOGUE.deviations("sampling", filtered_probs, _SAMPLING)

CATALOGUE.deviations("beam", judge_beam, (
        ("duplicate_start_beams", "the search starts with beam_size copies of [<bos>], all at score 0, so the beam "
         "fills with duplicates; start from one hypothesis: slot 0 at score 0, the others at -inf.",
         {"dup_start": True}),
        ("finished_beams_extended", "finished hypotheses keep being extended with real tokens; after <eos> a "
         "hypothesis may only be extended by pad_id, at no cost (its score stays).", {"extend_finished": True}),
        ("finished_beams_pay_for_pad", "a finished hypothesis pays log p(<pad>) for its pad; it is extended by "
         "pad_id at no cost (score unchanged).", {"pad_cost": True}),
        ("length_penalty_forgotten", "the final choice uses the raw summed log-probability; it uses the normalised "
         "score sum_logprob / ((5 + n) / 6) ** length_penalty (use length_penalty_score), which is also what "
         "`scores` returns.", {"no_norm": True}),
        ("length_counts_bos", "the length n counts <bos>; n is the number of tokens AFTER <bos> up to and "
         "including the first <eos>.", {"n_extra": 1}),
        ("length_without_eos", "the length n leaves out <eos>; n counts the tokens after <bos> up to and "
         "including the first <eos>.", {"eos_uncounted": True}),
        ("length_counts_pads", "the length n counts the pads after <eos>; n stops at the first <eos> (max_len only "
         "for a hypothesis that never finished).", {"n_counts_pads": True}),
        ("normalised_every_step", "the hypotheses are ranked by the normalised score at every step; keep the "
         "beam_size best by summed log-probability, and normalise only to choose the final result.",
         {"norm_each_step": True}),
        ("stops_when_best_finished", "the search stops as soon as the best hypothesis has finished; it goes on "
         "until every hypothesis has (or max_len steps).", {"stop_top": True})))


# ---- what each decoding function must return -------------------------------------------------------

def expected_tokens(func, spec, src, src_mask, max_len, gen_seed=0):
    """What `func` must return (tokens only) with the contract's defaults."""
    step = stepper(spec, src, src_mask)
    if func == "beam_search":
        return judge_beam(step, src.size(0), max_len, 4, 0.6)[0]
    if func == "sample_decode":
        return judge_sample(step, src.size(0), max_len, gen_seed)[0]
    return judge_greedy(step, src.size(0), max_len)[0]
