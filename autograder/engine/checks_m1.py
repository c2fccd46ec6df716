"""Hidden checks for milestone 1: softmax, masks, scaled dot-product attention.

Expected values come from PyTorch itself (F.scaled_dot_product_attention, torch.softmax) computed
here in the judge. The `diagnose` lists turn a wrong answer into a likely cause by recomputing what
the most common mistakes would have produced.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .checks import CheckFailed, Tester, describe, group, shape_str

SDPA = "scaled_dot_product_attention"


# ---- expected values (judge side) ---------------------------------------------------------

def expected_weights(q, k, mask=None, scale=None, softmax_dim=-1, invert=False, fill=float("-inf")):
    """Attention weights as PyTorch defines them; fully masked rows give zeros.

    The keyword arguments produce the weights of common mistakes, for diagnosis.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    w = torch.softmax(scores, dim=softmax_dim)
    return torch.nan_to_num(w, nan=0.0)


def expected_attention(q, k, v, mask=None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, expected_weights(q, k, mask)


def mistakes(q, k, v, mask=None):
    """(explanation, (output, weights)) for the usual mistakes."""
    d_k = q.size(-1)
    out = []

    def add(text, w):
        out.append((text, (w @ v, w)))

    add("the scores are not divided by sqrt(d_k) (divide q @ k^T by math.sqrt(d_k)).",
        expected_weights(q, k, mask, scale=1.0))
    add("the scores are divided by d_k instead of sqrt(d_k).", expected_weights(q, k, mask, scale=float(d_k)))
    add("the softmax runs over the wrong dimension: each query's weights must sum to 1 over the keys "
        "(dim=-1).", expected_weights(q, k, mask, softmax_dim=-2))
    if mask is not None:
        add("the mask is inverted: True means 'may attend', so block the keys where the mask is False.",
            expected_weights(q, k, mask, invert=True))
        add("masked scores are filled with a large negative number instead of -inf; rows with no allowed "
            "key then average v instead of giving zeros.",
            torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(~mask, -1e9), -1))
        add("the mask is added to the scores as 0/1 numbers; use it to block keys instead: "
            "scores.masked_fill(~mask, float('-inf')).",
            torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k) + mask.to(q.dtype), -1))
        raw = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), -1)
        add("the mask is applied after the softmax, so the remaining weights no longer sum to 1.",
            raw.masked_fill(~mask, 0.0))
    return out


def diag(items, part):
    """Pick the output (0) or weights (1) of each mistake for expect_close."""
    return [(text, pair[part]) for text, pair in items]


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


def run_attention(t: Tester, q, k, v, mask=None, what=None):
    """Call the student's attention and check the basic form of the result."""
    reply = t.call(SDPA, q, k, v, mask) if mask is not None else t.call(SDPA, q, k, v)
    what = what or f"`{SDPA}` with q, k, v of shapes {shapes_text(q, k, v)}"
    out, w = pair(t, reply["value"], q, k, v, what)
    return out, w, what


def pair(t: Tester, value, q, k, v, what):
    """The (output, weights) pair, with a clear message when it is not one or is swapped."""
    out, w = t.expect_pair(value, what)
    out_shape, w_shape = (*q.shape[:-1], v.size(-1)), (*q.shape[:-1], k.size(-2))
    if (isinstance(out, torch.Tensor) and isinstance(w, torch.Tensor) and out_shape != w_shape
            and tuple(out.shape) == w_shape and tuple(w.shape) == out_shape):
        t.fail(f"{what} returned (weights, output): return them in the order (output, weights).")
    return out, w


def check_attention(t: Tester, q, k, v, mask=None, label="", atol=None):
    out, w, what = run_attention(t, q, k, v, mask)
    what = what + (f" and {label}" if label else "")
    exp_out, exp_w = expected_attention(q, k, v, mask)
    known = mistakes(q, k, v, mask)
    t.expect_close(w, exp_w, f"The weights from {what}", diag(known, 1), atol=atol)
    t.expect_close(out, exp_out, f"The output from {what}", diag(known, 0), atol=atol)


# ---- groups ------------------------------------------------------------------------------

