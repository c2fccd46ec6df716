"""Hidden checks for milestone 1: softmax, masks, scaled dot-product attention.

This folder, one job per file:
- checks.py (here): the check groups, and the Tester-side helpers they use (inputs, calls, comparisons, probes);
- answers.py: the judge's right answers (PyTorch itself: F.scaled_dot_product_attention, torch.softmax) and
  CATALOGUE's computations of what the known mistakes return, so a wrong answer can be named;
- mistakes.py: CATALOGUE and the mistakes a check recognises from its own evidence;
- stand_ins.py: a judge-written `softmax`, so attention is graded on its own merits when the student's
  softmax is wrong (imported below, which registers it).
"""
from __future__ import annotations

import functools

import torch

from autograder.grading.checks import CheckFailed, Tester, describe, group, shape_str
from autograder.milestones.m1 import stand_ins  # noqa: F401  (registers the stand-ins)
from autograder.milestones.m1.answers import SOFTMAX_OVERFLOW, _weights_in_float32, expected_attention, output_grads
from autograder.milestones.m1.mistakes import (
    CATALOGUE, CAUSAL_IGNORES_DEVICE, CAUSAL_INVERTED, CAUSAL_NO_DIAGONAL, CAUSAL_TRANSPOSED,
    DROPOUT_BEFORE_SOFTMAX, DROPOUT_IGNORED, DROPOUT_KEEP_PROBABILITY, DROPOUT_NO_RESCALE, DROPOUT_ON_OUTPUT, DROPOUT_RENORMALISED,
    DROPOUT_RESCALE_BY_P, DTYPE_CHANGED, GRAPH_CUT, INPUT_MODIFIED, MASK_NOT_BOOL, NAN_BLOCKED_ROW, NAN_GRADIENT_BLOCKED_ROW,
    OUTPUT_NOT_FROM_WEIGHTS, PADDING_COMPARE, PADDING_MASK_IGNORES_PAD_ID, PADDING_MASK_INVERTED,
    PADDING_MASK_NO_QUERY_DIM,
    PADDING_MASK_ON_QUERIES, SOFTMAX_NAN_BLOCKED_ROW, SWAPPED_RETURN, PADDING_MASK_BLOCKS_ZERO, DROPOUT_MASK_SHARED)

SDPA = "scaled_dot_product_attention"
ATTENTION_GROUPS = ("softmax",)          # what every attention group depends on


# ---- probes: evidence read from the student's answer ---------------------------------------

def output_not_from_weights(out, w, v):
    """A probe: the output is not `weights @ v` for the weights the student returned (compared at the
    output's own precision)."""
    if isinstance(w, torch.Tensor) and isinstance(out, torch.Tensor) and w.shape[-1] == v.shape[-2]:
        atol = 1e-6 if out.dtype == torch.float32 else 1e-9
        try:
            if not torch.allclose(out.to(torch.float64), (w.to(torch.float64) @ v.to(torch.float64)), atol=atol):
                return OUTPUT_NOT_FROM_WEIGHTS
        except RuntimeError:
            return None
    return None


# ---- inputs and calls ----------------------------------------------------------------------

def shapes_text(*tensors):
    return ", ".join(shape_str(t.shape) for t in tensors)


def attention_inputs(t: Tester, lead, lq, lk, d_k, d_v, dtype=torch.float64, scale=1.0):
    return (t.randn(*lead, lq, d_k, dtype=dtype, scale=scale), t.randn(*lead, lk, d_k, dtype=dtype, scale=scale),
            t.randn(*lead, lk, d_v, dtype=dtype))


def ragged_padding(t: Tester, batch, length, with_empty=False):
    """Token ids with padding (id 0) at the end of each row, rows of different lengths."""
    lengths = [length - (i % length) for i in range(batch)]
    if with_empty:
        lengths[-1] = 0
    tokens = t.randint(1, 9, (batch, length))
    for i, n in enumerate(lengths):
        tokens[i, n:] = 0
    return tokens


def run_attention(t: Tester, q, k, v, mask=None, what=None, **kwargs):
    """Call the student's attention and check the basic form of the result."""
    args = (q, k, v) if mask is None else (q, k, v, mask)
    reply = t.call(SDPA, *args, catalogue=(CATALOGUE, "attention"), **kwargs)
    what = what or f"`{SDPA}` with q, k, v of shapes {shapes_text(q, k, v)}"
    out, w = pair(t, reply["value"], q, k, v, what)
    return out, w, what


def pair(t: Tester, value, q, k, v, what):
    """The (output, weights) pair, with a clear message when it is not one or is swapped."""
    out, w = t.expect_pair(value, what)
    out_shape, w_shape = (*q.shape[:-1], v.size(-1)), (*q.shape[:-1], k.size(-2))
    if (isinstance(out, torch.Tensor) and isinstance(w, torch.Tensor) and out_shape != w_shape
            and tuple(out.shape) == w_shape and tuple(w.shape) == out_shape):
        t.fail(f"{what} returned (weights, output): return them in the order (output, weights).",
               SWAPPED_RETURN)
    return out, w


