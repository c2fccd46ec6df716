"""Public tests for milestone 1. Run `pytest -q` in this folder (about 1.2 s cold on 2 cores
measured with the reference files; several times that while other jobs share the machine).

A quick subset of the grader's checks: softmax against torch.softmax (any dim, -inf slices, large logits,
rows far apart), the two mask helpers (any pad_id, the device argument), attention against
torch.nn.functional.scaled_dot_product_attention (shapes, masks of every shape, fully masked rows, blocked keys
with the largest scores, float32, gradients), dropout (rate, rescaling, a draw for each weight), inputs left unchanged, loops (torch calls counted at two sizes,
with every kind of mask) and the forbidden functions. A failing test names the hidden check group that
checks the same thing (testkit.py). One mistake is charged once, where it is; the hidden checks go further.

(PYTEST_DONT_REWRITE: that marker keeps pytest from expanding each failed expression, so a failure prints
its own message only.)
"""
import fnmatch
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import attention
from testkit import FORBIDDEN, TorchCalls, cause, describe, group, guarded

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores


# softmax and attention get copies of their inputs: a change in place fails only the tests that look for it
# (test_softmax_keeps_dtype_and_input, test_inputs_are_not_modified), not every value after it.
softmax, scaled_dot_product_attention = (guarded(f, copies=True) for f in (attention.softmax,
                                                                          attention.scaled_dot_product_attention))
padding_mask, causal_mask = guarded(attention.padding_mask), guarded(attention.causal_mask)


def _diff(got, want, rtol=1e-9, atol=1e-10):
    """Where and how far two tensors of one shape differ, in words."""
    bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
    if not bad.any():
        return "they agree"
    gap = torch.where(bad, (got - want).abs().nan_to_num(nan=float("inf")), 0)
    at = tuple(int(i) for i in torch.unravel_index(gap.flatten().argmax(), gap.shape))
    g, w = gap[at].item(), abs(want[at].item())
    n = min(17, max(6, 2 + math.ceil(math.log10(w / g)))) if 0 < g < float("inf") and w > 0 else 6
    return (f"{bad.sum().item()} of {bad.numel()} entries differ, by up to {g:.3g} (at index "
            f"{list(at)}: {got[at].item():.{n}g} instead of {want[at].item():.{n}g})")


def _broadcast_clash(error, a, b):
    """True when `error` is the size clash of broadcasting shapes a and b (same sizes, same dimension)."""
    found = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
                      r"dimension (\d+)", str(error))
    if found is None:
        return False
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    clashes = [(i, {x, y}) for i, (x, y) in enumerate(zip(a, b)) if x != y and 1 not in (x, y)]
    sizes, dim = {int(found[1]), int(found[2])}, int(found[3])
    return any(i == dim and s == sizes for i, s in clashes)


def _close(a, b):
    """float64 agreement, to the grader's tolerance: only rounding may differ (a float32 step on the way shows)."""
    return torch.allclose(a, b, rtol=1e-9, atol=1e-10)


def _precision(a, b):
    """A fact worth stating: two float64 results that agree only to float32 precision."""
    if a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6):
        return (" (they agree only to about 1e-7, float32's precision; float64 results should agree to rounding, "
                "about 1e-15)")
    return ""


def _qkv(*lead, lq=3, lk=5, d_k=4, d_v=6, dtype=torch.float64, scale=1.0):
    return (scale * torch.randn(*lead, lq, d_k, dtype=dtype), scale * torch.randn(*lead, lk, d_k, dtype=dtype),
            torch.randn(*lead, lk, d_v, dtype=dtype))


def _random_mask(*shape):
    """A random bool mask where every query row may attend to key 0 (no row fully masked)."""
    mask = torch.rand(*shape) < 0.6
    mask[..., 0] = True
    return mask


def _expected(q, k, v, mask=None, scale=None):
    """PyTorch's attention: (output, weights). The weights are F.scaled_dot_product_attention applied to the
    identity matrix as values (weights @ I); a fully masked query row gets zeros in both."""
    eye = torch.eye(k.size(-2), dtype=q.dtype)
    return (F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale),
            F.scaled_dot_product_attention(q, k, eye.expand(*k.shape[:-1], k.size(-2)), attn_mask=mask, scale=scale))


_SCALES = [   # a known mistake: the factor its scores are multiplied by, given (d_k, d_v), and the grader's sentence
    ("1/sqrt(d_v)", lambda d_k, d_v: 1 / math.sqrt(d_v), cause("sqrt_dv")),
    ("1 (no scaling)", lambda d_k, d_v: 1.0, cause("no_sqrt")),
    ("1/d_k", lambda d_k, d_v: 1 / d_k, cause("divide_by_dk")),
]


