"""Hidden checks for milestone 6: greedy decoding, sampling, beam search and the KV cache.

The judge decodes with its own code: a plain greedy loop, a sampler replaying the contract's one
multinomial call per step with the same seed, a beam search kept as Python lists per item, an
exhaustive search, and its own cached decoder written from the weights. The models are
- oracles (OracleModel, below): scripted logits, a fixed pseudo-random function of the source, the
  prefix and the position, with items ending at chosen steps; the same class runs in the worker
  (sent as source) and here, so both sides see the same logits;
- small random Transformers: milestone 4's reference in the worker, reference.TorchModel (PyTorch's
  layers) here, with the same weights.
Only tokens, scores, logits, counts and FLOPs come back from the worker. CATALOGUE reproduces the known
mistakes (each a flag of the judge's own decoders) to name them.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder.grading.checks import CheckFailed, NotJudged, Tester, describe, group, shape_str, stand_ins
from autograder.milestones.reference import D, D_FF, HEADS, TorchModel, model_params, pe_table
from autograder.grading.diagnosis import reproducing
from autograder.milestones.m6.mistakes import (
    CATALOGUE, BEAM_ITEMS_MIXED, BOS_MISSING, CACHE_NOT_USED, GRAD_ENABLED, MODE_NOT_RESTORED,
    NEXT_TOKEN_LOGITS_WRONG, NOT_EVAL_MODE, NO_EARLY_STOP, NUMPY_WORK, PYTHON_LOOP, SAMPLING_NOT_REPRODUCIBLE,
    SCORES_DTYPE, TEMPERATURE_NOT_CHECKED, TOKENS_DTYPE, TOO_MANY_STEPS)

PAD, BOS, EOS = 0, 1, 2
V = 9                 # vocabulary of every model here: <pad> <bos> <eos> and six tokens
MAX_POS = 40          # the random Transformers' positional table
PRELUDE = "import math\nimport torch\nfrom torch import nn\n"


# ---- the oracle: a scripted model (this source also runs in the worker) ---------------------------

class OracleHead(nn.Module):
    """The oracle's generator: features [..., 4] (source hash, source length, prefix hash, position)
    -> logits [..., V]. <pad> and <bos> get -1e4 (never chosen); <eos> gets a bonus once the position
    reaches the item's source length + eos_after, so items end at different steps."""

    def __init__(self, vocab, seed, scale, src_weight, prefix_weight, eos_after, eos_boost, eos_bias, len_weight):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("freq", torch.rand(vocab, generator=g, dtype=torch.float64) * 3 + 1)
        self.register_buffer("phase", torch.rand(vocab, generator=g, dtype=torch.float64) * 6.283)
        self.register_buffer("pos_freq", torch.rand(vocab, generator=g, dtype=torch.float64) * 2 + 0.5)
        self.scale, self.src_weight, self.prefix_weight = scale, src_weight, prefix_weight
        self.eos_after, self.eos_boost, self.eos_bias, self.len_weight = eos_after, eos_boost, eos_bias, len_weight

    def forward(self, h):
        src_hash, src_len, prefix_hash, pos = h.unbind(-1)
        s = self.src_weight * src_hash + self.prefix_weight * prefix_hash
        angle = s[..., None] * self.freq + pos[..., None] * self.pos_freq + self.phase
        logits = self.scale * torch.sin(angle)
        ends = (pos + 1 >= self.len_weight * src_len + self.eos_after).to(logits.dtype)
        eos = logits[..., 2:3] + self.eos_bias + self.eos_boost * ends[..., None]
        return torch.cat([torch.full_like(logits[..., :2], -1e4), eos, logits[..., 3:]], dim=-1)


class OracleModel(nn.Module):
    """encode / decode / generator / forward as milestone 4's Transformer has them. memory carries the
    source's hash and length; decode's position i carries a hash of the tokens 0..i and i itself."""

    def __init__(self, vocab=9, seed=0, scale=2.0, src_weight=1.0, prefix_weight=1.0, eos_after=0,
                 eos_boost=0.0, eos_bias=0.0, len_weight=1.0):
        super().__init__()
        g = torch.Generator().manual_seed(seed + 7919)
        self.register_buffer("src_w", torch.rand(64, generator=g, dtype=torch.float64) + 0.5)
        self.register_buffer("pos_w", torch.rand(64, generator=g, dtype=torch.float64) + 0.5)
        self.generator = OracleHead(vocab, seed, scale, src_weight, prefix_weight, eos_after, eos_boost, eos_bias,
                                    len_weight)
        # A weight of exactly 1: decoding with gradients on builds an autograd graph, as a real model's would.
        self.gain = nn.Parameter(torch.ones((), dtype=torch.float64))

    def encode(self, src, src_mask=None):
        keep = torch.ones_like(src, dtype=torch.bool) if src_mask is None else src_mask[:, 0, :]
        w = self.src_w[: src.size(1)]
        src_hash = ((src + 1).to(w.dtype) * w * keep).sum(-1)                  # [B]
        length = keep.sum(-1).to(w.dtype)                                        # [B]
        return torch.stack([src_hash, length], -1)[:, None, :].expand(src.size(0), src.size(1), 2).clone()

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        B, t = tgt.shape
        if src_mask is not None:
            src_mask.expand(B, 1, memory.size(1))                               # as a real model would need
        w = self.pos_w[:t]
        prefix = torch.cumsum((tgt + 1).to(w.dtype) * w, dim=1) * self.gain      # [B, t]
        pos = torch.arange(t, dtype=w.dtype, device=tgt.device).expand(B, t)
        return torch.cat([memory[:, :1, :].expand(B, t, 2), prefix[..., None], pos[..., None]], dim=-1)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))


# ---- recipes: run in the worker beside the student's decoding.py ---------------------------------

def make_model(spec):
    """The model a spec describes: an oracle, or the course's Transformer (milestone 4) with given weights."""
    if spec["kind"] == "oracle":
        return OracleModel(**spec["options"])
    from model import Transformer
    table = spec["table"]
    model = Transformer(spec["vocab"], spec["vocab"], d_model=table.size(1), num_heads=spec["heads"],
                        num_layers=spec["layers"], d_ff=spec["d_ff"], dropout=spec["dropout"],
                        max_len=table.size(0), norm_first=spec["norm_first"]).double()
    with torch.no_grad():
        own = dict(model.named_parameters())
        for k, v in spec["params"].items():
            own[k].copy_(v)
        model.pos_encoding.pe.copy_(table)
    return model