def check_attention(t: Tester, q, k, v, mask=None, label="", atol=None, got=None):
    """Weights, then output, against PyTorch; on a difference, the catalogue names the mistake."""
    out, w, what = got or run_attention(t, q, k, v, mask)
    what = what + (f" and {label}" if label else "")
    exp_out, exp_w = expected_attention(q, k, v, mask)
    tried = functools.cache(lambda: CATALOGUE.tried("attention", q, k, v, mask))
    shape_hint = ""
    if not (isinstance(out, torch.Tensor) and out.shape[-1:] == v.shape[-1:]):
        shape_hint = " The output takes its last dimension from v: output = weights @ v."
    try:
        t.expect_tensor(w, f"The weights from {what}", shape=exp_w.shape)
        t.expect_tensor(out, f"The output from {what}", shape=exp_out.shape)
    except CheckFailed as e:
        mistake = next((m for m, (o, ww) in tried() if tuple(ww.shape) == tuple(w.shape) and
                        tuple(o.shape) == tuple(out.shape)), None) if isinstance(w, torch.Tensor) \
            and isinstance(out, torch.Tensor) else None
        if mistake is not None:
            raise CheckFailed(f"{e}{shape_hint} Likely cause: {mistake.text}", mistake) from None
        raise CheckFailed(f"{e}{shape_hint}") from None
    t.expect_close(w, exp_w, f"The weights from {what}", lambda: [(m, p[1]) for m, p in tried()], atol=atol)
    t.expect_close(out, exp_out, f"The output from {what}", lambda: [(m, p[0]) for m, p in tried()], atol=atol,
                   probes=[lambda: output_not_from_weights(out, w, v)])


# ---- groups ------------------------------------------------------------------------------

@group("m1", "softmax", provides=("softmax",))
def softmax_values(t: Tester):
    x = t.randn(3, 4, 5)
    for dim in (-1, 1, 0):
        got = t.call("softmax", x, dim=dim)["value"]
        t.expect_close(got, torch.softmax(x, dim), f"`softmax(x, dim={dim})` for x of shape [3, 4, 5]",
                       lambda: CATALOGUE.tried("softmax", x, dim))
    got = t.call("softmax", x)["value"]
    t.expect_close(got, torch.softmax(x, -1), "`softmax(x)` with the default dim", lambda: CATALOGUE.tried("softmax", x))
    blocked = torch.tensor([[0.5, float("-inf"), 1.5, float("-inf")],
                            [float("-inf")] * 4], dtype=torch.float64)
    got = t.call("softmax", blocked, dim=-1)["value"]
    got = t.expect_tensor(got, "`softmax` of rows containing -inf", shape=blocked.shape)
    if torch.isnan(got).any():
        t.fail("`softmax` of a row that is entirely -inf gives NaN; it must give zeros (there is nothing to "
               "attend to). Guard the max you subtract, and the sum you divide by, for such rows.",
               SOFTMAX_NAN_BLOCKED_ROW)
    t.expect_close(got, torch.nan_to_num(torch.softmax(blocked, -1), nan=0.0),
                   "`softmax` of [[0.5, -inf, 1.5, -inf], [-inf, -inf, -inf, -inf]]")
    x32 = t.randn(2, 5, dtype=torch.float32)
    got = t.call("softmax", x32)["value"]
    t.expect_close(got, torch.softmax(x32, -1), "`softmax` of a float32 tensor [2, 5]")
    if got.dtype != torch.float32:
        t.fail(f"`softmax` of a float32 tensor returns {describe(got)}: keep the input's dtype (a float64 tensor "
               f"created inside, or .double(), changes it).", DTYPE_CHANGED)


