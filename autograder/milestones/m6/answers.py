"""Milestone 6's right answers, as the judge computes them: its own copy of each model (stepper: the
oracle, or reference.TorchModel with the same weights), a plain greedy loop, a sampler replaying the
contract's one multinomial call per step with the same seed, a beam search kept as Python lists per
item, an exhaustive search, its own cached decoder written from the weights, and the matrix-multiply
FLOPs a cached and an uncached step need. Each decoder has switches that reproduce known mistakes;
the CATALOGUE entries (each mistake with its own computation) are registered here, beside them, by the
kind of answer they reproduce:
- "format":          (right, max_len, pad) -> what a decoding function returns with a mistake of the
                     output format (no <bos> column, one step too many, 0 written for pad_id), from
                     `right(n)`, the function's right answer for max_len = n;
- "greedy":          (spec, src, src_mask, max_len, pad) -> greedy's tokens with one mistake;
- "cached":          (spec, src, src_mask, max_len, pad) -> (tokens, logits per step) of the cached decoder;
- "sampling":        (logits, temperature, top_k, top_p) -> the filtered distribution;
- "sample_run":      (step, B, max_len, seed, temperature, top_k, top_p, pad) -> a seeded run's tokens;
- "sampling_errors": (logits, temperature, top_k, top_p) -> raises what the mistake raises;
- "dtype_errors":    (logits, ...) -> raises what the mistake raises on a float32 model, whatever the function;
- "beam":            (step, B, max_len, K, alpha, pad=...) -> (tokens, scores)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.milestones.reference import D, D_FF, HEADS, TorchModel
from autograder.milestones.m6.mistakes import CATALOGUE
from autograder.milestones.m6.recipes import OracleModel

PAD, BOS, EOS = 0, 1, 2
V = 9                 # vocabulary of every model here: <pad> <bos> <eos> and six tokens
OTHER_PAD = V - 1     # the pad_id of the runs with a pad id other than 0 (a token those models never generate)
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
    # A Transformer is computed in float64 whatever the spec's dtype: a float32 model's logits are these to
    # float32 accuracy (the checks choose float32 models whose decisions are far from ties).
    model = TorchModel(spec["params"], spec["layers"], spec["norm_first"], "relu", torch.float64, MAX_POS)
    with torch.no_grad():
        memory = model.encode(src, src_mask)

    def step(prefixes, rows):
        t = prefixes.size(1)
        mask = torch.ones(t, t, dtype=torch.bool).tril() if causal else None
        with torch.no_grad():
            return model.gen(model.decode(prefixes, memory[rows], src_mask[rows], mask)[:, -1])
    return step


def _decode(choose, B, max_len, pad, pad_after_eos, stop_on_any=False):
    """The loop greedy and sampled decoding share: from <bos>, append `choose(ys)` ([B] tokens) each step, pad_id
    in the rows that have ended (unless pad_after_eos is off: a known mistake), until every row has written <eos>
    or max_len steps have run. -> (tokens [B, T], steps run)."""
    ys = torch.full((B, 1), BOS, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    steps = 0
    for _ in range(max_len):
        nxt = choose(ys)
        steps += 1
        if pad_after_eos:
            nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == EOS)
        if bool(done.any() if stop_on_any else done.all()):      # stop_on_any: a known mistake
            break
    return ys, steps


def judge_greedy(step, B, max_len, *, pad=PAD, pad_after_eos=True, stop_on_any=False):
    """(tokens [B, T], steps run, logits per step [B, V])."""
    seen = []

    def choose(ys):
        seen.append(step(ys, torch.arange(B)))
        return seen[-1].argmax(-1)
    return (*_decode(choose, B, max_len, pad, pad_after_eos, stop_on_any), seen)


def greedy_by_eos_bias(spec, src, src_mask, max_len, biases):
    """Greedy's tokens [B, T] on the Transformer of `spec` with each of these generator biases for <eos>, all
    decoded as one batch (the same tokens as one greedy run per bias, but for trailing all-pad columns)."""
    model = TorchModel(spec["params"], spec["layers"], spec["norm_first"], "relu", torch.float64, MAX_POS)
    n, B = len(biases), src.size(0)
    shift = torch.tensor(biases, dtype=torch.float64).repeat_interleave(B) - spec["params"]["generator.bias"][EOS]
    with torch.no_grad():
        memory = model.encode(src, src_mask).repeat(n, 1, 1)
        mask = src_mask.repeat(n, 1, 1)
        ys = torch.full((n * B, 1), BOS, dtype=torch.long)
        done = torch.zeros(n * B, dtype=torch.bool)
        for _ in range(max_len):
            t = ys.size(1)
            logits = model.gen(model.decode(ys, memory, mask, torch.ones(t, t, dtype=torch.bool).tril())[:, -1])
            logits[:, EOS] += shift
            nxt = torch.where(done, torch.full_like(done, PAD, dtype=torch.long), logits.argmax(-1))
            ys = torch.cat([ys, nxt[:, None]], 1)
            done = done | (nxt == EOS)
            if bool(done.all()):
                break
    return list(ys.reshape(n, B, -1))


def greedy_run(spec, src, src_mask, max_len, pad=PAD, *, causal=True, pad_after_eos=True, stop_on_any=False):
    """greedy_decode's tokens on the model of `spec` (or one known mistake's)."""
    return judge_greedy(stepper(spec, src, src_mask, causal=causal), src.size(0), max_len, pad=pad,
                        pad_after_eos=pad_after_eos, stop_on_any=stop_on_any)[0]


def filtered_probs(logits, temperature=1.0, top_k=None, top_p=None, *, temp_ignored=False, temp_multiplied=False,
                   k_extra=0, drop_crossing=False, p_before_renorm=False, p_on_raw=False, p_unscattered=False,
                   temp_late=False, p_across_rows=False):
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
        probs = torch.softmax(logits if p_on_raw else unfiltered if p_before_renorm else z, -1)
        sorted_p, order = probs.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p
        keep_sorted = (sorted_p.cumsum(-1) < top_p) if drop_crossing else (before < top_p)
        keep_sorted[:, 0] = True
        keep = keep_sorted if p_unscattered else torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        if p_across_rows:   # a token removed from any row is removed from every row (an index meant for one row)
            keep = keep.all(0, keepdim=True).expand_as(keep)
        z = z.masked_fill(~keep, float("-inf"))
    return torch.softmax(z, -1)


def judge_sample(step, B, max_len, seed, temperature=1.0, top_k=None, top_p=None, *, pad=PAD, pad_after_eos=True,
                 **dev):
    """(tokens [B, T], steps run) of the contract's sampler with this seed (or one known mistake's)."""
    gen = torch.Generator().manual_seed(seed)

    def choose(ys):
        probs = filtered_probs(step(ys, torch.arange(B)), temperature, top_k, top_p, **dev)
        return torch.multinomial(probs, 1, generator=gen)[:, 0]
    return _decode(choose, B, max_len, pad, pad_after_eos)


def sample_run(step, B, max_len, seed, temperature=1.0, top_k=None, top_p=None, pad=PAD, **dev):
    """A seeded sample_decode run's tokens (or one known mistake's)."""
    return judge_sample(step, B, max_len, seed, temperature, top_k, top_p, pad=pad, **dev)[0]


def gnmt(score, n, alpha):
    return score / ((5.0 + n) / 6.0) ** alpha


def judge_beam(step, B, max_len, K, alpha, *, pad=PAD, dup_start=False, extend_finished=False, pad_cost=False,
               no_norm=False, n_extra=0, eos_uncounted=False, n_counts_pads=False, norm_each_step=False,
               norm_kept=False, stop_top=False, finished_only=None, raw_scores=False, mixed_rows=False,
               margins=None):
    """The beam search of the contract with Python lists (or one known mistake): (tokens [B, T], scores [B]).
    A hypothesis is (tokens, summed log-probability, finished, n). The items move in lockstep, as in a
    batched search (several mistakes show only through the batch's common number of steps). Hypothesis j of
    item b is the student's slot j (topk keeps them best first), row b * K + j of the [B * K] batch.
    `margins`: a list that receives, at each step and for the final choice, the gap between the last
    hypothesis kept and the first left out (how far the result is from a tie)."""
    def length(h):
        n = len(h[0]) - 1 if n_counts_pads else h[3]
        return n + n_extra - (1 if eos_uncounted and h[2] else 0)

    def normalised(h):          # the score that chooses the result
        return h[1] if no_norm or norm_kept else gnmt(h[1], length(h), alpha)

    def gap(keys, i):
        if margins is not None and len(keys) > i and math.isfinite(keys[i - 1]) and math.isfinite(keys[i]):
            margins.append(keys[i - 1] - keys[i])

    beams = [[([BOS], 0.0, False, 0)] * (K if dup_start else 1) for _ in range(B)]
    for _ in range(max_len):
        if all(h[2] for item in beams for h in item):
            break
        if stop_top and all(max(item, key=lambda h: h[1])[2] for item in beams):
            break
        prefixes = torch.tensor([h[0] for item in beams for h in item])
        rows = torch.tensor([(b * K + j) % B if mixed_rows else b
                             for b, item in enumerate(beams) for j in range(len(item))])
        logp = torch.log_softmax(step(prefixes, rows), -1).tolist()
        j, new = 0, []
        for item in beams:
            cands = []
            for toks, s, fin, n in item:
                if fin and extend_finished == "scored_pads":      # every token's log p added, pad written
                    cands += [(toks + [pad], s + lp, True, n) for lp in logp[j]]
                elif fin and extend_finished == "free_copies":    # every token at cost 0, pad written: V copies
                    cands += [(toks + [pad], s, True, n) for _ in logp[j]]
                elif fin and not extend_finished:
                    cands.append((toks + [pad], s + (logp[j][pad] if pad_cost else 0.0), True, n))
                else:
                    cands += [(toks + [v], s + lp, fin or v == EOS, n + (0 if fin else 1)) for v, lp in enumerate(logp[j])]
                j += 1
            if norm_kept:        # the normalised score replaces the running sum
                cands = [(c[0], gnmt(c[1], length(c), alpha), c[2], c[3]) for c in cands]
            rank = (lambda c: gnmt(c[1], length(c), alpha)) if norm_each_step else (lambda c: c[1])
            ranked = sorted(cands, key=rank, reverse=True)
            gap([rank(c) for c in ranked], K)
            new.append(ranked[:K])
        beams = new
    winners = []
    for item in beams:
        pool, key = item, normalised
        if finished_only == "fallback" and any(h[2] for h in item):
            pool = [h for h in item if h[2]]
        elif finished_only == "masked":
            key = lambda h: normalised(h) if h[2] else float("-inf")        # noqa: E731
        gap(sorted((key(h) for h in pool), reverse=True), 1)
        best = max(pool, key=key)
        winners.append((best, best[1] if raw_scores else key(best)))
    T = max(len(w[0][0]) for w in winners)
    tokens = torch.tensor([w[0][0] + [pad] * (T - len(w[0][0])) for w in winners])
    return tokens, torch.tensor([w[1] for w in winners], dtype=torch.float64)


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


def judge_cached_greedy(spec, src, src_mask, max_len, pad=PAD, *, exclude_self=False, pe_first_row=False,
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
        nxt = torch.where(done, torch.full_like(logits[:, 0], pad, dtype=torch.long), logits.argmax(-1))
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

def _tokens_of(value):
    return value[0] if isinstance(value, tuple) else value


def _with_tokens(value, tokens):
    return (tokens, *value[1:]) if isinstance(value, tuple) else tokens


@CATALOGUE.entry("format", "bos_missing", "the result leaves out the <bos> column: column 0 must be bos_id "
                 "(start from a [B, 1] column of bos_id and return it with the generated tokens).")
def without_bos(right, max_len, pad):
    value = right(max_len)
    return _with_tokens(value, _tokens_of(value)[:, 1:])


@CATALOGUE.entry("format", "too_many_steps", "the loop runs max_len + 1 times (as if max_len counted the <bos>), so "
                 "up to max_len + 1 tokens are generated; max_len is the most tokens generated after <bos> "
                 "(for _ in range(max_len)).")
def one_step_too_many(right, max_len, pad):
    return right(max_len + 1)


@CATALOGUE.entry("format", "too_few_steps", "the loop runs max_len - 1 times (as if max_len counted the <bos>), so "
                 "at most max_len - 1 tokens are generated; max_len is the most tokens generated after <bos> "
                 "(for _ in range(max_len)).")
def one_step_too_few(right, max_len, pad):
    return right(max_len - 1) if max_len > 1 else None


@CATALOGUE.entry("format", "eos_replaced_by_pad", "the <eos> itself is overwritten by pad_id: a row keeps its <eos> "
                 "and gets pad_id only at the positions after it.")
def eos_overwritten(right, max_len, pad):
    value = right(max_len)
    tokens = _tokens_of(value)
    return _with_tokens(value, tokens.masked_fill(tokens == EOS, pad)) if (tokens == EOS).any() else None


@CATALOGUE.entry("format", "pads_with_zero", "after <eos> the code writes 0, not pad_id: write the pad_id argument "
                 "(it is 0 in most tests, not always).")
def padded_with_zero(right, max_len, pad):
    if pad == 0:
        return None                          # the same as the right answer: proves nothing
    value = right(max_len)
    tokens = _tokens_of(value)
    eos = (tokens == EOS).long()
    after = (eos.cumsum(1) - eos) > 0        # positions after the first <eos>
    return _with_tokens(value, tokens.masked_fill(after & (tokens == pad), 0))


_GREEDY = CATALOGUE.deviations("greedy", greedy_run)
NO_PAD, NO_MASK, _ = (m for m, _ in _GREEDY)

CATALOGUE.deviations("sample_run", sample_run)

# The cached decoder's mistakes: the judge's cached decoder with the switches of deviations.yaml.
_CACHED_DEVIATIONS = CATALOGUE.deviations("cached", judge_cached_greedy)
# The first of them again, with the sentence for the crash it causes (declared after it: the catalogue keeps the
# sentence above for the id).
EMPTY_CACHE = CATALOGUE.mistake("cache_without_new_position", "at the first step your attention ran over zero keys: "
                                "the newest position must attend to itself too, so append its key and value to the "
                                "cache first, then attend over every cached position.")

_SAMPLING_DEVIATIONS = CATALOGUE.deviations("sampling", filtered_probs)
_ACROSS_ROWS = CATALOGUE.mistakes()["top_p_removed_across_rows"].text     # also raised: an entry below


# Errors of sampling, each raised by the mistake's own computation on the logits of a step (Catalogue.raising
# recognises the student's error by its type and message); "dtype_errors" below, of every function.
_NOT_CLAMPED = ("top_k is not clamped to the vocabulary size: with top_k >= V every token is kept (the docstring), "
                "so use k = min(top_k, logits.size(-1)) (torch.topk and indexing fail beyond V).")


@CATALOGUE.entry("sampling_errors", "top_k_not_clamped", _NOT_CLAMPED)
def topk_unclamped(logits, temperature, top_k, top_p):
    z = logits / temperature
    return z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[:, -1:], float("-inf"))


@CATALOGUE.entry("sampling_errors", "top_k_not_clamped", _NOT_CLAMPED)
def kth_indexed_unclamped(logits, temperature, top_k, top_p):
    z = logits / temperature
    return z.masked_fill(z < z.sort(-1, descending=True).values[:, top_k - 1].unsqueeze(-1), float("-inf"))


@CATALOGUE.entry("sampling_errors", "top_k_not_clamped", _NOT_CLAMPED)
def kth_sliced_unclamped(logits, temperature, top_k, top_p):
    z = logits / temperature
    return z.masked_fill(z < z.sort(-1, descending=True).values[:, top_k - 1:top_k], float("-inf"))


@CATALOGUE.entry("sampling_errors", "top_k_not_clamped", _NOT_CLAMPED)
def kthvalue_unclamped(logits, temperature, top_k, top_p):
    z = logits / temperature
    return z.masked_fill(z < torch.kthvalue(z, z.size(-1) - top_k + 1, dim=-1, keepdim=True).values, float("-inf"))


@CATALOGUE.entry("sampling_errors", "top_p_removed_across_rows", _ACROSS_ROWS)
def top_p_across_rows(logits, temperature, top_k, top_p):
    """Raises as torch.multinomial does when a row has nothing left (its probabilities are NaN)."""
    if top_p is None:
        return None
    probs = filtered_probs(logits, temperature, top_k, top_p, p_across_rows=True)
    return torch.multinomial(probs, 1)


def _float64_fill(logits, *settings):
    """What a float64-only constant does to a float32 tensor of logits: raises (a float64 one works)."""
    return logits.masked_fill(torch.ones_like(logits, dtype=torch.bool), torch.finfo(torch.float64).min)


# An error of any decoding function on a float32 model: (logits, ...) -> raises what the mistake raises.
FILL_OVERFLOWS = CATALOGUE.mistake(
    "fill_value_overflows", "a tensor is filled with a number float32 cannot hold (for example "
    "torch.finfo(torch.float64).min or -1e300, written for the float64 models of the public tests): it works on "
    "float64 models only. Use float('-inf') (or torch.finfo(x.dtype).min, the tensor's own dtype).",
    kind="dtype_errors", reproduce=_float64_fill)


BEAM_DEVIATIONS = CATALOGUE.deviations("beam", judge_beam)


# ---- what each decoding function must return -------------------------------------------------------

def expected_tokens(func, spec, src, src_mask, max_len, gen_seed=0, pad=PAD):
    """What `func` must return (tokens only) with the contract's defaults."""
    step = stepper(spec, src, src_mask)
    if func == "beam_search":
        return judge_beam(step, src.size(0), max_len, 4, 0.6, pad=pad)[0]
    if func == "sample_decode":
        return judge_sample(step, src.size(0), max_len, gen_seed, pad=pad)[0]
    return judge_greedy(step, src.size(0), max_len, pad=pad)[0]