@group("m1", "softmax")
def softmax_values(t: Tester):
    x = t.randn(3, 4, 5)
    for dim in (-1, 1, 0):
        got = t.call("softmax", x, dim=dim)["value"]
        other = [("the softmax is taken over the last dimension whatever `dim` says.",
                  torch.softmax(x, -1)) if dim != -1 else ("", None)]
        t.expect_close(got, torch.softmax(x, dim), f"`softmax(x, dim={dim})` for x of shape [3, 4, 5]", other)
    got = t.call("softmax", x)["value"]
    t.expect_close(got, torch.softmax(x, -1), "`softmax(x)` with the default dim")
    blocked = torch.tensor([[0.5, float("-inf"), 1.5, float("-inf")],
                            [float("-inf")] * 4], dtype=torch.float64)
    got = t.call("softmax", blocked, dim=-1)["value"]
    got = t.expect_tensor(got, "`softmax` of rows containing -inf", shape=blocked.shape)
    if torch.isnan(got).any():
        t.fail("`softmax` of a row that is entirely -inf gives NaN; it must give zeros (there is nothing to "
               "attend to). Guard the max you subtract, and the sum you divide by, for such rows.")
    t.expect_close(got, torch.nan_to_num(torch.softmax(blocked, -1), nan=0.0),
                   "`softmax` of [[0.5, -inf, 1.5, -inf], [-inf, -inf, -inf, -inf]]")


@group("m1", "mask_helpers")
def mask_helpers(t: Tester):
    for pad_id in (0, 3):
        tokens = t.randint(4, 9, (3, 6))
        tokens[0, 4:] = pad_id
        tokens[1, 1:] = pad_id
        got = t.call("padding_mask", tokens, pad_id)["value"]
        what = f"`padding_mask(tokens, pad_id={pad_id})` for tokens of shape [3, 6]"
        got = t.expect_tensor(got, what, shape=(3, 1, 6), dtype=torch.bool)
        want = (tokens != pad_id).unsqueeze(1)
        if torch.equal(got, ~want):
            t.fail(f"{what} is inverted: it must be True where the token is real (tokens != pad_id).")
        if not torch.equal(got, want):
            t.fail(f"{what} gives the wrong values: expected True exactly where tokens != pad_id.")
    for size in (1, 5):
        what = f"`causal_mask({size})`"
        got = t.expect_tensor(t.call("causal_mask", size)["value"], what, shape=(size, size), dtype=torch.bool)
        want = torch.ones(size, size, dtype=torch.bool).tril()
        if not torch.equal(got, want):
            if torch.equal(got, want.T):
                t.fail(f"{what} is transposed: row i (a query) may attend to keys j <= i, so True must be "
                       f"on and below the diagonal (tril), not above it.")
            if torch.equal(got, want.tril(-1)):
                t.fail(f"{what} leaves out the diagonal: a position may attend to itself (j <= i).")
            if torch.equal(got, ~want):
                t.fail(f"{what} is inverted: True must mean 'may attend' (on and below the diagonal).")
            t.fail(f"{what} gives the wrong values: expected True on and below the diagonal.")
    got = t.call("causal_mask", 3, device="cpu")["value"]
    t.expect_tensor(got, "`causal_mask(3, device='cpu')`", shape=(3, 3), dtype=torch.bool)
    # The "meta" device needs no GPU: a mask created where asked comes back as a meta tensor.
    got = t.call("causal_mask", 3, device="meta")["value"]
    if isinstance(got, torch.Tensor):
        t.fail("`causal_mask(3, device='meta')` returned a tensor on the CPU: create the mask on the "
               "`device` you are given (torch.ones(..., device=device)), or models on a GPU will fail.")
    if not (isinstance(got, dict) and got.get("__object__") == "Tensor on meta"):
        t.fail(f"`causal_mask(3, device='meta')` should return a tensor on that device, but returned "
               f"{describe(got)}.")


@group("m1", "shapes")
def shapes(t: Tester):
    cases = [((), 5, 7, 4, 6), ((3,), 5, 7, 4, 3), ((3, 2), 5, 7, 4, 6), ((2, 3, 2), 1, 4, 8, 2)]
    for lead, lq, lk, d_k, d_v in cases:
        q, k, v = attention_inputs(t, lead, lq, lk, d_k, d_v)
        out, w, what = run_attention(t, q, k, v)
        hint = ("" if isinstance(out, torch.Tensor) and out.shape[-1] == d_v else
                " The output takes its last dimension from v: output = weights @ v.")
        try:
            t.expect_tensor(w, f"The weights from {what}", shape=(*lead, lq, lk))
            t.expect_tensor(out, f"The output from {what}", shape=(*lead, lq, d_v))
        except CheckFailed as e:
            t.fail(f"{e}{hint} Use k.transpose(-2, -1) (not .T) so any number of leading dims works.")