def _attention_diff(q, k, v, mask, out, w, rtol=1e-9, atol=1e-10):
    """What differs between (out, w) and PyTorch's attention; and a known mistake, only if its own answer (PyTorch's
    attention with that mistake's scale) is exactly yours."""
    want_out, want_w = _expected(q, k, v, mask)
    parts = [f"{name}: {_diff(a, b, rtol, atol)}" for name, a, b in (("weights", w, want_w), ("output", out, want_out))
             if not torch.allclose(a, b, rtol=rtol, atol=atol)]
    d_k, d_v = q.size(-1), v.size(-1)
    for words, scale, sentence in _SCALES:
        s = scale(d_k, d_v)
        if not math.isclose(s, 1 / math.sqrt(d_k)):
            o, ww = _expected(q, k, v, mask, scale=s)
            if torch.allclose(w, ww, rtol=rtol, atol=atol) and torch.allclose(out, o, rtol=rtol, atol=atol):
                parts.append(f"yours is exactly PyTorch's attention with the scores multiplied by {words} = {s:.4g} "
                             f"instead of 1/sqrt(d_k) = {1 / math.sqrt(d_k):.4g} (d_k = {d_k}, d_v = {d_v}). "
                             + sentence)
                break
    if atol <= 1e-10:
        parts.append(_precision(w, want_w) or _precision(out, want_out))
    return "; ".join(p for p in parts if p)


def _shapes(**tensors):
    return ", ".join(f"{name} {list(t.shape)}" for name, t in tensors.items())


# ------------------------------------------------------------------------------------- softmax

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_torch(dim):
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    got = softmax(x, dim=dim)
    assert got.shape == x.shape, f"softmax should keep the shape {tuple(x.shape)}, got {tuple(got.shape)}"
    want = torch.softmax(x, dim)
    if not _close(got, want):
        sums = got.sum(dim)
        if dim != -1 and _close(got, torch.softmax(x, -1)):
            hint = f" Your result is torch.softmax(x, -1). {cause('softmax_ignores_dim')}"
        elif _close(got, torch.softmax(x.flatten(), 0).view_as(x)):
            hint = f" Your result is the softmax of the whole tensor at once. {cause('softmax_global_sum')}"
        else:
            hint = ""
        pytest.fail(f"softmax(x, dim={dim}) on x [3, 4, 5] differs from torch.softmax(x, {dim}): {_diff(got, want)}; "
                    f"your slices along dim {dim} sum to between {sums.min().item():.6g} and {sums.max().item():.6g} "
                    f"(each should sum to 1).{hint} [{group('softmax')}]")
    if dim == -1:
        assert _close(softmax(x), torch.softmax(x, -1)), f"softmax(x) should use dim=-1 by default [{group('softmax')}]"


def test_softmax_of_rows_with_minus_inf():
    x = torch.tensor([[0.5, float("-inf"), 1.5, float("-inf")], [float("-inf")] * 4], dtype=torch.float64)
    got = softmax(x, dim=-1)
    nan_rows = [i for i in range(2) if torch.isnan(got[i]).any()]
    assert not nan_rows, (
        f"softmax of [[0.5, -inf, 1.5, -inf], [-inf] * 4] gives NaN in row(s) {nan_rows}"
        + (": a row that is entirely -inf must give zeros, not NaN; there the max is -inf (-inf - -inf is NaN) and "
           "the sum of the exps is 0 (0 / 0 is NaN), so guard both" if nan_rows == [1] else "")
        + f" [{group('softmax')}]")
    want = torch.tensor([[math.exp(-1) / (1 + math.exp(-1)), 0.0, 1 / (1 + math.exp(-1)), 0.0], [0.0] * 4],
                        dtype=torch.float64)
    assert _close(got, want), (
        f"softmax of [[0.5, -inf, 1.5, -inf], [-inf] * 4] should be {want.tolist()}, got {got.tolist()} "
        f"[{group('softmax')}]")