@group("m1", "mask_helpers", provides=("padding_mask", "causal_mask"))
def mask_helpers(t: Tester):
    for pad_id in (0, 3):
        tokens = t.randint(0, 9, (3, 6))                 # real tokens above and below pad_id
        tokens[tokens == pad_id] = 8
        tokens[0, :2] = torch.tensor([1, 7])
        tokens[0, 4:] = pad_id
        tokens[1, 1:] = pad_id
        if pad_id != 0:
            tokens[2, 0] = 0                             # with another pad_id, 0 is a real token
        got = t.call("padding_mask", tokens, pad_id)["value"]
        what = f"`padding_mask(tokens, pad_id={pad_id})` for tokens of shape [3, 6]"
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (3, 6):
            t.fail(f"{what} has shape [3, 6]; it should be [3, 1, 6]: add the query dimension of size 1 "
                   f"((tokens != pad_id).unsqueeze(1)) so the mask broadcasts over the queries.",
                   PADDING_MASK_NO_QUERY_DIM)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (3, 6, 1):
            t.fail(f"{what} has shape [3, 6, 1]; it should be [3, 1, 6]. With the size-1 dimension last it "
                   f"masks queries, not keys: use .unsqueeze(1).", PADDING_MASK_ON_QUERIES)
        got = t.expect_tensor(got, what, shape=(3, 1, 6))
        if got.dtype != torch.bool:
            t.fail(f"{what} has dtype {str(got.dtype).replace('torch.', '')}; masks are bool (True = may attend).",
                   MASK_NOT_BOOL)
        want = (tokens != pad_id).unsqueeze(1)
        if torch.equal(got, ~want):
            t.fail(f"{what} is inverted: it must be True where the token is real (tokens != pad_id).",
                   PADDING_MASK_INVERTED)
        if pad_id != 0 and any(torch.equal(got, wrong.unsqueeze(1)) for wrong in (tokens != 0, tokens > 0)):
            t.fail(f"{what} gives the wrong values: expected True exactly where tokens != {pad_id}. Likely cause: "
                   f"{PADDING_MASK_IGNORES_PAD_ID.text}", PADDING_MASK_IGNORES_PAD_ID)
        if pad_id != 0 and torch.equal(got, PADDING_MASK_BLOCKS_ZERO(tokens, pad_id)):
            zeros = ", ".join(map(str, torch.nonzero(tokens == 0).tolist()))
            t.fail(f"{what} gives False for the real token 0 (at {zeros} of the tokens): expected "
                   f"True exactly where tokens != {pad_id}. Likely cause: {PADDING_MASK_BLOCKS_ZERO.text}",
                   PADDING_MASK_BLOCKS_ZERO)
        for wrong in ((tokens > pad_id), (tokens >= pad_id), (tokens < pad_id)):
            if torch.equal(got, wrong.unsqueeze(1)) and not torch.equal(got, want):
                t.fail(f"{what} compares the ids with <, > or >=: a token id below (or above) pad_id is a real "
                       f"token too. Use tokens != pad_id.", PADDING_COMPARE)
        if not torch.equal(got, want):
            t.fail(f"{what} gives the wrong values: expected True exactly where tokens != pad_id.")
    for size in (1, 5):
        what = f"`causal_mask({size})`"
        got = t.expect_tensor(t.call("causal_mask", size)["value"], what, shape=(size, size))
        if got.dtype != torch.bool:
            t.fail(f"{what} has dtype {str(got.dtype).replace('torch.', '')}; masks are bool (True = may "
                   f"attend): build it from torch.ones(size, size, dtype=torch.bool).", MASK_NOT_BOOL)
        want = torch.ones(size, size, dtype=torch.bool).tril()
        if not torch.equal(got, want):
            if torch.equal(got, want.T):
                t.fail(f"{what} is transposed: row i (a query) may attend to keys j <= i, so True must be "
                       f"on and below the diagonal (tril), not above it.", CAUSAL_TRANSPOSED)
            if torch.equal(got, want.tril(-1)):
                t.fail(f"{what} leaves out the diagonal: a position may attend to itself (j <= i).",
                       CAUSAL_NO_DIAGONAL)
            if torch.equal(got, ~want):
                t.fail(f"{what} is inverted: True must mean 'may attend' (on and below the diagonal).",
                       CAUSAL_INVERTED)
            t.fail(f"{what} gives the wrong values: expected True on and below the diagonal.")
    got = t.call("causal_mask", 3, device="cpu")["value"]
    t.expect_tensor(got, "`causal_mask(3, device='cpu')`", shape=(3, 3), dtype=torch.bool)
    # The "meta" device needs no GPU: a mask created where asked comes back as a meta tensor.
    got = t.call("causal_mask", 3, device="meta")["value"]
    if isinstance(got, torch.Tensor):
        t.fail("`causal_mask(3, device='meta')` returned a tensor on the CPU: create the mask on the "
               "`device` you are given (torch.ones(..., device=device)), or models on a GPU will fail.",
               CAUSAL_IGNORES_DEVICE)
    if not (isinstance(got, dict) and got.get("__object__") == "Tensor on meta"):
        t.fail(f"`causal_mask(3, device='meta')` should return a tensor on that device, but returned "
               f"{describe(got)}.")


@group("m1", "shapes", depends=ATTENTION_GROUPS)
def shapes(t: Tester):
    cases = [((), 5, 7, 4, 6), ((3,), 5, 7, 4, 3), ((3, 2), 5, 7, 4, 6), ((2, 3, 2), 1, 4, 8, 2)]
    for lead, lq, lk, d_k, d_v in cases:
        q, k, v = attention_inputs(t, lead, lq, lk, d_k, d_v)
        check_attention(t, q, k, v)