@group("m1", "masking")
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
    for q_, k_, v_, mask, label in cases:
        out, w, what = run_attention(t, q_, k_, v_, mask)
        what = f"{what} and {label}"
        w = t.expect_tensor(w, f"The weights from {what}", shape=torch.broadcast_shapes(
            mask.shape, (*q_.shape[:-1], k_.shape[-2])))
        blocked = ~mask.expand_as(w)
        finite = torch.isfinite(w)
        if (w[blocked & finite] != 0).any() and (w[~blocked & finite] == 0).all():
            t.fail(f"The weights from {what} are 0 exactly where the mask is True and non-zero where it is "
                   f"False: the mask is inverted. True means 'may attend', so block the keys where the "
                   f"mask is False (scores.masked_fill(~mask, float('-inf'))).")
        if torch.isnan(w).any():
            t.fail(f"The weights from {what} contain NaN. A query row whose keys are all masked must get "
                   f"all-zero weights (and a zero output), as in F.scaled_dot_product_attention.")
        if (w[blocked] != 0).any():
            leaked = (w[blocked] != 0).sum().item()
            empty_rows = blocked.all(dim=-1, keepdim=True).expand_as(w)
            if not (w[blocked & ~empty_rows] != 0).any():
                t.fail(f"The weights from {what} are not 0 in query rows where every key is masked. Such a "
                       f"row must get all-zero weights and a zero output (as F.scaled_dot_product_attention "
                       f"gives). Filling masked scores with a large negative number (like -1e9) spreads the "
                       f"weight evenly instead: fill with -inf, and make your softmax return zeros for a "
                       f"row that is all -inf.")
            t.fail(f"The weights from {what} are not exactly 0 at {leaked} masked position(s). Masked keys "
                   f"must get weight exactly 0: set their scores to -inf before the softmax (mask False = "
                   f"blocked).")
        check_attention(t, q_, k_, v_, mask, label)


@group("m1", "parity")
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


@group("m1", "stability")
def stability(t: Tester):
    x = t.randn(2, 6, scale=1e4)
    got = t.call("softmax", x)["value"]
    got = t.expect_tensor(got, "`softmax` of logits around 1e4", shape=x.shape)
    if not torch.isfinite(got).all():
        t.fail("`softmax` of logits around 1e4 gives inf or NaN: exp(10000) overflows. Subtract each "
               "slice's max before exp (softmax(x) == softmax(x - max)).")
    t.expect_close(got, torch.softmax(x, -1), "`softmax` of logits around 1e4")
    x32 = t.randn(2, 6, dtype=torch.float32, scale=300.0)
    got = t.call("softmax", x32)["value"]
    got = t.expect_tensor(got, "`softmax` of float32 logits around 300", shape=x32.shape)
    if not torch.isfinite(got).all():
        t.fail("`softmax` of float32 logits around 300 gives inf or NaN: exp overflows float32 above 88. "
               "Subtract each slice's max before exp.")
    t.expect_close(got, torch.softmax(x32, -1), "`softmax` of float32 logits around 300")
    q, k, v = attention_inputs(t, (2,), 4, 5, 4, 3, scale=100.0)     # scores around 1e4
    out, w, what = run_attention(t, q, k, v)
    for name, value in (("output", out), ("weights", w)):
        value = t.expect_tensor(value, f"The {name} from {what}")
        if not torch.isfinite(value).all():
            t.fail(f"The {name} from attention with scores around 1e4 contain inf or NaN: use your stable "
                   f"softmax (subtract the max) inside attention.")
    # Weights are nearly one-hot here, so only overflow is judged; exact values are parity's job.
    check_attention(t, q, k, v, label="scores around 1e4", atol=1e-6)


@group("m1", "gradients")
def gradients(t: Tester):
    B, H, Lq, Lk = 2, 2, 5, 7
    q, k, v = attention_inputs(t, (B, H), Lq, Lk, 4, 6)
    mask = t.rand_bool(B, 1, Lq, Lk, p=0.75)
    mask[..., 0] = True
    g = t.randn(B, H, Lq, 6)
    reply = t.call(SDPA, q, k, v, mask, grad_args=[0, 1, 2], backward=[g, None])
    pair(t, reply["value"], q, k, v, f"`{SDPA}`")
    if reply.get("grads") is None:
        t.fail(f"No gradient reached q, k and v: {reply.get('grad_problem')}. Build the output with torch "
               f"operations only (no .detach(), .item(), .numpy() or torch.no_grad()).")
    qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
    F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask).backward(g)
    for name, got, want in zip("qkv", reply["grads"], (qq.grad, kk.grad, vv.grad)):
        if got is None:
            t.fail(f"No gradient reached `{name}`: the output does not depend on it through torch operations.")
        t.expect_close(got, want, f"The gradient of the attention output with respect to {name}")


def _op_count(t: Tester, func, *args, **kwargs):
    rec = t.call(func, *args, record=True, **kwargs)["record"]
    return rec["op_count"]