def test_softmax_is_stable_for_large_logits():
    x = 1e4 + torch.randn(2, 6, dtype=torch.float64)                   # every entry near 1e4: exp(1e4) is inf
    for what, x, tol in (("logits around 1e4", x, {}), ("float32 logits around 300", 300 + torch.randn(2, 6),
                                                              {"rtol": 1e-5, "atol": 1e-6})):
        got = softmax(x)
        want = torch.softmax(x, -1)
        if not torch.allclose(got, want, **(tol or {"rtol": 1e-9, "atol": 1e-10})):
            # without the max shift: exp(x) is inf in every entry here, and inf / inf is NaN in every entry
            overflow = bool(torch.isinf(torch.exp(x)).all()) and bool(torch.isnan(got).all())
            pytest.fail(f"softmax of {what} (x {list(x.shape)}) differs from torch.softmax: "
                        + ("every entry is NaN, as exp(x) / sum(exp(x)) gives when exp overflows. "
                           f"{cause('softmax_overflow')}" if overflow else _diff(got, want, **tol))
                        + f" [{group('stability')}]")


def test_softmax_of_rows_far_apart():
    """Each row is shifted by its own max: a row 1000 below another must not vanish."""
    x = torch.randn(3, 5, dtype=torch.float64) + torch.tensor([[0.0], [1000.0], [-1000.0]], dtype=torch.float64)
    got = softmax(x, dim=-1)
    want = torch.softmax(x, -1)
    if not _close(got, want):
        lost = [i for i in range(3) if not _close(got[i], want[i])]
        # one max for the whole tensor (about 1000): rows 0 and 2 underflow to exp(...) = 0, so 0 / 0 (NaN) or zeros
        underflow = lost == [0, 2] and all(torch.isnan(got[i]).all() or (got[i] == 0).all() for i in lost)
        pytest.fail(f"softmax of rows whose maxima are 0, 1000 and -1000 differs from torch.softmax in row(s) {lost}"
                    + (f" (all NaN or all 0 there, row 1 right). {cause('softmax_global_max')}" if underflow else
                       "".join(f"; row {i}: {_diff(got[i], want[i])}" for i in lost))
                    + f" [{group('stability')}]")


def test_softmax_keeps_dtype_and_input():
    x = torch.randn(3, 5)
    before = x.clone()
    got = guarded(attention.softmax)(x)                  # the input itself, to see whether it changes
    assert got.dtype == torch.float32, (
        f"softmax of a float32 tensor should be float32, got {got.dtype}: no float64 tensors or .double() inside "
        f"[{group('dtype_inplace')}]")
    assert torch.equal(x, before), (
        "softmax changed its input in place (x -= m, x.sub_(m), x.exp_()): use out-of-place operations "
        f"[{group('dtype_inplace')}]")


def test_softmax_has_no_loop_and_no_forbidden_functions():
    counts = {}
    for label, shape in (("base [2, 3, 4]", (2, 3, 4)), ("first dim 7", (7, 3, 4)), ("middle dim 6", (2, 6, 4)),
                         ("softmax dim 9", (2, 3, 9))):
        with TorchCalls() as calls:
            softmax(torch.randn(*shape, dtype=torch.float64))
        counts[label] = calls.count
        used = sorted({n for n in calls.names for where, patterns, _ in FORBIDDEN if where in ("all", "softmax")
                       for p in patterns if not p.startswith("aten::") and fnmatch.fnmatchcase(n, p)})
        assert not used, f"softmax calls {', '.join(used)}: write it with exp, max and sum [{group('from_scratch')}]"
    assert len(set(counts.values())) == 1, (
        f"softmax makes a different number of torch calls as the input grows: {counts}. A count that grows with a "
        f"size means a Python loop; use reductions with keepdim=True [{group('vectorization')}]")


# --------------------------------------------------------------------------------------- masks

@pytest.mark.parametrize("pad_id", [0, 3])
def test_padding_mask(pad_id):
    tokens = torch.tensor([[5, 1, pad_id, pad_id], [pad_id, 7, 2, pad_id]])          # real ids above and below pad_id
    if pad_id != 0:
        tokens[0, 1] = 0                                                           # with another pad_id, 0 is real
    got = padding_mask(tokens, pad_id=pad_id)
    assert got.dtype == torch.bool, f"padding_mask should return a bool tensor, got {got.dtype} [{group('mask_helpers')}]"
    assert got.shape == (2, 1, 4), (
        f"padding_mask should return [B, 1, L] = (2, 1, 4), got {tuple(got.shape)} [{group('mask_helpers')}]")
    want = [[[True, True, False, False]], [[False, True, True, False]]]
    if got.tolist() != want:
        known = {"(tokens > pad_id): ids below pad_id are real tokens too": (tokens > pad_id)[:, None].tolist(),
                 "(tokens == pad_id): the mask is inverted (True = a real token)": (tokens == pad_id)[:, None].tolist(),
                 f"(tokens != pad_id) & (tokens != 0). {cause('padding_mask_blocks_zero')}":
                     ((tokens != pad_id) & (tokens != 0))[:, None].tolist()}
        hint = next((f": yours is {name}" for name, mask in known.items() if mask == got.tolist()), "")
        pytest.fail(f"padding_mask(tokens, pad_id={pad_id}) for tokens {tokens.tolist()} should be {want} (True exactly "
                    f"where tokens != pad_id), got {got.tolist()}{hint} [{group('mask_helpers')}]")