@group("m1", "masking", depends=ATTENTION_GROUPS)
def masking(t: Tester):
    B, H, Lq, Lk, d_k, d_v = 3, 2, 5, 7, 4, 6
    # Padding on 3-D inputs: the mask [B, 1, Lk] from padding_mask broadcasts over queries.
    q, k, v = attention_inputs(t, (B,), Lq, Lk, d_k, d_v)
    pad = ragged_padding(t, B, Lk) != 0
    cases = [(q, k, v, pad.unsqueeze(1), "a padding mask [3, 1, 7]")]
    # Causal on 4-D inputs, square.
    q4, k4, v4 = attention_inputs(t, (B, H), 6, 6, d_k, d_v)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    cases.append((q4, k4, v4, causal, "a causal mask [6, 6]"))
    # Padding and causal combined, with one sequence that is all padding (its rows are fully masked).
    tokens = ragged_padding(t, B, 6, with_empty=True)
    combined = (tokens != 0)[:, None, None, :] & causal          # [B, 1, 6, 6]
    cases.append((q4, k4, v4, combined, "a combined padding and causal mask [3, 1, 6, 6] "
                  "(the last sequence is all padding)"))
    # A general random mask on 4-D inputs with Lq != Lk, including one fully masked query row.
    rand = t.rand_bool(B, H, Lq, Lk)
    rand[0, 1, 2] = False
    q5, k5, v5 = attention_inputs(t, (B, H), Lq, Lk, d_k, d_v)
    cases.append((q5, k5, v5, rand, "a random mask [3, 2, 5, 7] with a fully masked query row"))
    # One mask per head [H, Lq, Lk], shared by the batch: plain broadcasting, no unsqueeze needed.
    per_head = t.rand_bool(H, Lq, Lk)
    per_head[..., 0] = True
    cases.append((q5, k5, v5, per_head, "a per-head mask [2, 5, 7] (it broadcasts over the batch)"))
    # Padding whose blocked keys score about 1000 above the real ones for queries 0, 2 and 4 (only the first feature
    # of q and k differs from a plain case): blocking must come before the softmax, whose allowed weights would
    # underflow to 0 (exp(-1000)) if it ran over every key first.
    qd, kd, vd = attention_inputs(t, (B,), Lq, Lk, d_k, d_v)
    qd[:, :, 0] = torch.tensor([40.0, 0.0] * Lq, dtype=qd.dtype)[:Lq]
    kd[:, :, 0] = torch.where(pad, 0.0, 50.0)
    cases.append((qd, kd, vd, pad.unsqueeze(1), "a padding mask [3, 1, 7] whose blocked keys score about 1000 "
                  "above the real keys for queries 0, 2 and 4"))
    for q_, k_, v_, mask, label in cases:
        got = run_attention(t, q_, k_, v_, mask)
        out, w, what = got
        if isinstance(w, torch.Tensor) and torch.isnan(w).any():
            check_nan_rows(t, w, mask, f"The weights from {what} and {label}")
        check_attention(t, q_, k_, v_, mask, label, got=got)


def check_nan_rows(t: Tester, w, mask, what):
    """Fail on NaN weights, saying whether they are in query rows whose keys are all masked."""
    nan_rows = torch.isnan(w).any(-1)
    try:
        open_rows = torch.broadcast_to(mask, w.shape).any(-1)
    except RuntimeError:            # weights of another shape: the comparison with PyTorch's says so
        open_rows = None
    if open_rows is None or (nan_rows & ~open_rows).any():
        t.fail(f"{what} contain NaN. A query row whose keys are all masked must get all-zero weights (and a zero "
               f"output), as in F.scaled_dot_product_attention.", NAN_BLOCKED_ROW)
    rows = torch.nonzero(nan_rows)
    t.fail(f"{what} contain NaN in {len(rows)} query row(s) that have allowed keys (the first is row "
           f"{rows[0].tolist()} of the weights): such a row must get a softmax over its allowed keys, finite "
           f"weights that sum to 1.")


@group("m1", "parity", depends=ATTENTION_GROUPS)
def parity(t: Tester):
    q, k, v = attention_inputs(t, (3, 2), 5, 7, 4, 6)
    check_attention(t, q, k, v, label="no mask (float64)")
    mask = t.rand_bool(3, 1, 5, 7, p=0.8)
    mask[..., 0] = True
    check_attention(t, q, k, v, mask, "a random mask [3, 1, 5, 7] (float64)")
    q, k, v = attention_inputs(t, (4,), 6, 6, 8, 8)
    check_attention(t, q, k, v, label="square shapes (float64)")
    q, k, v = attention_inputs(t, (3, 2), 5, 7, 4, 6, dtype=torch.float32)
    check_attention(t, q, k, v, mask, "a random mask (float32)")