def recipe_decode(spec, func, src, src_mask, max_len, kwargs, train=True, gen_seed=None, logits=False):
    """Run the student's `func` on the model of `spec` (in train mode unless `train` is False). What is seen
    goes to the grader's ledger, never into anything the student's code can reach: each call of
    model.generator, seen in its own forward (its rows, whether any module was in training mode, whether
    gradients were on, with `logits` the logits; the ledger adds the matrix-multiply FLOPs so far), each
    torch.multinomial call, and for the whole run the ops (dropout ops, ops that built an autograd graph)."""
    import sys
    import decoding
    model = make_model(spec)
    model.train(train)
    head = model.generator
    base = type(head)

    def forward(self, x):
        out = base.forward(self, x)
        sys.audit("course.event", {"kind": "generator", "rows": out.size(0) if out.dim() >= 2 else 1,
                                   "mode": any(m.training for m in model.modules()), "grad": torch.is_grad_enabled(),
                                   "logits": (out.detach().reshape(-1, out.size(-1)).clone()
                                              if logits and out.dim() >= 2 else None)})
        return out
    head.__class__ = type(base.__name__, (base,), {"forward": forward, "__module__": base.__module__})
    real, real_method = torch.multinomial, torch.Tensor.multinomial

    def counted(probs, num_samples, *args, **kw):
        sys.audit("course.event", {"kind": "multinomial", "shape": list(probs.shape), "samples": num_samples})
        return real(probs, num_samples, *args, **kw)
    torch.multinomial = counted
    torch.Tensor.multinomial = lambda self, num_samples, *args, **kw: counted(self, num_samples, *args, **kw)
    if gen_seed is not None:
        kwargs = dict(kwargs, generator=torch.Generator().manual_seed(gen_seed))
    try:
        result = getattr(decoding, func)(model, src, src_mask, max_len, 1, 2, 0, **kwargs)
    finally:
        torch.multinomial, torch.Tensor.multinomial = real, real_method
    return {"result": result, "modes_after": [m.training for m in model.modules()]}


def seen_in(reply) -> dict:
    """What recipe_decode's model saw, from the ledger: rows, modes, gradients, logits and FLOPs so far at
    each generator call; [shape, samples] of each multinomial call; and the ledger's FLOPs at the end."""
    record = reply["record"]
    seen = {"rows": [], "modes": [], "grad": [], "logits": [], "flops": [], "multinomial": [],
            "total_flops": record["flops"],
            "dropout_ops": sum(record["counts"].get(op, 0) for op in ("aten::native_dropout", "aten::bernoulli_")),
            "grad_ops": record["grad_ops"], "numpy": record["numpy"]}
    for event, flops in reply["record"]["events"]:
        if not isinstance(event, dict):
            continue
        if event.get("kind") == "generator":
            seen["rows"].append(event["rows"])
            seen["modes"].append(event["mode"])
            seen["grad"].append(event["grad"])
            seen["flops"].append(flops)
            if event.get("logits") is not None:
                seen["logits"].append(event["logits"])
        elif event.get("kind") == "multinomial":
            seen["multinomial"].append([event["shape"], event["samples"]])
    return seen


def recipe_raises(spec, func, src, src_mask, kwargs):
    """The name of the exception the student's `func` raises with `kwargs` (None when it returns)."""
    import decoding
    model = make_model(spec).eval()
    try:
        getattr(decoding, func)(model, src, src_mask, 3, 1, 2, 0, **kwargs)
    except Exception as e:
        return {"raised": type(e).__name__, "message": str(e)[:200]}
    return {"raised": None}


def recipe_next_token_logits(spec, src, src_mask, ys):
    """The student's optional helper `_next_token_logits(model, ys, memory, src_mask)`, if it can be called
    with the stub's arguments."""
    import decoding
    fn = getattr(decoding, "_next_token_logits", None)
    if fn is None:
        return {"status": "missing"}
    model = make_model(spec).eval()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        try:
            return {"status": "ok", "logits": fn(model, ys, memory, src_mask)}
        except NotImplementedError:
            return {"status": "not_implemented"}
        except Exception as e:
            return {"status": type(e).__name__}


HELPERS = (PRELUDE, OracleHead, OracleModel, make_model)


def _stand_in_next_token_logits(model, ys, memory, src_mask):
    t = ys.size(1)
    mask = torch.ones(t, t, dtype=torch.bool, device=ys.device).tril()
    return model.generator(model.decode(ys, memory, src_mask, mask)[:, -1])


stand_ins("m6", _next_token_logits=_stand_in_next_token_logits)


# ---- the judge's models and decoders --------------------------------------------------------------

def oracle_spec(**options):
    return {"kind": "oracle", "options": options}


def transformer_spec(t: Tester, layers, norm_first, eos_bias=0.0, dropout=0.1):
    p = model_params(t, V, V, layers, norm_first)
    p["generator.weight"] = p["generator.weight"] * 4.0          # sharper, more varied predictions
    bias = p["generator.bias"].clone()
    bias[PAD] = bias[BOS] = -1e4                                # never generated: the format stays unambiguous
    bias[EOS] = eos_bias
    p["generator.bias"] = bias
    return {"kind": "transformer", "params": p, "table": pe_table(MAX_POS, D), "vocab": V, "heads": HEADS,
            "layers": layers, "d_ff": D_FF, "dropout": dropout, "norm_first": norm_first}


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

NO_PAD = CATALOGUE.mistake("no_pad_after_eos", "after a sequence's <eos> the loop keeps appending the model's choices; "
                           "every later position must be pad_id (keep a `finished` flag per row and write pad_id where it is set).")

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

_CACHED = (
        ("cache_without_new_position", "the newest position does not attend to itself: its own key and value must "
         "be in the cache before it attends (append, then attend over every cached position).",
         {"exclude_self": True}),
        ("cached_position_zero", "every new token gets the positional encoding of position 0; the token at "
         "position t gets model.pos_encoding.pe[t].", {"pe_first_row": True}),
        ("cached_position_off_by_one", "the new token gets the positional encoding of the next position; the "
         "token at position t (the <bos> is at 0) gets pe[t].", {"pe_next_row": True}),
        ("cached_final_norm_missing", "the decoder's final norm (model.decoder.norm, pre-LN) is not applied "
         "after the last layer.", {"no_final_norm": True}),
        ("cached_pre_ln_raw_keys", "in pre-LN the new position's keys and values come from the raw stream; they "
         "come from norm1(x), as its query does.", {"raw_keys": True}))