@pytest.mark.parametrize("size", [1, 3])
def test_causal_mask(size):
    got = causal_mask(size)
    assert got.dtype == torch.bool and got.shape == (size, size), (
        f"causal_mask({size}) should be a bool tensor of shape ({size}, {size}), got {got.dtype} of shape "
        f"{tuple(got.shape)} [{group('mask_helpers')}]")
    want = torch.ones(size, size, dtype=torch.bool).tril()
    if not torch.equal(got, want):
        known = {"the upper triangle (transposed)": want.T, "inverted": ~want, "without the diagonal": want.tril(-1)}
        hint = next((f": yours is {name}" for name, mask in known.items() if torch.equal(got, mask)), "")
        pytest.fail(f"causal_mask({size}) should be True on and below the diagonal, {want.tolist()}; got {got.tolist()}"
                    f"{hint} [{group('mask_helpers')}]")


class _Devices(TorchFunctionMode):
    """Records every device handed to a torch function (torch.ones(..., device=d), x.to(d), ...)."""

    def __enter__(self):
        self.seen = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.seen += [a for a in (*args, *kwargs.values()) if isinstance(a, (str, torch.device))]
        return func(*args, **kwargs)


def test_causal_mask_on_the_device_asked():
    device = torch.device("cpu")          # the only device every machine has; the test looks at where it goes
    with _Devices() as devices:
        got = causal_mask(3, device=device)
    assert got.device == device and any(torch.device(d) == device for d in devices.seen if d in ("cpu", device)), (
        "causal_mask(3, device=...) never hands its `device` to torch: create the mask on the device you are given "
        f"(torch.ones(..., device=device)), or a model on a GPU gets a mask on the CPU [{group('mask_helpers')}]")


# ----------------------------------------------------------------------------------- attention

@pytest.mark.parametrize("lead", [(), (2,), (2, 3)])
def test_attention_shapes(lead):
    q, k, v = _qkv(*lead)
    out, w = scaled_dot_product_attention(q, k, v)
    if w.shape == (*lead, 3, 6) and out.shape == (*lead, 3, 5):
        pytest.fail(f"the first result has the weights' shape {list(out.shape)} and the second the output's "
                    f"{list(w.shape)}. {cause('swapped_return')} [{group('shapes')}]")
    assert w.shape == (*lead, 3, 5), f"weights should be [..., Lq, Lk] = {(*lead, 3, 5)}, got {tuple(w.shape)} [{group('shapes')}]"
    assert out.shape == (*lead, 3, 6), f"output should be [..., Lq, d_v] = {(*lead, 3, 6)}, got {tuple(out.shape)} [{group('shapes')}]"


def test_attention_matches_pytorch():
    q, k, v = _qkv(2, 3)
    out, w = scaled_dot_product_attention(q, k, v)
    want_out, want_w = _expected(q, k, v)
    assert _close(w, want_w) and _close(out, want_out), (
        f"attention(q, k, v) with {_shapes(q=q, k=k, v=v)} (float64, no mask) differs from "
        f"F.scaled_dot_product_attention (weights = softmax(q @ k^T / sqrt(d_k)) over the keys; only rounding may "
        f"differ): {_attention_diff(q, k, v, None, out, w)} [{group('parity')}]")


_MASKS = {   # name -> (lead dims of q, k, v; the mask)
    "padding [B, 1, Lk] on 3-D inputs": ((3,), lambda: _random_mask(3, 1, 5)),
    "causal [Lq, Lk] on 4-D inputs": ((3, 2), lambda: torch.ones(3, 5, dtype=torch.bool).tril()),
    "per-head [H, Lq, Lk] (broadcasts over the batch)": ((3, 2), lambda: _random_mask(2, 3, 5)),
    "padding [B, 1, 1, Lk] on 4-D inputs": ((3, 2), lambda: _random_mask(3, 1, 1, 5)),
    "random [B, H, Lq, Lk]": ((3, 2), lambda: _random_mask(3, 2, 3, 5)),
}