@group("m1", "stability", depends=ATTENTION_GROUPS)
def stability(t: Tester):
    overflow = ("exp of a large score overflows to inf (exp(710) in float64, exp(89) in float32): subtract "
                "each slice's max before exp (softmax(x) == softmax(x - max)).")
    # Rows whose maxima are 10 apart: a correct softmax and a global-max shift both pass; a global sum does not.
    near = t.randn(2, 6) + torch.tensor([[0.0], [10.0]], dtype=torch.float64)
    got = t.call("softmax", near)["value"]
    t.expect_close(got, torch.softmax(near, -1), "`softmax` of rows whose largest entries are 10 apart",
                   lambda: CATALOGUE.tried("softmax", near))
    # Mistakes that would have failed that probe are not candidates below (evidence, not guesswork).
    ruled_out = {m.id for m, v in CATALOGUE.tried("softmax", near) if not t.close(v, torch.softmax(near, -1))}
    x = t.randn(2, 6, scale=1e4)
    got = t.expect_tensor(t.call("softmax", x)["value"], "`softmax` of logits around 1e4", shape=x.shape)
    if not torch.isfinite(got).all():
        t.fail(f"`softmax` of logits around 1e4 gives inf or NaN. Likely cause: {overflow}", SOFTMAX_OVERFLOW)
    t.expect_close(got, torch.softmax(x, -1), "`softmax` of logits around 1e4",
                   lambda: [(m, v) for m, v in CATALOGUE.tried("softmax", x) if m.id not in ruled_out])
    x32 = t.randn(2, 6, dtype=torch.float32, scale=300.0)
    got = t.expect_tensor(t.call("softmax", x32)["value"], "`softmax` of float32 logits around 300", shape=x32.shape)
    if not torch.isfinite(got).all():
        t.fail(f"`softmax` of float32 logits around 300 gives inf or NaN. Likely cause: {overflow}",
               SOFTMAX_OVERFLOW)
    t.expect_close(got, torch.softmax(x32, -1), "`softmax` of float32 logits around 300",
                   lambda: CATALOGUE.tried("softmax", x32))
    q, k, v = attention_inputs(t, (2,), 4, 5, 4, 3, scale=100.0)     # scores around 1e4
    got = run_attention(t, q, k, v)
    for name, value in (("output", got[0]), ("weights", got[1])):
        value = t.expect_tensor(value, f"The {name} from {got[2]}")
        if not torch.isfinite(value).all():
            t.fail(f"The {name} from attention with scores around 1e4 contain inf or NaN: attention must use "
                   f"a softmax that subtracts the max.", SOFTMAX_OVERFLOW)
    # Weights are nearly one-hot here, so only overflow is judged; exact values are parity's job.
    check_attention(t, q, k, v, label="scores around 1e4", atol=1e-6, got=got)


@group("m1", "gradients", depends=ATTENTION_GROUPS)
def gradients(t: Tester):
    B, H, Lq, Lk = 2, 2, 5, 7
    q, k, v = attention_inputs(t, (B, H), Lq, Lk, 4, 6)
    mask = t.rand_bool(B, 1, Lq, Lk, p=0.75)
    mask[..., 0] = True
    g = t.randn(B, H, Lq, 6)
    reply = t.call(SDPA, q, k, v, mask, grad_args=[0, 1, 2], backward=[g, None], catalogue=(CATALOGUE, "attention"))
    pair(t, reply["value"], q, k, v, f"`{SDPA}`")
    if reply.get("grads") is None:
        t.fail(f"No gradient reached q, k and v: {reply.get('grad_problem')}. Build the output with torch "
               f"operations only (no .detach(), .item(), .numpy() or torch.no_grad()).", GRAPH_CUT)
    want = output_grads(expected_attention, (q, k, v), mask, g)
    tried = functools.cache(lambda: [(m, output_grads(m, (q, k, v), mask, g)) for m in CATALOGUE.entries["attention"]])
    for i, (name, got) in enumerate(zip("qkv", reply["grads"])):
        if got is None:
            t.fail(f"No gradient reached `{name}`: the path from {name} to the output is cut somewhere (.detach(), "
                   f".data, torch.no_grad(), .item() or .numpy() between them).", GRAPH_CUT)
        t.expect_close(got, want[i], f"The gradient of the attention output with respect to {name}",
                       lambda i=i: [(m, gr[i]) for m, gr in tried() if gr is not None])
    # A query whose keys are all blocked: its output is 0, and the gradients stay finite (PyTorch's are).
    mask[1, :, 2] = False
    reply = t.call(SDPA, q, k, v, mask, grad_args=[0, 1, 2], backward=[g, None])
    want = output_grads(expected_attention, (q, k, v), mask, g)
    # Wrong values in that row (e.g. a -1e9 fill) are masking's business: here only a finite gradient is asked then.
    value = reply.get("value")
    values_right = (isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], torch.Tensor)
                    and t.close(value[0], expected_attention(q, k, v, mask)[0]))
    for name, got, right in zip("qkv", reply.get("grads") or (), want):
        what = (f"The gradient with respect to {name} when query 2 of batch item 1 has every key blocked (mask "
                f"[{B}, 1, {Lq}, {Lk}])")
        if isinstance(got, torch.Tensor) and got.shape == right.shape and not torch.isfinite(got).all():
            t.fail(f"{what} has {int((~torch.isfinite(got)).sum())} NaN or inf entries; PyTorch's is finite "
                   f"everywhere. Likely cause: {NAN_GRADIENT_BLOCKED_ROW.text}", NAN_GRADIENT_BLOCKED_ROW)
        if values_right:
            t.expect_close(got, right, what)