_CACHED_DEVIATIONS = [(CATALOGUE.mistake(_id, _text), _dev) for _id, _text, _dev in _CACHED]


# ---- reading what came back -----------------------------------------------------------------------

def trimmed(tokens: torch.Tensor) -> torch.Tensor:
    """Without trailing columns that are pad in every row (they carry no meaning)."""
    keep = tokens.size(1)
    while keep > 1 and bool((tokens[:, keep - 1] == PAD).all()):
        keep -= 1
    return tokens[:, :keep]


def same_tokens(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.dim() == 2 and trimmed(a).shape == trimmed(b).shape and \
        bool((trimmed(a) == trimmed(b)).all())


def expect_format(t: Tester, tokens, what, B, max_len, after_eos=None):
    """The output format every decoding function shares: int64 [B, T], <bos> first, pad after <eos>.
    `after_eos`: the Mistake that explains tokens after <eos> (default: greedy's)."""
    after_eos = after_eos or NO_PAD
    t.expect_tensor(tokens, what)
    if tokens.dim() != 2 or tokens.size(0) != B:
        t.fail(f"{what} should be a [B, T] = [{B}, T] tensor of token ids, but it has shape {shape_str(tokens.shape)}.")
    if tokens.dtype != torch.long:
        t.fail(f"{what} has dtype {str(tokens.dtype).replace('torch.', '')}; token ids are int64 (torch.long).",
               TOKENS_DTYPE)
    if not bool((tokens[:, 0] == BOS).all()):
        t.fail(f"{what}: column 0 should be bos_id = {BOS} in every row, but it is {tokens[:, 0].tolist()}: start "
               f"from a [B, 1] column of bos_id and keep it in the result.", BOS_MISSING)
    if tokens.size(1) > max_len + 1:
        t.fail(f"{what} has {tokens.size(1)} columns for max_len={max_len}; at most max_len + 1 = {max_len + 1} "
               f"(<bos> and up to max_len generated tokens).", TOO_MANY_STEPS)
    for b, row in enumerate(tokens.tolist()):
        if EOS in row:
            after = row[row.index(EOS) + 1:]
            if any(x != PAD for x in after):
                t.fail(f"{what}: row {b} is {row}; after its <eos> (id {EOS}) every position should be pad_id = {PAD}. "
                       f"Likely cause: {after_eos.text}", after_eos)


def steps_run(got, rows_per_step):
    """Decoding steps the student's code ran: rows that went through model.generator / rows per step (a
    loop over the batch calls it once per row, and that is not more steps)."""
    return math.ceil(sum(got["rows"]) / rows_per_step)


def expect_torch_only(t: Tester, got, what):
    """Work is counted in tensor operations: a decoder that computes in numpy cannot be judged for it."""
    if got.get("numpy"):
        t.fail(f"{what} worked on tensor data outside torch (.numpy(), .tolist(), numpy arrays, "
               f"torch.from_numpy): the grader counts the work of each step in tensor operations, and work done "
               f"there cannot be counted. Decode with torch operations only.", NUMPY_WORK)


def mode_cause(got):
    """Why tokens can differ when the code is otherwise right: dropout was on."""
    if any(got["modes"]) or got.get("dropout_ops"):
        return NOT_EVAL_MODE
    return None


def expect_modes(t: Tester, got, what, train):
    if any(got["modes"]) or got["dropout_ops"]:
        t.fail(f"{what} ran the model in training mode (dropout on, random tokens): call model.eval() first "
               f"(and put the mode back at the end).", NOT_EVAL_MODE)
    if any(got["grad"]) or got["grad_ops"]:
        t.fail(f"{what} ran the model with gradients enabled: run the decoding under torch.no_grad() (or "
               f"torch.inference_mode()); otherwise every step builds an autograd graph for nothing.", GRAD_ENABLED)
    after = got["modes_after"]
    if any(m != train for m in after):
        some = "" if len(set(after)) == 1 else " (some of its submodules)"
        t.fail(f"{what} left a model that was in {'train' if train else 'eval'} mode in "
               f"{'train' if after[0] else 'eval'} mode{some}: put back the mode it found "
               f"(was_training = model.training ... model.train(was_training), in a try/finally: model.train "
               f"sets every submodule).", MODE_NOT_RESTORED)


def rows_text(tokens: torch.Tensor) -> str:
    return "; ".join(str(r) for r in trimmed(tokens).tolist())


def sources(t: Tester, lengths, Ls=None):
    """Source ids [B, Ls] (ids 3..V-1) right-padded to the given lengths, and the mask [B, 1, Ls]."""
    Ls = Ls or max(lengths)
    src = t.randint(3, V, (len(lengths), Ls))
    keep = torch.arange(Ls)[None, :] < torch.tensor(lengths)[:, None]
    src = src.masked_fill(~keep, PAD)
    return src, keep[:, None, :]


GENERATOR_BY_HAND = CATALOGUE.mistake("generator_not_used", "the code reads model.generator's weight or bias instead of "
                                      "calling it: compute the logits with model.generator(x) (the checks' scripted models "
                                      "have a generator without a weight, and they watch the steps there).")


def decode(t: Tester, spec, func, src, src_mask, max_len, what, train=True, **kw):
    kwargs, also = kw.pop("kwargs", {}), kw.pop("crash", None)

    def crash(reply):      # an error only a generator used by hand raises on the scripted models
        scripted = "'OracleHead' object has no attribute" in (reply.get("message") or "")
        return (also and also(reply)) or (GENERATOR_BY_HAND if scripted else None)
    reply = t.run(recipe_decode, spec, func, src, src_mask, max_len, kwargs, train, what=what, helpers=HELPERS,
                  crash=crash, **kw)
    return {**reply["value"], **seen_in(reply)}


def call_text(func, B, max_len, extra=""):
    return f"`{func}(model, src [{B}, Ls], src_mask, max_len={max_len}, bos_id=1, eos_id=2, pad_id=0{extra})`"


# ---- greedy ------------------------------------------------------------------------------------

def ending_oracle(t: Tester, seed_offset=0, **options):
    """An oracle whose items end at different steps (eos once the position passes the source length)."""
    seed = int(t.randint(0, 10_000, ()).item()) + seed_offset
    return oracle_spec(seed=seed, **{"vocab": V, "scale": 2.0, "eos_after": 0, "eos_boost": 8.0, "eos_bias": -1.0,
                                              **options})


def transformer_with_endings(t: Tester, layers, norm_first, src, src_mask, max_len):
    """A random Transformer whose greedy outputs differ between items and end at different steps (some
    perhaps not at all), found by trying eos biases and weights in the judge."""
    best = None
    for attempt in range(4):
        spec = transformer_spec(t, layers, norm_first)
        for bias in (0.0, -1.0, 1.0, -2.0, 2.0, -3.0, -4.0, 3.0):
            spec["params"]["generator.bias"][EOS] = bias
            rows = judge_greedy(stepper(spec, src, src_mask), src.size(0), max_len)[0].tolist()
            ends = {(row.index(EOS) if EOS in row else None) for row in rows}
            variety = len(ends) + len({tuple(r) for r in rows}) + (None in ends) * 0.5
            if best is None or variety > best[0]:
                best = (variety, spec, bias)
        if best[0] >= 2 * src.size(0) - 1:
            break
    _, spec, bias = best
    spec["params"]["generator.bias"][EOS] = bias
    return spec


def check_greedy_like(t: Tester, func, spec, src, src_mask, max_len, label, *, catalogue=True):
    """Run `func` (greedy_decode or greedy_decode_cached) and compare with the judge's greedy loop."""
    B = src.size(0)
    what = call_text(func, B, max_len) + f" on {label}"
    got = decode(t, spec, func, src, src_mask, max_len, what, logits=True)
    tokens = got["result"]
    expect_format(t, tokens, f"The result of {what}", B, max_len)
    step = stepper(spec, src, src_mask)
    want, steps, want_logits = judge_greedy(step, B, max_len)
    if not same_tokens(tokens, want):
        cause = mode_cause(got)
        if cause is None and catalogue and spec["kind"] == "transformer":
            no_mask, _, _ = judge_greedy(stepper(spec, src, src_mask, causal=False), B, max_len)
            if same_tokens(tokens, no_mask):
                cause = NO_MASK
        text = f" Likely cause: {cause.text}" if cause else ""
        t.fail(f"{what} gave the tokens {rows_text(tokens)}; greedy decoding gives {rows_text(want)}.{text}",
               cause)
    expect_early_stop(t, got, what, B, steps)
    return got, want_logits, steps


def expect_early_stop(t: Tester, got, what, rows_per_step, steps):
    ran = steps_run(got, rows_per_step)
    if ran == 0:          # right tokens, but the steps cannot be watched: the rule the docstring states
        t.fail(f"{what} never called model.generator: compute each step's logits with model.generator(...) "
               f"(the checks observe the steps there).", GENERATOR_BY_HAND)
    if ran > steps:
        t.fail(f"{what} ran {ran} decoding steps (seen at model.generator); every sequence had ended after {steps}: "
               f"stop the loop as soon as all of them have produced <eos>.", NO_EARLY_STOP)


NO_MASK = CATALOGUE.mistake("no_causal_mask", "the prefix is decoded without the causal mask: pass causal_mask(t) (milestone 1) "
                            "as tgt_mask to model.decode; with two or more layers the earlier positions otherwise see later tokens.")


def blame_helper(t: Tester, failure: CheckFailed):
    """After greedy failed: if the optional helper `_next_token_logits` is implemented with the stub's
    signature and gives wrong logits, say so and blame it (the groups below then use a correct one)."""
    src, src_mask = sources(t, [4, 2, 5])
    spec = transformer_spec(t, 2, False)
    ys = torch.cat([torch.full((3, 1), BOS), t.randint(3, V, (3, 4))], 1)
    got = t.run(recipe_next_token_logits, spec, src, src_mask, ys, what="`_next_token_logits`", helpers=HELPERS)["value"]
    if got["status"] != "ok" or not isinstance(got["logits"], torch.Tensor):
        raise failure
    step = stepper(spec, src, src_mask)
    want = step(ys, torch.arange(3))
    if t.close(got["logits"], want):
        raise failure
    t.blame("_next_token_logits")
    what = "`_next_token_logits(model, ys [3, 5], memory, src_mask)`, the helper your decoding functions call,"
    if t.close(got["logits"], stepper(spec, src, src_mask, causal=False)(ys, torch.arange(3))):
        said = failure.cause == NO_MASK.id             # the tokens' message already gave the cause
        t.fail(f"{failure} {what} decodes the prefix without the causal mask" +
               ("." if said else f". Likely cause: {NO_MASK.text}"), NO_MASK)
    t.fail(f"{failure} {what} gives wrong logits: it should return model.generator(model.decode(ys, memory, "
           f"src_mask, causal_mask(t))[:, -1]), the logits [B, V] of the token after the last position.",
           NEXT_TOKEN_LOGITS_WRONG)


@group("m6", "greedy", observes=True)
def greedy(t: Tester):
    try:
        greedy_cases(t)
    except CheckFailed as e:
        blame_helper(t, e)


def greedy_cases(t: Tester):
    src, src_mask = sources(t, [3, 1, 4, 2])
    flat = oracle_spec(vocab=V, seed=int(t.randint(0, 10_000, ()).item()), src_weight=0.0, prefix_weight=0.0,
                       eos_after=5, eos_boost=8.0, eos_bias=-3.0, len_weight=0.0)
    check_greedy_like(t, "greedy_decode", flat, src, src_mask, 9,
                      "a scripted model that ignores its input (every row gets the same tokens, <eos> by step 5)")
    src, src_mask = sources(t, [1, 5, 2, 3, 9], Ls=9)
    check_greedy_like(t, "greedy_decode", ending_oracle(t), src, src_mask, 7,
                      "a scripted model whose outputs end at different steps")
    src, src_mask = sources(t, [2, 3, 1], Ls=4)
    check_greedy_like(t, "greedy_decode", ending_oracle(t, eos_after=-1), src, src_mask, 10,
                      "a scripted model whose outputs all end early")
    for norm_first in (False, True):
        src, src_mask = sources(t, [5, 2, 4, 6])
        spec = transformer_with_endings(t, 2, norm_first, src, src_mask, 8)
        check_greedy_like(t, "greedy_decode", spec, src, src_mask, 8,
                          f"a random 2-layer {'pre' if norm_first else 'post'}-LN Transformer (float64, dropout 0.1, "
                          f"handed over in train mode)")


# ---- sampling ------------------------------------------------------------------------------------

N_DRAWS = 4000


def consistent(counts: torch.Tensor, probs: torch.Tensor) -> bool:
    """Could `counts` (N draws) come from `probs`? Never a token of probability 0; every count within
    5 standard deviations (a correct sampler fails this about once in a million checks)."""
    n = counts.sum().item()
    if bool(((probs < 1e-12) & (counts > 0)).any()):
        return False
    sd = (n * probs * (1 - probs)).sqrt()
    return bool(((counts - n * probs).abs() <= 5 * sd + 1).all())


def sampling_cases(logits):
    """(temperature, top_k, top_p, what it shows) for one row of logits [V]: thresholds placed between the
    partial sums so that the crossing token is clear, and top-p cases where filtering before renormalising
    after top-k, or before dividing by the temperature, keeps a different set of tokens."""
    sorted_p = torch.softmax(logits, -1).sort(descending=True).values
    c = sorted_p.cumsum(0)
    p_cross = float((c[1] + c[2]) / 2)             # the 3rd token crosses: three tokens kept
    cases = [(0.6, None, None, "temperature 0.6"), (1.0, 3, None, "top_k=3"),
             (1.0, None, p_cross, f"top_p={p_cross:.3f} (three tokens kept; the third crosses top_p)")]
    for temperature, k, target in ((0.8, 4, "top_p_before_top_k_renormalised"), (0.5, None, "temperature_after_filter")):
        q = _separating_top_p(logits, temperature, k, target)
        if q is not None:
            cases.append((temperature, k, q, f"temperature {temperature}, top_k={k}, top_p={q:.3f}"))
    return cases


def _separating_top_p(logits, temperature, k, target):
    """A top_p (none if there is none) at which the mistake `target` changes the distribution and no other
    known mistake looks like it, with every partial sum at least 0.02 from top_p (no borderline token)."""
    tempered = (logits / temperature).sort(descending=True).values
    sums = [torch.softmax(z, -1).cumsum(0) for z in (tempered, tempered[:k], logits.sort(descending=True).values)]
    for q in torch.linspace(0.3, 0.95, 66).tolist():
        if min((c - q).abs().min().item() for c in sums) < 0.02:
            continue
        tried = dict((m.id, d[0]) for m, d in CATALOGUE.tried("sampling", logits[None], temperature, k, q))
        want = filtered_probs(logits[None], temperature, k, q)[0]
        mistaken = tried.pop(target)
        apart = lambda a, b: not bool(((a - b).abs() < 0.06).all())          # noqa: E731
        if apart(mistaken, want) and all(apart(mistaken, other) for other in tried.values()):
            return q
    return None


def sampling_oracle(t: Tester, src, src_mask):
    """An oracle whose first-token distribution is flat enough for every filter to show in 4000 draws (the
    4th most likely token at 5% or more) and has a top-p case that renormalising after top-k changes."""
    for _ in range(100):
        spec = ending_oracle(t)
        logits = stepper(spec, src, src_mask)(torch.full((1, 1), BOS), torch.zeros(1, dtype=torch.long))[0]
        cases = sampling_cases(logits)
        if len(cases) == 5 and torch.softmax(logits, -1).sort(descending=True).values[3] >= 0.05:
            break
    return spec, logits, cases


@group("m6", "sampling", depends=("greedy",), observes=True)
def sampling(t: Tester):
    src, src_mask = sources(t, [3])
    spec, logits, cases = sampling_oracle(t, src, src_mask)
    for bad in (0.0, -0.5):
        got = t.run(recipe_raises, spec, "sample_decode", src, src_mask, {"temperature": bad},
                    what=f"`sample_decode(..., temperature={bad})`", helpers=HELPERS)["value"]
        if got["raised"] == "NotImplementedError":
            t.fail("`sample_decode` is not implemented yet (it raises NotImplementedError).")
        if got["raised"] != "ValueError":
            t.fail(f"`sample_decode(..., temperature={bad})` should raise ValueError (the temperature must be > 0), "
                   f"but it {'raised ' + got['raised'] + ': ' + got['message'] if got['raised'] else 'returned'}.",
                   TEMPERATURE_NOT_CHECKED)
    # The distribution of the first token, over N_DRAWS rows with the same source.
    many_src, many_mask = src.expand(N_DRAWS, -1).clone(), src_mask.expand(N_DRAWS, -1, -1).clone()
    for temperature, top_k, top_p, label in cases:
        kw = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        what = call_text("sample_decode", N_DRAWS, 1, f", temperature={temperature}, top_k={top_k}, top_p={top_p}")
        got = decode(t, spec, "sample_decode", many_src, many_mask, 1, what, kwargs=kw, gen_seed=int(t.randint(0, 10**6, ())))
        tokens = got["result"]
        expect_format(t, tokens, f"The result of {what}", N_DRAWS, 1)
        if tokens.size(1) < 2:
            t.fail(f"{what} generated no token (the result has {tokens.size(1)} column).")
        counts = torch.bincount(tokens[:, 1], minlength=V)[:V].to(torch.float64)
        want = filtered_probs(logits[None], temperature, top_k, top_p)[0]
        if not consistent(counts, want):
            fits = {m.id: m for m, q in CATALOGUE.tried("sampling", logits[None], temperature, top_k, top_p)
                    if not torch.allclose(q[0], want, atol=1e-3) and consistent(counts, q[0])}
            cause = next(iter(fits.values())) if len(fits) == 1 else None
            share = lambda x: ", ".join(f"{'<eos>' if v == EOS else v}: {x[v]:.2f}" for v in range(EOS, V))  # noqa: E731
            text = f" Likely cause: {cause.text}" if cause else ""
            t.fail(f"With {label}, the first token over {N_DRAWS} draws came out with frequencies {{{share(counts / N_DRAWS)}}}; "
                   f"the filtered distribution is {{{share(want)}}} (a token of probability 0 must never be drawn).{text}", cause)
    # Whole runs, seeded: exactly the judge's tokens.
    for temperature, top_k, top_p in ((1.0, None, None), (0.7, 3, None), (1.3, None, 0.7), (0.9, 5, 0.9)):
        src, src_mask = sources(t, [1, 4, 2, 6, 3], Ls=6)
        spec = ending_oracle(t, seed_offset=1)
        seed = int(t.randint(0, 10**6, ()))
        extra = f", temperature={temperature}, top_k={top_k}, top_p={top_p}, generator=torch.Generator().manual_seed({seed})"
        what = call_text("sample_decode", 5, 8, extra)
        got = decode(t, spec, "sample_decode", src, src_mask, 8, what,
                     kwargs={"temperature": temperature, "top_k": top_k, "top_p": top_p}, gen_seed=seed)
        tokens = got["result"]
        expect_format(t, tokens, f"The result of {what}", 5, 8)
        step = stepper(spec, src, src_mask)
        want, steps = judge_sample(step, 5, 8, seed, temperature, top_k, top_p)
        if not same_tokens(tokens, want):
            fits = [m for m, dev in _SAMPLING_DEVIATIONS
                    if not same_tokens(v := judge_sample(step, 5, 8, seed, temperature, top_k, top_p, **dev)[0], want)
                    and same_tokens(tokens, v)]
            if len(fits) == 1:
                t.fail(f"{what} gave {rows_text(tokens)}; with the same generator seed the contract's sampler gives "
                       f"{rows_text(want)}. Likely cause: {fits[0].text}", fits[0])
            calls = got["multinomial"]
            shapes = sorted({tuple(c[0]) for c in calls})
            if not calls:
                why = ("it never called torch.multinomial: draw with torch.multinomial(probs, 1, generator=generator), "
                       "so that a seeded generator reproduces a run.")
            elif len(calls) > steps_run(got, 5) or shapes != [(5, V)]:
                why = (f"it called torch.multinomial {len(calls)} times in {steps_run(got, 5)} steps, with probs of "
                       f"shape(s) {', '.join(shape_str(s) for s in shapes)}: make exactly one call per step, "
                       f"torch.multinomial(probs, 1, generator=generator) with probs [B, V] = [5, {V}], every row "
                       f"included (finished ones too), so the generator's random numbers are used as the contract says.")
            else:
                why = ("the distribution checks above passed, so look at what the draws are used for: the generator "
                       "passed on to torch.multinomial, pad_id for finished rows, the prefix fed back.")
            t.fail(f"{what} gave {rows_text(tokens)}; with the same generator seed the contract's sampler gives "
                   f"{rows_text(want)}. {why[0].upper() + why[1:]}", SAMPLING_NOT_REPRODUCIBLE)
        expect_early_stop(t, got, what, 5, steps)


# ---- beam search ---------------------------------------------------------------------------------

def expect_beam(t: Tester, spec, src, src_mask, max_len, K, alpha, label, want=None):
    B = src.size(0)
    what = call_text("beam_search", B, max_len, f", beam_size={K}, length_penalty={alpha}") + f" on {label}"
    got = decode(t, spec, "beam_search", src, src_mask, max_len, what, kwargs={"beam_size": K, "length_penalty": alpha})
    result = got["result"]
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        t.fail(f"{what} should return a pair (tokens [B, T], scores [B]), but it returned {describe(result)}.")
    tokens, scores = result
    expect_format(t, tokens, f"The tokens of {what}", B, max_len, CATALOGUE.mistakes()["finished_beams_extended"])
    t.expect_tensor(scores, f"The scores of {what}", shape=(B,))
    if scores.dtype != torch.float64:
        t.fail(f"The scores of {what} have dtype {str(scores.dtype).replace('torch.', '')}; they should be in the "
               f"model's dtype (float64 here).", SCORES_DTYPE)
    step = stepper(spec, src, src_mask)
    want_tokens, want_scores = want if want is not None else judge_beam(step, B, max_len, K, alpha)
    ok = same_tokens(tokens, want_tokens) and close_scores(scores, want_scores)
    if ok:
        return tokens
    cause = mode_cause(got) or reproducing(
        CATALOGUE.tried("beam", step, B, max_len, K, alpha),
        lambda v: (not same_tokens(v[0], want_tokens) or not close_scores(v[1], want_scores))      # not right
        and same_tokens(tokens, v[0]) and torch.allclose(scores, v[1], rtol=1e-7, atol=1e-7))      # but theirs
    if cause is None and B > 1:
        alone = [decode(t, spec, "beam_search", src[b:b + 1], src_mask[b:b + 1], max_len, what,
                        kwargs={"beam_size": K, "length_penalty": alpha})["result"] for b in range(B)]
        alone_want = [judge_beam(stepper(spec, src[b:b + 1], src_mask[b:b + 1]), 1, max_len, K, alpha) for b in range(B)]
        if all(isinstance(a, (tuple, list)) and same_tokens(a[0], w[0]) and isinstance(a[1], torch.Tensor)
               and close_scores(a[1].to(torch.float64), w[1]) for a, w in zip(alone, alone_want)):
            cause = BEAM_ITEMS_MIXED
    text = f" Likely cause: {cause.text}" if cause else ""
    digits = 6 if not same_tokens(tokens, want_tokens) else 12          # show where the scores differ
    t.fail(f"{what} gave tokens {rows_text(tokens)} with scores {[round(s, digits) for s in scores.tolist()]}; the "
           f"beam search gives {rows_text(want_tokens)} with scores {[round(s, digits) for s in want_scores.tolist()]}."
           f"{text}",
           cause)


def close_scores(a, b) -> bool:
    """Beam scores agree: float32 arithmetic somewhere on the way (e.g. integer lengths in the penalty)
    is rounding, not a mistake; every known mistake moves a score by far more than 1e-6."""
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-9)