@pytest.mark.parametrize("name", list(_MASKS))
def test_masks_match_pytorch(name):
    lead, make = _MASKS[name]
    q, k, v = _qkv(*lead)
    mask = make()
    scores = (*lead, q.size(-2), k.size(-2))
    extra = tuple(mask.unsqueeze(1).shape) if mask.dim() == 3 else None      # the mask with an extra dimension
    try:
        out, w = scaled_dot_product_attention(q, k, v, mask)
    except pytest.fail.Exception as failure:
        if extra and _broadcast_clash(failure.__cause__, scores, extra):
            pytest.fail(f"{failure.msg.rstrip('.')}. That is the clash of a mask {list(extra)} (yours with an extra dimension) "
                        f"with the scores {list(scores)}. {cause('mask_unsqueezed')} [{group('masking')}]")
        raise
    want_out, want_w = _expected(q, k, v, mask)
    if w.shape != want_w.shape or out.shape != want_out.shape:
        grown = extra is not None and w.shape == torch.broadcast_shapes(scores, extra)
        pytest.fail(f"with the mask {name} and {_shapes(q=q, k=k, v=v)} the shapes are weights {list(w.shape)} and "
                    f"output {list(out.shape)}, expected {list(want_w.shape)} and {list(want_out.shape)}"
                    + (f": the shape a mask {list(extra)} (yours with an extra dimension) gives. "
                       f"{cause('mask_unsqueezed')}" if grown else "")
                    + f" [{group('masking')}]")
    leaked = (w[~mask.expand_as(w)] != 0).sum().item()
    assert not leaked, (f"with the mask {name}, {leaked} weight(s) where the mask is False are not exactly 0 "
                        f"[{group('masking')}]")
    assert _close(w, want_w) and _close(out, want_out), (
        f"with the mask {name} and {_shapes(q=q, k=k, v=v)} the result differs from "
        f"F.scaled_dot_product_attention(q, k, v, attn_mask=mask): {_attention_diff(q, k, v, mask, out, w)} "
        f"[{group('masking')}]")


def test_fully_masked_rows_give_zeros():
    q, k, v = _qkv(3, 2, lq=4, lk=4)
    keep = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)   # sequence 2 is all padding
    mask = keep[:, None, None, :] & torch.ones(4, 4, dtype=torch.bool).tril()            # [B, 1, L, L]
    out, w = scaled_dot_product_attention(q, k, v, mask)
    blocked = ~mask.any(-1)                                                              # [3, 1, 4]: no allowed key
    nan_rows = torch.isnan(w).any(-1) | torch.isnan(out).any(-1)                         # [3, 2, 4]
    assert not nan_rows.any(), (
        f"with a combined causal and padding mask [3, 1, 4, 4], {nan_rows.sum().item()} query row(s) give NaN"
        + (" (all of them rows with no allowed key)" if not (nan_rows & ~blocked).any() else "")
        + f": a query row with no allowed key must give zero weights and a zero output, not NaN [{group('masking')}]")
    want_out, want_w = _expected(q, k, v, mask)
    if not (torch.equal(w[2], torch.zeros_like(w[2])) and torch.equal(out[2], torch.zeros_like(out[2]))):
        uniform = torch.allclose(w[2], torch.full_like(w[2], 1 / 4))                  # what a finite fill gives there
        pytest.fail("the rows of the all-padding sequence 2 must give all-zero weights and outputs; yours give weights "
                    f"between {w[2].min().item():.4g} and {w[2].max().item():.4g}"
                    + (f" (1/4 each: every key equally). {cause('fill_large_negative')}" if uniform else "")
                    + f" [{group('masking')}]")
    assert _close(w, want_w) and _close(out, want_out), (
        f"with a combined causal and padding mask [3, 1, 4, 4] the result differs from PyTorch's: "
        f"{_attention_diff(q, k, v, mask, out, w)} [{group('masking')}]")