# The most tensor operations a loop-free version needs at the base sizes below (the reference and the correct
# variants of the tests use at most a third of these).
LOOP_LIMITS = {"softmax": 32, SDPA: 50}


@group("m1", "vectorization", depends=ATTENTION_GROUPS, style=True, observes=True)
def vectorization(t: Tester):
    def softmax_ops(shape):
        x = t.randn(*shape)
        reply = t.call("softmax", x, record=True)
        t.works(reply["value"], torch.softmax(x, -1), "`softmax`")
        return reply["record"]["op_count"]

    def attention_ops(lead, lq, lk, form):
        q, k, v = attention_inputs(t, lead, lq, lk, 4, 3)
        mask = {"none": None, "broadcast": torch.ones(*lead[:1], 1, lq, lk, dtype=torch.bool),
                "per-head": t.rand_bool(*lead, lq, lk, p=0.8) | torch.eye(lq, lk, dtype=torch.bool),
                "2-D": torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)}[form]
        reply = t.call(SDPA, q, k, v, mask, record=True)
        t.works(t.expect_pair(reply["value"], f"`{SDPA}`")[0], expected_attention(q, k, v, mask)[0], f"`{SDPA}`")
        return reply["record"]["op_count"]

    # softmax first: attention calls it, so a loop there would otherwise be blamed on attention. The grown
    # sizes are drawn (seeded) beyond any small constant, so a loop padded to a fixed count is seen too.
    n, m = t.grown(2, 9, 25), t.grown(4, 9, 33)
    t.expect_constant_ops({"base": softmax_ops((2, 3, 4)),
                           f"the first dimension grew from 2 to {n}": softmax_ops((n, 3, 4)),
                           f"the softmax dimension grew from 4 to {m}": softmax_ops((2, 3, m))},
                          "base size", "softmax", "Use reductions with keepdim=True (amax, sum) instead.",
                          limit=LOOP_LIMITS["softmax"])
    b, h, lq, lk = t.grown(2, 9, 25), t.grown(2, 5, 13), t.grown(3, 7, 21), t.grown(4, 9, 25)
    # Every mask form the docstring allows: a loop may hide in the code path of one of them only.
    for form, shown in (("broadcast", "a [B, 1, Lq, Lk] mask"), ("per-head", "a per-head [B, H, Lq, Lk] mask"),
                        ("none", "no mask"), ("2-D", "a 2-D [Lq, Lk] mask")):
        t.expect_constant_ops({"base": attention_ops((2, 2), 3, 4, form),
                               f"the batch grew from 2 to {b}": attention_ops((b, 2), 3, 4, form),
                               f"the number of heads grew from 2 to {h}": attention_ops((2, h), 3, 4, form),
                               f"the query length grew from 3 to {lq}": attention_ops((2, 2), lq, 4, form),
                               f"the key length grew from 4 to {lk}": attention_ops((2, 2), 3, lk, form)},
                              f"base size with {shown}", SDPA, "Use batched operations (q @ k.transpose(-2, -1), "
                              "weights @ v) that handle every leading dimension and every mask shape at once.",
                              limit=LOOP_LIMITS[SDPA])


@group("m1", "from_scratch", depends=ATTENTION_GROUPS, style=True, observes=True)
def from_scratch(t: Tester):
    q, k, v = attention_inputs(t, (2,), 3, 4, 4, 3)
    mask = torch.ones(2, 1, 4, dtype=torch.bool)
    reply = t.call(SDPA, q, k, v, mask, record=True)
    t.works(t.expect_pair(reply["value"], f"`{SDPA}`")[0], expected_attention(q, k, v, mask)[0], f"`{SDPA}`")
    t.expect_allowed(reply["record"], SDPA)
    x = t.randn(2, 5)
    reply = t.call("softmax", x, record=True)
    t.works(reply["value"], torch.softmax(x, -1), "`softmax`")
    t.expect_allowed(reply["record"], "softmax")