def beam_oracle(t: Tester, src, src_mask, max_len, K, alpha):
    """An oracle on which, for these settings, greedy and beam search disagree for some item, a hypothesis
    that finished before the last step wins for some item, and every known mistake of the catalogue
    changes the result (searched over seeds, in the judge; the best one found if none has it all)."""
    best = None
    for _ in range(200):
        spec = ending_oracle(t, eos_bias=-0.5, eos_boost=3.0, scale=2.5)
        step = stepper(spec, src, src_mask)
        want_tokens, want_scores = judge_beam(step, src.size(0), max_len, K, alpha)
        g, b = trimmed(judge_greedy(step, src.size(0), max_len)[0]).tolist(), trimmed(want_tokens).tolist()
        if g == b or not any(EOS in row and row.index(EOS) < len(b[0]) - 1 for row in b):
            continue
        shown = sum(not (same_tokens(v, want_tokens) and torch.allclose(sc, want_scores))
                    for _, (v, sc) in CATALOGUE.tried("beam", step, src.size(0), max_len, K, alpha))
        if best is None or shown > best[0]:
            best = (shown, spec)
        if shown == len(CATALOGUE.entries["beam"]):
            break
    return best[1]


@group("m6", "beam", depends=("greedy",), observes=True)
def beam(t: Tester):
    src, src_mask = sources(t, [2, 4, 1, 3])
    spec = beam_oracle(t, src, src_mask, 6, 3, 1.0)
    expect_beam(t, spec, src, src_mask, 6, 3, 1.0, "a scripted model where greedy and beam search disagree")
    for K, alpha in ((2, 1.5), (4, 0.0)):
        expect_beam(t, spec, src, src_mask, 6, K, alpha, "the same scripted model")
    # A beam wider than every hypothesis: the exhaustive search's winner. Three real tokens and <eos>, three
    # steps: at most 1 + 3 + 9 * 4 = 40 hypotheses that are not made of <pad>/<bos> (which never win).
    src, src_mask = sources(t, [2, 3])
    spec = ending_oracle(t, vocab=6, eos_bias=0.5, eos_boost=0.0, scale=1.5)
    step = stepper(spec, src, src_mask)
    for alpha in (0.0, 2.0):
        best = [exhaustive(step, b, 3, alpha) for b in range(2)]
        T = max(len(w[0]) for w in best)
        want = (torch.tensor([w[0] + [PAD] * (T - len(w[0])) for w in best]),
                torch.tensor([w[1] for w in best], dtype=torch.float64))
        expect_beam(t, spec, src, src_mask, 3, 48, alpha,
                    "a scripted model with 3 real tokens and max_len=3, where 48 beams hold every possible output "
                    "(the result must be the exhaustive search's best)", want=want)
    # beam_size=1 is greedy; and a real model, pre-LN.
    for norm_first, K in ((False, 1), (True, 4)):
        src, src_mask = sources(t, [5, 2, 4])
        spec = transformer_with_endings(t, 2, norm_first, src, src_mask, 7)
        tokens = expect_beam(t, spec, src, src_mask, 7, K, 0.6,
                             f"a random 2-layer {'pre' if norm_first else 'post'}-LN Transformer (float64, dropout 0.1, "
                             f"handed over in train mode)")
        if K == 1:
            greedy_tokens, _, _ = judge_greedy(stepper(spec, src, src_mask), 3, 7)
            assert same_tokens(tokens, greedy_tokens), "judge: beam_size=1 differs from greedy"