def test_blocked_keys_with_the_largest_scores():
    """Blocking comes before the softmax: a blocked key whose score is far above the allowed ones changes nothing."""
    q, k, v = _qkv(2, lq=4, lk=5)
    mask = torch.tensor([[True, True, True, False, False], [True, True, True, True, False]])[:, None, :]   # [2, 1, 5]
    q[:, :, 0] = torch.tensor([40.0, 0.0, 40.0, 0.0])              # queries 0 and 2: ...
    k[:, :, 0] = torch.where(mask[:, 0], 0.0, 50.0)                 # ... blocked keys score 1000 above the others
    out, w = scaled_dot_product_attention(q, k, v, mask)
    want_out, want_w = _expected(q, k, v, mask)
    if not (_close(w, want_w) and _close(out, want_out)):
        # a softmax over every key, then the mask, then renormalised: exp(-1000) underflows to 0, so those rows are 0
        after = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1) * mask
        total = after.sum(-1, keepdim=True)
        after = after / torch.where(total > 0, total, torch.ones_like(total))
        pytest.fail("with a padding mask [2, 1, 5] whose blocked keys score about 1000 above the allowed ones for "
                    "queries 0 and 2, the result differs from PyTorch's: "
                    + (f"the weights of {int(((w == 0).all(-1)).sum())} of those rows are all 0. "
                       f"{cause('mask_after_softmax_renormalised')}" if _close(w, after) else
                       _attention_diff(q, k, v, mask, out, w)) + f" [{group('masking')}]")


def test_stable_for_large_scores():
    q, k, v = _qkv(2, scale=100.0)                                      # scores around 1e4
    out, w = scaled_dot_product_attention(q, k, v)
    if not (torch.isfinite(out).all() and torch.isfinite(w).all()):
        overflows = not torch.isfinite(softmax(1e4 + torch.randn(2, 6, dtype=torch.float64))).all()
        pytest.fail(f"attention with scores around 1e4 ({_shapes(q=q, k=k, v=v)}) gives inf or NaN in "
                    f"{(~torch.isfinite(w)).sum().item()} of {w.numel()} weights"
                    + (f"; your softmax gives inf or NaN for logits around 1e4 too. {cause('softmax_overflow')}"
                       if overflows else "") + f" [{group('stability')}]")
    want_out, want_w = _expected(q, k, v)
    assert torch.allclose(out, want_out, atol=1e-6) and torch.allclose(w, want_w, atol=1e-6), (
        f"attention with scores around 1e4 differs from PyTorch's: {_attention_diff(q, k, v, None, out, w, 0, 1e-6)} "
        f"[{group('stability')}]")


def test_float32_inputs_stay_float32():
    q, k, v = _qkv(3, 2, dtype=torch.float32)
    mask = _random_mask(3, 1, 1, 5)
    try:
        out, w = scaled_dot_product_attention(q, k, v, mask)
    except pytest.fail.Exception as failure:
        if re.search(r"expected (scalar type|m1 and m2 to have the same dtype)|found dtype \w+ but expected",
                     str(failure.__cause__)):
            pytest.fail(f"{failure.msg.rstrip('.')}. With float32 inputs two tensors of different dtypes met: something "
                        f"inside is created or converted as float64 (.double(), a float64 tensor); keep the inputs' "
                        f"dtype [{group('parity')}]")
        raise
    assert out.dtype == torch.float32 and w.dtype == torch.float32, (
        f"float32 inputs should give float32 output and weights, got {out.dtype} and {w.dtype} "
        f"[{group('dtype_inplace')}]")
    want_out, want_w = _expected(q, k, v, mask)
    assert torch.allclose(out, want_out, atol=1e-5) and torch.allclose(w, want_w, atol=1e-5), (
        f"with float32 inputs ({_shapes(q=q, k=k, v=v)}, a padding mask [3, 1, 1, 5]) the result differs from "
        f"F.scaled_dot_product_attention: {_attention_diff(q, k, v, mask, out, w, 0, 1e-5)} [{group('parity')}]")
    out, w = scaled_dot_product_attention(q, k, v, mask, dropout_p=0.3)
    assert out.dtype == torch.float32 and w.dtype == torch.float32, (
        f"with dropout_p=0.3, float32 inputs give {out.dtype} output and {w.dtype} weights (without dropout they stay "
        f"float32): something made on the dropout path has another dtype; torch.rand_like(weights) or F.dropout "
        f"keep the weights' dtype [{group('dtype_inplace')}]")


def test_inputs_are_not_modified():
    q, k, v = _qkv(3, 2)
    mask = _random_mask(3, 1, 1, 5)
    before = [t.clone() for t in (q, k, v, mask)]
    guarded(attention.scaled_dot_product_attention)(q, k, v, mask, dropout_p=0.2)   # the inputs themselves
    for name, t, b in zip(("q", "k", "v", "mask"), (q, k, v, mask), before):
        assert torch.equal(t, b), (
            f"attention changed its input `{name}` in place (q /= ..., mask.logical_not_(), masked_fill_): use "
            f"out-of-place operations [{group('dtype_inplace')}]")