@group("m1", "vectorization")
def vectorization(t: Tester):
    def count(lead, lq, lk):
        q, k, v = attention_inputs(t, lead, lq, lk, 4, 3)
        mask = torch.ones(*lead[:1], 1, lq, lk, dtype=torch.bool)
        return _op_count(t, SDPA, q, k, v, mask)

    base = count((2, 2), 3, 4)
    for label, args in (("the batch grew from 2 to 5", ((5, 2), 3, 4)),
                        ("the number of heads grew from 2 to 4", ((2, 4), 3, 4)),
                        ("the query length grew from 3 to 6", ((2, 2), 6, 4)),
                        ("the key length grew from 4 to 9", ((2, 2), 3, 9))):
        n = count(*args)
        if n != base:
            t.fail(f"`{SDPA}` ran {base} tensor operations at the base size but {n} when {label}: that "
                   f"points to a Python loop over that dimension. Use batched operations (q @ "
                   f"k.transpose(-2, -1), weights @ v) that handle every leading dimension at once.")
    base = _op_count(t, "softmax", t.randn(2, 3, 4))
    for label, shape in (("the first dimension grew from 2 to 5", (5, 3, 4)),
                         ("the softmax dimension grew from 4 to 9", (2, 3, 9))):
        n = _op_count(t, "softmax", t.randn(*shape))
        if n != base:
            t.fail(f"`softmax` ran {base} tensor operations at the base size but {n} when {label}: that "
                   f"points to a Python loop. Use reductions with keepdim=True (amax, sum) instead.")


@group("m1", "from_scratch")
def from_scratch(t: Tester):
    q, k, v = attention_inputs(t, (2,), 3, 4, 4, 3)
    mask = torch.ones(2, 1, 4, dtype=torch.bool)
    t.expect_allowed(t.call(SDPA, q, k, v, mask, record=True)["record"], SDPA)
    t.expect_allowed(t.call("softmax", t.randn(2, 5), record=True)["record"], "softmax")


@group("m1", "dtype_inplace")
def dtype_inplace(t: Tester):
    q, k, v = attention_inputs(t, (2,), 3, 4, 4, 3, dtype=torch.float32)
    mask = t.rand_bool(2, 1, 4)
    mask[..., 0] = True
    reply = t.call(SDPA, q, k, v, mask, return_args=True)
    out, w = t.expect_pair(reply["value"], f"`{SDPA}`")
    t.expect_tensor(out, "The output for float32 inputs", dtype=torch.float32)
    t.expect_tensor(w, "The weights for float32 inputs", dtype=torch.float32)
    for name, before, after in zip(("q", "k", "v", "mask"), (q, k, v, mask), reply["args_after"]):
        if not torch.equal(before, after):
            t.fail(f"`{SDPA}` changed its input `{name}` in place. Inputs must not be modified: use "
                   f"out-of-place operations (masked_fill, not masked_fill_; x = x - m, not x -= m).")
    x = t.randn(2, 5, dtype=torch.float32)
    reply = t.call("softmax", x, return_args=True)
    t.expect_tensor(reply["value"], "`softmax` of a float32 tensor", dtype=torch.float32)
    if not torch.equal(reply["args_after"][0], x):
        t.fail("`softmax` changed its input `x` in place (for example with x -= x.max() or x.exp_()). "
               "Use out-of-place operations so the caller's tensor is left as it was.")


@group("m1", "dropout")
def dropout(t: Tester):
    p = 0.5
    q, k, v = attention_inputs(t, (4, 2), 8, 8, 4, 6)              # 512 weights
    exp_out, exp_w = expected_attention(q, k, v)
    what = f"`{SDPA}(q, k, v, dropout_p={p})`"
    out, w = pair(t, t.call(SDPA, q, k, v, dropout_p=p, seed=5)["value"], q, k, v, what)
    w = t.expect_tensor(w, f"The weights from {what}", shape=exp_w.shape)
    dropped = (w == 0)
    share = dropped.double().mean().item()
    if share < 0.3 or share > 0.7:
        t.fail(f"With dropout_p={p}, {share:.0%} of the weights from {what} are 0; about {p:.0%} should be: "
               f"drop each attention weight with probability dropout_p (for example with "
               f"torch.nn.functional.dropout(weights, p=dropout_p)).")
    kept = ~dropped
    t.expect_close(w[kept], exp_w[kept] / (1 - p), f"The weights kept by {what}", [
        ("the weights that survive dropout must be divided by (1 - dropout_p), so the expected output is "
         "unchanged (F.dropout does this).", exp_w[kept])])
    t.expect_close(out, w @ v, f"The output from {what}", [
        ("the output must be computed from the weights after dropout (output = weights @ v).", exp_out)])
    out0, w0 = pair(t, t.call(SDPA, q, k, v, dropout_p=0.0)["value"], q, k, v, f"`{SDPA}(..., dropout_p=0.0)`")
    t.expect_close(w0, exp_w, f"The weights from `{SDPA}(q, k, v, dropout_p=0.0)` (no dropout)")