# ---- KV cache ------------------------------------------------------------------------------------

EMPTY_CACHE = CATALOGUE.mistake("cache_without_new_position", "at the first step your attention ran over zero keys: the "
                                "newest position must attend to itself too, so append its key and value to the cache first, then "
                                "attend over every cached position.")


def empty_attention(reply):
    message = reply.get("message") or ""
    return EMPTY_CACHE if ("non-zero size" in message or "of 0 elements" in message) else None


@group("m6", "kv_cache", observes=True)
def kv_cache(t: Tester):
    for norm_first in (False, True):
        src, src_mask = sources(t, [5, 2, 6, 3])
        spec = transformer_with_endings(t, 2, norm_first, src, src_mask, 8)
        label = f"a random 2-layer {'pre' if norm_first else 'post'}-LN Transformer (float64, dropout 0.1, in train mode)"
        what = call_text("greedy_decode_cached", 4, 8) + f" on {label}"
        got = decode(t, spec, "greedy_decode_cached", src, src_mask, 8, what, logits=True, crash=empty_attention)
        tokens = got["result"]
        expect_format(t, tokens, f"The result of {what}", 4, 8)
        want, steps, want_logits = judge_greedy(stepper(spec, src, src_mask), 4, 8)
        variants = functools.lru_cache()(lambda: [
            (m, judge_cached_greedy(spec, src, src_mask, 8, **dev)) for m, dev in _CACHED_DEVIATIONS])
        if not same_tokens(tokens, want):
            cause = mode_cause(got)
            fits = [] if cause else [m for m, (v, _) in variants() if not same_tokens(v, want) and same_tokens(tokens, v)]
            cause = cause or (fits[0] if len(fits) == 1 else None)
            text = f" Likely cause: {cause.text}" if cause else ""
            t.fail(f"{what} gave {rows_text(tokens)}; greedy decoding gives {rows_text(want)}.{text}",
                   cause)
        expect_early_stop(t, got, what, 4, steps)
        done = torch.zeros(4, dtype=torch.bool)
        for i, (have, expected) in enumerate(zip(got["logits"], want_logits)):
            live = ~done
            if have.shape == expected.shape:       # (finished rows may be left out of a step: allowed)
                t.expect_close(have[live], expected[live], f"The logits at model.generator at step {i + 1} of {what} "
                               f"(rows still decoding)", atol=1e-8,
                               mistakes=lambda i=i, live=live: [(m, v_logits[i][live]) for m, (v, v_logits) in variants()
                                                                if same_tokens(v, tokens) and len(v_logits) > i])
            done = done | (want[:, i + 1] == EOS)
    # Work per step: FLOPs between consecutive generator calls, on a model that never ends early.
    B, Ls, max_len = 2, 12, 10
    src, src_mask = sources(t, [12, 9], Ls=Ls)
    spec = transformer_spec(t, 2, False, eos_bias=-1e4)
    what = call_text("greedy_decode_cached", B, max_len) + " (source length 12, a model that never ends early)"
    got = decode(t, spec, "greedy_decode_cached", src, src_mask, max_len, what)
    marks = got["flops"]
    expect_torch_only(t, got, what)
    if len(marks) < max_len:
        t.fail(f"{what} called model.generator {len(marks)} times in {max_len} steps: compute each step's logits "
               f"with model.generator (the checks observe them there).", GENERATOR_BY_HAND)
    # The whole run too: work done before the first step, or between steps and then replayed, is work.
    allowed_total = encoding_flops(B, Ls, 2) + sum(step_flops(B, n, Ls, 2) for n in range(1, len(marks) + 1))
    if got["total_flops"] > 1.1 * allowed_total:
        t.fail(f"{what} used {got['total_flops']:,} matrix-multiply FLOPs in all (torch.utils.flop_counter: 2 per "
               f"multiply-add), {got['total_flops'] / allowed_total:.1f} times what a cached decoder needs for these "
               f"{len(marks)} steps ({allowed_total:,}: the encoder, the keys and values of memory once, then the newest "
               f"position alone at each step). The cache must save the work, not only move it before the first step or "
               f"between the steps.", CACHE_NOT_USED.saying('the cached decoder does more work in total than the steps need.'))
    for i in range(1, len(marks)):
        t_pos = i + 1                                    # positions cached at step i + 1, the newest included
        used, allowed = marks[i] - marks[i - 1], step_flops(B, t_pos, Ls, 2)
        if used > 1.1 * allowed:
            grown = [marks[j] - marks[j - 1] for j in range(1, len(marks))]
            recompute = 2 * 2 * 2 * B * Ls * D * D
            hint = ""
            if abs(used - allowed - recompute) <= 0.1 * allowed:
                hint = (" The difference is the cross-attention keys and values of memory, projected again: compute "
                        "them once, before the first step, and keep them in the cache.")
            elif grown[-1] > grown[0] * 1.5:
                hint = (" It grows with the position: the step still runs the decoder (or the projections) over the "
                        "whole prefix; run it on the newest position only and append that position's keys and values "
                        "to the cache.")
            t.fail(f"{what}: step {i + 1} used {used:,} matrix-multiply FLOPs (torch.utils.flop_counter: 2 per multiply-add). The "
                   f"newest position alone needs {allowed:,} (its projections, attention over {t_pos} cached positions "
                   f"and {Ls} memory positions, feed-forward, generator); an uncached step at this position needs "
                   f"{uncached_step_flops(B, t_pos, Ls, 2):,}. Per step yours used {grown}.{hint}",
                   CACHE_NOT_USED.saying('the cached step does more work than the newest position needs.'))