@group("m1", "dtype_inplace", depends=ATTENTION_GROUPS, style=True)
def dtype_inplace(t: Tester):
    q, k, v = attention_inputs(t, (2,), 3, 4, 4, 3, dtype=torch.float32)
    mask = t.rand_bool(2, 1, 4)
    mask[..., 0] = True
    reply = t.call(SDPA, q, k, v, mask, return_args=True)
    out, w = t.expect_pair(reply["value"], f"`{SDPA}`")
    t.works(out, expected_attention(q, k, v, mask)[0], f"`{SDPA}` on float32 inputs")
    for name, value in (("output", out), ("weights", w)):
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
            t.fail(f"The {name} for float32 inputs should be float32, but it is {describe(value)}: keep the "
                   f"inputs' dtype (do not convert with .double() or create float64 tensors).", DTYPE_CHANGED)
    # Every mask form (code may reshape only some of them in place, e.g. a 2-D mask given a batch dimension).
    causal = torch.ones(3, 4, dtype=torch.bool).tril(1)
    causal_reply = t.call(SDPA, q, k, v, causal, return_args=True)
    t.works(t.expect_pair(causal_reply["value"], f"`{SDPA}`")[0], expected_attention(q, k, v, causal)[0],
            f"`{SDPA}` on float32 inputs with a 2-D mask")
    for args, after in (((q, k, v, mask), reply["args_after"]), ((q, k, v, causal), causal_reply["args_after"])):
        for name, before, back in zip(("q", "k", "v", "mask"), args, after):
            if not (isinstance(back, torch.Tensor) and back.shape == before.shape and torch.equal(before, back)):
                shape = (f" (its shape went from {shape_str(before.shape)} to {shape_str(back.shape)})"
                         if isinstance(back, torch.Tensor) and back.shape != before.shape else "")
                t.fail(f"`{SDPA}` changed its input `{name}` in place{shape}. Inputs must not be modified: use "
                       f"out-of-place operations (masked_fill, not masked_fill_; mask.unsqueeze(0), not "
                       f"mask.unsqueeze_(0); x = x - m, not x -= m).", INPUT_MODIFIED)
    x = t.randn(2, 5, dtype=torch.float32)
    reply = t.call("softmax", x, return_args=True)
    t.works(reply["value"], torch.softmax(x, -1), "`softmax` on float32 input")
    if reply["value"].dtype != torch.float32:
        t.fail(f"`softmax` of a float32 tensor returns {describe(reply['value'])}: keep the input's dtype.",
               DTYPE_CHANGED)
    if not torch.equal(reply["args_after"][0], x):
        t.fail("`softmax` changed its input `x` in place (for example with x -= x.max() or x.exp_()). "
               "Use out-of-place operations so the caller's tensor is left as it was.", INPUT_MODIFIED)
    if "padding_mask" not in t.values.working:       # wrong, raising or hanging: mask_helpers charges it
        return
    tokens = torch.tensor([[5, 7, 0, 0], [3, 0, 9, 2]])
    reply = t.call("padding_mask", tokens, 0, return_args=True)      # (its values are mask_helpers' business)
    back = reply["args_after"][0]
    if not (isinstance(back, torch.Tensor) and back.shape == tokens.shape and torch.equal(back, tokens)):
        shape = (f" (its shape went from {shape_str(tokens.shape)} to {shape_str(back.shape)})"
                 if isinstance(back, torch.Tensor) and back.shape != tokens.shape else "")
        t.fail(f"`padding_mask` changed its input `tokens` in place{shape}. Inputs must not be modified: use "
               f"out-of-place operations ((tokens != pad_id).unsqueeze(1), not tokens.unsqueeze_(1)).", INPUT_MODIFIED)


@group("m1", "dropout", depends=ATTENTION_GROUPS)
def dropout(t: Tester):
    for p, dtype in ((0.5, torch.float64), (0.2, torch.float64), (0.3, torch.float32)):
        check_dropout(t, p, dtype)
    q, k, v = attention_inputs(t, (4, 2), 8, 8, 4, 6)
    out0, w0, what0 = run_attention(t, q, k, v, dropout_p=0.0, what=f"`{SDPA}(q, k, v, dropout_p=0.0)`")
    check_attention(t, q, k, v, label="dropout_p=0.0", got=(out0, w0, what0))