def test_padding_mask_leaves_tokens_unchanged():
    tokens = torch.tensor([[5, 7, 0, 0], [3, 0, 9, 2]])
    before = tokens.clone()
    padding_mask(tokens, 0)
    assert tokens.shape == before.shape and torch.equal(tokens, before), (
        f"padding_mask changed its input `tokens` in place (now {list(tokens.shape)}, was {list(before.shape)}): use "
        f"(tokens != pad_id).unsqueeze(1), not tokens.unsqueeze_(1) [{group('dtype_inplace')}]")


def test_gradients_match_pytorch():
    q, k, v = _qkv(2, 2)
    mask = _random_mask(2, 1, 3, 5)
    g = torch.randn(2, 2, 3, 6, dtype=torch.float64)
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    out, w = scaled_dot_product_attention(*mine, mask)
    assert out.requires_grad, (
        "the output does not require grad: the graph is cut (torch.no_grad(), .detach(), .numpy()) "
        f"[{group('gradients')}]")
    (out * g).sum().backward()           # (out.backward(g) imports sympy: slow; this is the same gradient)
    want = F.scaled_dot_product_attention(*theirs, attn_mask=mask)
    (want * g).sum().backward()
    same_values = _close(out.detach(), want.detach())
    for name, a, b in zip("qkv", mine, theirs):
        if a.grad is None:
            pytest.fail(f"no gradient reached {name}: the output does not depend on {name} through autograd "
                        f"[{group('gradients')}]")
        assert _close(a.grad, b.grad), (
            f"the gradient with respect to {name} differs from F.scaled_dot_product_attention's ({_diff(a.grad, b.grad)})"
            + (": the output is the same as PyTorch's, so autograd does not see all of how it depends on "
               f"{name}: something on the way is cut from the graph (.detach(), .data, torch.no_grad(), .numpy())"
               if same_values else
               f", because the output itself differs ({_shapes(q=q, k=k, v=v)}, mask [2, 1, 3, 5]): "
               f"{_attention_diff(q, k, v, mask, out.detach(), w.detach()).rstrip('.')}. Fix the values first (the parity and "
               "masking tests)") + f" [{group('gradients')}]")


def test_gradients_finite_for_a_fully_masked_row():
    q, k, v = _qkv(2)
    mask = _random_mask(2, 3, 5)
    mask[1, 2] = False                                   # query 2 of item 1 may attend to nothing
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    out, _ = scaled_dot_product_attention(*mine, mask)
    out.sum().backward()
    for name, a in zip("qkv", mine):
        assert a.grad is not None and torch.isfinite(a.grad).all(), (
            f"with one query row fully masked, the gradient with respect to {name} has NaN or inf entries "
            f"(F.scaled_dot_product_attention's is finite): a NaN made in the forward pass and replaced afterwards "
            f"still flows back [{group('gradients')}]")


_LOOP_CASES = {   # mask kind -> mask for (lead dims, Lq, Lk)
    "no mask": lambda lead, lq, lk: None,
    "padding [B, 1, 1, Lk]": lambda lead, lq, lk: _random_mask(lead[0], *[1] * (len(lead) - 1), 1, lk),
    "causal [Lq, Lk]": lambda lead, lq, lk: torch.ones(lq, lk, dtype=torch.bool).tril(),
    "per-head [H, Lq, Lk]": lambda lead, lq, lk: _random_mask(*lead[1:], lq, lk),
    "full [B, H, Lq, Lk]": lambda lead, lq, lk: _random_mask(*lead, lq, lk),
}