# ---- modes and batching ----------------------------------------------------------------------------

FUNCTIONS = ("greedy_decode", "sample_decode", "beam_search", "greedy_decode_cached")


def expected_tokens(func, spec, src, src_mask, max_len, gen_seed=0):
    """What `func` must return (tokens only) with the contract's defaults."""
    step = stepper(spec, src, src_mask)
    if func == "beam_search":
        return judge_beam(step, src.size(0), max_len, 4, 0.6)[0]
    if func == "sample_decode":
        return judge_sample(step, src.size(0), max_len, gen_seed)[0]
    return judge_greedy(step, src.size(0), max_len)[0]


def returned_tokens(result):
    return result[0] if isinstance(result, (tuple, list)) and len(result) == 2 else result


@group("m6", "modes", depends=("greedy",), style=True, observes=True)
def modes(t: Tester):
    """Judged on every function that gives the right tokens (the others are charged in their own groups)."""
    problems = []
    for func in FUNCTIONS:
        src, src_mask = sources(t, [3, 2])
        spec = (transformer_spec(t, 1, False) if func == "greedy_decode_cached" else ending_oracle(t))
        want = expected_tokens(func, spec, src, src_mask, 5)
        for train in (True, False):
            what = f"{call_text(func, 2, 5)} on a model in {'train' if train else 'eval'} mode"
            try:
                got = decode(t, spec, func, src, src_mask, 5, what, train=train,
                             gen_seed=0 if func == "sample_decode" else None)
            except CheckFailed as e:        # a crash is charged in its own group
                problems.append(str(e).rstrip("."))
                break
            if not same_tokens(returned_tokens(got["result"]), want):
                problems.append(f"`{func}` gave wrong tokens")
                break
            t.verified += 1
            expect_modes(t, got, what, train)
    if not t.verified:
        raise NotJudged(f"Not judged: this check gives its points only to code that runs and gives the right tokens, "
                        f"and none of the four decoding functions did. What happened first: {problems[0]}.")