def check_dropout(t: Tester, p, dtype):
    q, k, v = attention_inputs(t, (4, 2), 8, 8, 4, 6, dtype=dtype)   # 512 weights
    exp_out, exp_w = expected_attention(q, k, v)
    what = f"`{SDPA}(q, k, v, dropout_p={p})` ({str(dtype).replace('torch.', '')})"
    out, w, what = run_attention(t, q, k, v, dropout_p=p, seed=5, what=what)
    w = t.expect_tensor(w, f"The weights from {what}", shape=exp_w.shape)
    t.expect_tensor(out, f"The output from {what}", shape=exp_out.shape)
    for name, value in (("output", out), ("weights", w)):
        if value.dtype != dtype:
            # float64 computed in float32, already proven and charged by a group of values: the same mistake again
            again = value.dtype == torch.float32 and dtype == torch.float64 and \
                _weights_in_float32.id in t.values.proven
            t.fail(f"The {name} from {what} has dtype {str(value.dtype).replace('torch.', '')}: keep the inputs' "
                   f"dtype (a dropout mask or tensor of another dtype changes it).",
                   _weights_in_float32 if again else DTYPE_CHANGED)
    # First: the weights returned must be those the output was made with (at the output's precision).
    mistake = output_not_from_weights(out, w, v)
    if mistake is not None and t.close(w, exp_w):
        # Undropped weights, and an output that is theirs with entries zeroed and the rest divided by (1 - p).
        plain_out = (w.to(exp_out.dtype) @ v)
        zeroed = out == 0
        if zeroed.any() and t.close(out[~zeroed].to(exp_out.dtype), plain_out[~zeroed] / (1 - p)):
            t.fail(f"The output from {what} is not weights @ v for the weights it returns: {zeroed.double().mean():.0%} "
                   f"of the output's entries are 0 and the others are weights @ v divided by (1 - {p}). Likely cause: "
                   f"{DROPOUT_ON_OUTPUT.text}", DROPOUT_ON_OUTPUT)
    if mistake is not None:
        t.fail(f"The output from {what} is not weights @ v for the weights it returns. Likely cause: "
               f"{mistake.text}", mistake)
    dropped = (w == 0)
    share = dropped.double().mean().item()
    if share == 0 and not t.close(w, exp_w) and torch.allclose(w.sum(-1).double(), torch.ones(w.shape[:-1],
                                                                dtype=torch.float64), atol=1e-5):
        t.fail(f"The weights from {what} still sum to 1 in every row and none is exactly 0, although they differ "
               f"from the weights without dropout: dropout seems to act on the scores, before the softmax. Apply it "
               f"to the weights, after the softmax.", DROPOUT_BEFORE_SOFTMAX)
    if share == 0 and t.close(w, exp_w):
        t.fail(f"{what} returns the weights without dropout: `dropout_p` is ignored. Drop each attention "
               f"weight with probability dropout_p (torch.nn.functional.dropout(weights, p=dropout_p)).",
               DROPOUT_IGNORED)
    if abs(share - (1 - p)) < 0.1 and abs(share - p) > 0.15:
        t.fail(f"With dropout_p={p}, {share:.0%} of the weights from {what} are 0: dropout_p is the probability of "
               f"dropping a weight, not of keeping it.", DROPOUT_KEEP_PROBABILITY)
    if abs(share - p) > 0.15:
        t.fail(f"With dropout_p={p}, {share:.0%} of the weights from {what} are 0; about {p:.0%} should be: "
               f"drop each attention weight with probability dropout_p (for example with "
               f"torch.nn.functional.dropout(weights, p=dropout_p)).")
    kept = ~dropped
    # Dropped before the softmax: the right weights of the kept keys, renormalised over them.
    kept_right = exp_w * kept
    renormalised = kept_right / kept_right.sum(-1, keepdim=True).clamp_min(torch.finfo(exp_w.dtype).tiny)
    t.expect_close(w[kept].to(exp_w.dtype), exp_w[kept] / (1 - p), f"The weights kept by {what}", lambda: [
        (DROPOUT_NO_RESCALE, exp_w[kept]),
        (DROPOUT_RESCALE_BY_P, exp_w[kept] / p),
        (DROPOUT_RENORMALISED, renormalised[kept]),
        (DROPOUT_RENORMALISED, renormalised[kept] / (1 - p))] + [
        (m, pair_[1][kept] / (1 - p)) for m, pair_ in CATALOGUE.tried("attention", q, k, v)])
    check_independent_drops(t, w, exp_w, p, what)


def check_independent_drops(t: Tester, w, exp_w, p, what):
    """Each weight is dropped on its own draw: the batch items (dim 0) and the heads (dim 1) of the [B, H, Lq, Lk]
    weights may not all repeat one drop pattern. With independent draws, a pattern that never changes along a dim
    has a chance below 1e-40 at check_dropout's sizes (stated in the message)."""
    dropped = w == 0
    lead = dropped.shape[:-2]
    shared = [d for d in range(len(lead)) if lead[d] > 1 and bool((dropped == dropped.narrow(d, 0, 1)).all())]
    if not shared:
        return
    n = 1
    for d in shared:
        n *= lead[d]
    # Every group of n entries that must agree does: p^n + (1 - p)^n each, numel / n groups.
    chance = (p ** n + (1 - p) ** n) ** (dropped.numel() // n)
    names = ("batch items", "heads")
    alike = {(0, 1): f"all {lead[0]} batch items and all {lead[1]} heads drop exactly the same positions",
             (0,): f"all {lead[0]} batch items drop exactly the same positions (for each head)",
             (1,): f"all {lead[1]} heads drop exactly the same positions (within each batch item)"}[tuple(shared)]
    fact = (f"In the weights from {what}, {alike}; with an independent draw for each weight, that has a chance of "
            f"about {chance:.0e}.")
    keep = ~dropped
    for d in shared:
        keep = keep.narrow(d, 0, 1)
    if not t.close(w.to(exp_w.dtype), DROPOUT_MASK_SHARED(exp_w, keep, p)):
        t.fail(f"{fact} Drop each weight independently: a mask of the weights' full shape (torch.rand_like(weights) "
               f">= dropout_p), or torch.nn.functional.dropout(weights, p=dropout_p).")
    mistake = DROPOUT_MASK_SHARED
    if len(shared) < len(lead):
        mistake = mistake.saying(
            f"the dropout mask has size 1 along the {names[shared[0]]} and is broadcast, so the {names[shared[0]]} "
            f"drop the same weights: drop each weight independently, with a mask of the weights' full shape "
            f"(torch.rand_like(weights) >= dropout_p), or call torch.nn.functional.dropout(weights, p=dropout_p).")
    t.fail(f"{fact} Likely cause: {mistake.text}", mistake)