@pytest.mark.parametrize("kind", list(_LOOP_CASES))
def test_attention_has_no_loop_and_no_forbidden_functions(kind):
    make = _LOOP_CASES[kind]
    counts = {}
    sizes = {"base (B=2, H=2, Lq=3, Lk=4)": ((2, 2), 3, 4), "batch 5": ((5, 2), 3, 4), "heads 5": ((2, 5), 3, 4),
             "Lq 6": ((2, 2), 6, 4), "Lk 7": ((2, 2), 3, 7)}
    if kind.startswith("padding"):                                       # the 3-D case: [B, Lq, d], mask [B, 1, Lk]
        sizes.update({"3-D base (B=2)": ((2,), 3, 4), "3-D batch 5": ((5,), 3, 4)})
    for label, (lead, lq, lk) in sizes.items():
        q, k, v = _qkv(*lead, lq=lq, lk=lk)
        mask = make(lead, lq, lk)
        try:
            with TorchCalls() as calls:
                scaled_dot_product_attention(q, k, v, mask)
        except pytest.fail.Exception as failure:
            pytest.fail(f"with {kind} at size {label}: {failure.msg.rstrip('.')}. No verdict on loops here: the value tests report "
                        f"this failure")
        counts[label] = calls.count
        used = sorted({n for n in calls.names for where, patterns, _ in FORBIDDEN if where == "all"
                       for p in patterns if not p.startswith("aten::") and fnmatch.fnmatchcase(n, p)})
        assert not used, f"attention calls {', '.join(used)}: write it from matmul and your softmax [{group('from_scratch')}]"
    base = {label: n for label, n in counts.items() if not label.startswith("3-D")}
    three = {label: n for label, n in counts.items() if label.startswith("3-D")}
    for part in (base, three):
        assert len(set(part.values())) <= 1, (
            f"with {kind}, attention makes a different number of torch calls as a size grows: {part}. A count that "
            f"grows with a size means a Python loop (perhaps only for this kind of mask); use batched operations "
            f"(q @ k.transpose(-2, -1), masked_fill, weights @ v) [{group('vectorization')}]")


# ------------------------------------------------------------------------------------- dropout

@pytest.mark.parametrize("p", [0.5, 0.2])
def test_dropout_drops_and_rescales(p):
    """dropout_p: each weight is dropped (set to 0) with that probability, the kept ones are divided by
    (1 - dropout_p), and the output is computed from these weights."""
    q, k, v = _qkv(4, 4, lq=8, lk=8)                                     # 1024 weights
    _, plain = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(1)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=p)
    dropped = (w == 0).double().mean().item()
    assert abs(dropped - p) < 0.07, (
        f"with dropout_p={p} about {p:.0%} of the weights should be 0, got {dropped:.0%}"
        + (": dropout_p is the probability of dropping a weight, not of keeping it" if abs(dropped - (1 - p)) < 0.07 else "")
        + f" [{group('dropout')}]")
    kept = w != 0
    if not torch.allclose(w[kept], plain[kept] / (1 - p)):
        renormalised = plain * kept / (plain * kept).sum(-1, keepdim=True).clamp_min(1e-300)   # softmax over kept keys
        known = {cause("dropout_no_rescale"): plain[kept], cause("dropout_rescale_by_p"): plain[kept] / p,
                 cause("dropout_renormalised"): renormalised[kept]}
        hint = next((text for text, theirs in known.items() if torch.allclose(w[kept], theirs)),
                    f"The kept weights differ from the weights without dropout divided by (1 - {p}): "
                    f"{_diff(w[kept], plain[kept] / (1 - p))}.")
        pytest.fail(f"with dropout_p={p} the kept weights should be the weights without dropout divided by "
                    f"(1 - dropout_p). {hint} [{group('dropout')}]")
    assert torch.allclose(out, w @ v), (
        f"the output must be computed from the weights after dropout: weights @ v [{group('dropout')}]")


def test_dropout_draws_each_weight():
    """Each weight is dropped on its own draw: batch items and heads do not share one drop pattern."""
    q, k, v = _qkv(4, 4, lq=8, lk=8)
    _, plain = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(2)
    _, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    dropped = w == 0
    same = [name for d, name in ((0, "all 4 batch items"), (1, "all 4 heads")) if (dropped == dropped[:1] if d == 0
                                                                                  else dropped == dropped[:, :1]).all()]
    if same:
        shared = len(same) == 2 and torch.allclose(w, plain * ~dropped[:1, :1] / 0.5)
        pytest.fail(f"with dropout_p=0.5 on weights [4, 4, 8, 8], {' and '.join(same)} drop exactly the same positions "
                    f"(with a draw for each weight, the chance is below 1e-200). "
                    + (cause("dropout_mask_shared") if shared else "Drop each weight independently: a mask of the "
                       "weights' full shape (torch.rand_like(weights) >= dropout_p), or F.dropout(weights, p=dropout_p)")
                    + f" [{group('dropout')}]")


def test_no_dropout_when_p_is_zero():
    q, k, v = _qkv(2)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.0)[1]
    b = scaled_dot_product_attention(q, k, v)[1]
    assert torch.equal(a, b), f"dropout_p=0.0 must leave the weights untouched (same as no dropout) [{group('dropout')}]"