# The most tensor operations decoding a batch of 2 for 4 steps needs without a loop over the batch (the
# reference and the correct variants of the tests use at most half of these, building the model included).
LOOP_LIMITS = {"greedy_decode": 400, "sample_decode": 400, "beam_search": 500, "greedy_decode_cached": 1100}


@group("m6", "batched", depends=("greedy",), style=True, observes=True)
def batched(t: Tester):
    grown = t.grown(2, 9, 17)                 # beyond any small padded count
    for func in FUNCTIONS:
        counts = {}
        for B in (2, grown):
            src, src_mask = sources(t, [4] * B)
            spec = (transformer_spec(t, 1, False, eos_bias=-1e4) if func == "greedy_decode_cached"
                    else oracle_spec(vocab=V, seed=3, eos_bias=-1e4))
            kw = {"beam_size": 2} if func == "beam_search" else {}
            what = call_text(func, B, 4)
            reply = t.run(recipe_decode, spec, func, src, src_mask, 4, kw, False, gen_seed=0 if func == "sample_decode" else None,
                          what=what, helpers=HELPERS, record=True)
            if reply["record"]["numpy"]:
                expect_torch_only(t, {"numpy": True}, what)
            got = returned_tokens(reply["value"]["result"])
            want = (judge_beam(stepper(spec, src, src_mask), B, 4, 2, 0.6)[0] if func == "beam_search"
                    else expected_tokens(func, spec, src, src_mask, 4))
            ok = same_tokens(got, want)
            t.works(torch.ones(1) if ok else torch.zeros(1), torch.ones(1), f"`{func}`")
            counts[f"B = {B}"] = reply["record"]["op_count"]
        (_, base), (_, more) = counts.items()
        if base > LOOP_LIMITS[func]:
            t.fail(f"`{func}` ran {base} tensor operations for a batch of 2 (4 steps), where decoding without a loop "
                   f"over the batch needs at most about {LOOP_LIMITS[func]}: that points to a loop that runs a fixed "
                   f"number of times (for example over a padded batch). Work on all B rows at once (a loop over "
                   f"the time steps is expected).", PYTHON_LOOP)
        if more != base:
            t.fail(f"`{func}` ran {base} tensor operations for a batch of 2 but {more} for a batch of {grown} (same source "
                   f"length, same number of steps): that points to a Python loop over the batch items. Work on all "
                   f"B rows at once (a loop over the time steps is expected).", PYTHON_LOOP)
