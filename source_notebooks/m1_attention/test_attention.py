"""Public tests for milestone 1. Run `pytest -q` in this folder (about 1.5 s cold on 2 cores
measured with the reference files; several times that while other jobs share the machine).

A quick subset of the grader's checks: softmax against torch.softmax (any dim, -inf slices, large logits,
rows far apart), the two mask helpers (any pad_id, the device argument), attention against
torch.nn.functional.scaled_dot_product_attention (shapes, masks of every shape, fully masked rows, float32,
gradients), dropout (rate and rescaling), inputs left unchanged, loops (torch calls counted at two sizes,
with every kind of mask) and the forbidden functions. A failing test names the hidden check group that
would lose points (testkit.py). The hidden checks go further.
"""
import fnmatch
import math

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from attention import causal_mask, padding_mask, scaled_dot_product_attention, softmax
from testkit import FORBIDDEN, TorchCalls, cause, group

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores


def _close(a, b):
    """float64 agreement, to the grader's tolerance: only rounding may differ (a float32 step on the way shows)."""
    return torch.allclose(a, b, rtol=1e-9, atol=1e-10)


def _precision(a, b):
    """A hint when two float64 results agree only to float32 precision."""
    if a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6):
        return (" (they agree only to about 1e-7, float32 precision: is something computed in float32 on the way, "
                "e.g. .float() or a float32 tensor created inside?)")
    return ""


def _qkv(*lead, lq=3, lk=5, d_k=4, d_v=6, dtype=torch.float64, scale=1.0):
    return (scale * torch.randn(*lead, lq, d_k, dtype=dtype), scale * torch.randn(*lead, lk, d_k, dtype=dtype),
            torch.randn(*lead, lk, d_v, dtype=dtype))


def _random_mask(*shape):
    """A random bool mask where every query row may attend to key 0 (no row fully masked)."""
    mask = torch.rand(*shape) < 0.6
    mask[..., 0] = True
    return mask


def _expected(q, k, v, mask=None):
    """PyTorch's attention: (output, weights). The weights are F.scaled_dot_product_attention applied to the
    identity matrix as values (weights @ I); a fully masked query row gets zeros in both."""
    eye = torch.eye(k.size(-2), dtype=q.dtype)
    return (F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, eye.expand(*k.shape[:-1], k.size(-2)), attn_mask=mask))


# ------------------------------------------------------------------------------------- softmax

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_torch(dim):
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    got = softmax(x, dim=dim)
    assert got.shape == x.shape, f"softmax should keep the shape {tuple(x.shape)}, got {tuple(got.shape)}"
    assert _close(got, torch.softmax(x, dim)), (
        f"softmax(x, dim={dim}) on x [3, 4, 5] differs from torch.softmax(x, {dim}): take the max and the sum "
        f"along `dim` (keepdim=True) [{group('softmax')}]")
    if dim == -1:
        assert _close(softmax(x), torch.softmax(x, -1)), f"softmax(x) should use dim=-1 by default [{group('softmax')}]"


def test_softmax_of_rows_with_minus_inf():
    x = torch.tensor([[0.5, float("-inf"), 1.5, float("-inf")], [float("-inf")] * 4], dtype=torch.float64)
    got = softmax(x, dim=-1)
    assert not torch.isnan(got).any(), (
        f"a row that is entirely -inf must give zeros, not NaN: guard the max you subtract and the sum you divide by "
        f"[{group('softmax')}]")
    want = torch.tensor([[math.exp(-1) / (1 + math.exp(-1)), 0.0, 1 / (1 + math.exp(-1)), 0.0], [0.0] * 4],
                        dtype=torch.float64)
    assert _close(got, want), (
        f"softmax of [[0.5, -inf, 1.5, -inf], [-inf] * 4] should be {want.tolist()}, got {got.tolist()} "
        f"[{group('softmax')}]")


def test_softmax_is_stable_for_large_logits():
    x = 1e4 + torch.randn(2, 6, dtype=torch.float64)                   # every entry near 1e4: exp(1e4) is inf
    got = softmax(x)
    assert torch.isfinite(got).all() and _close(got, torch.softmax(x, -1)), (
        "softmax of logits around 1e4 differs from torch.softmax (inf, NaN or zeros where the largest entry should "
        f"get weight): exp overflows. {cause('softmax_overflow')} [{group('stability')}]")
    x32 = 300 + torch.randn(2, 6)
    got = softmax(x32)
    assert torch.isfinite(got).all() and torch.allclose(got, torch.softmax(x32, -1), atol=1e-6), (
        f"softmax of float32 logits around 300 differs from torch.softmax: exp overflows in float32 above 88. "
        f"{cause('softmax_overflow')} [{group('stability')}]")


def test_softmax_of_rows_far_apart():
    """Each row is shifted by its own max: a row 1000 below another must not vanish."""
    x = torch.randn(3, 5, dtype=torch.float64) + torch.tensor([[0.0], [1000.0], [-1000.0]], dtype=torch.float64)
    got = softmax(x, dim=-1)
    want = torch.softmax(x, -1)
    if not _close(got, want):
        lost = [i for i in range(3) if not _close(got[i], want[i])]
        hint = cause("softmax_global_max") if 1 not in lost else "each slice needs its own max (amax along dim)."
        pytest.fail(f"softmax of rows whose maxima are 0, 1000 and -1000 differs from torch.softmax in row(s) {lost}: "
                    f"{hint} [{group('stability')}]")


def test_softmax_keeps_dtype_and_input():
    x = torch.randn(3, 5)
    before = x.clone()
    got = softmax(x)
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
    got = padding_mask(tokens, pad_id=pad_id)
    assert got.dtype == torch.bool, f"padding_mask should return a bool tensor, got {got.dtype} [{group('mask_helpers')}]"
    assert got.shape == (2, 1, 4), (
        f"padding_mask should return [B, 1, L] = (2, 1, 4), got {tuple(got.shape)} [{group('mask_helpers')}]")
    want = [[[True, True, False, False]], [[False, True, True, False]]]
    assert got.tolist() == want, (
        f"padding_mask(tokens, pad_id={pad_id}) for tokens {tokens.tolist()} should be {want}, got {got.tolist()}: "
        f"True exactly where tokens != pad_id (ids below pad_id are real tokens too) [{group('mask_helpers')}]")


@pytest.mark.parametrize("size", [1, 3])
def test_causal_mask(size):
    got = causal_mask(size)
    assert got.dtype == torch.bool and got.shape == (size, size), (
        f"causal_mask({size}) should be a bool tensor of shape ({size}, {size}), got {got.dtype} of shape "
        f"{tuple(got.shape)} [{group('mask_helpers')}]")
    assert torch.equal(got, torch.ones(size, size, dtype=torch.bool).tril()), (
        f"causal_mask({size}): True must be on and below the diagonal [{group('mask_helpers')}]")


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
    assert w.shape == (*lead, 3, 5), f"weights should be [..., Lq, Lk] = {(*lead, 3, 5)}, got {tuple(w.shape)} [{group('shapes')}]"
    assert out.shape == (*lead, 3, 6), f"output should be [..., Lq, d_v] = {(*lead, 3, 6)}, got {tuple(out.shape)} [{group('shapes')}]"


def test_attention_matches_pytorch():
    q, k, v = _qkv(2, 3)
    out, w = scaled_dot_product_attention(q, k, v)
    want_out, want_w = _expected(q, k, v)
    assert _close(w, want_w), (
        f"weights should be softmax(q @ k^T / sqrt(d_k)) over the keys{_precision(w, want_w)} [{group('parity')}]")
    assert _close(out, want_out), (
        f"output differs from F.scaled_dot_product_attention(q, k, v) (float64; only rounding may differ)"
        f"{_precision(out, want_out)} [{group('parity')}]")


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
    out, w = scaled_dot_product_attention(q, k, v, mask)
    want_out, want_w = _expected(q, k, v, mask)
    assert w.shape == want_w.shape and out.shape == want_out.shape, (
        f"with the mask {name} the shapes are weights {tuple(w.shape)} and output {tuple(out.shape)}, expected "
        f"{tuple(want_w.shape)} and {tuple(want_out.shape)}: a mask only has to broadcast to the scores; leave it as "
        f"it is given. {cause('mask_unsqueezed')} [{group('masking')}]")
    assert torch.all(w[~mask.expand_as(w)] == 0), f"masked keys (mask False) must get weight exactly 0 [{group('masking')}]"
    assert _close(w, want_w) and _close(out, want_out), (
        f"with the mask {name} the result differs from F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"
        f"{_precision(w, want_w) or _precision(out, want_out)} [{group('masking')}]")


def test_fully_masked_rows_give_zeros():
    q, k, v = _qkv(3, 2, lq=4, lk=4)
    keep = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)   # sequence 2 is all padding
    mask = keep[:, None, None, :] & torch.ones(4, 4, dtype=torch.bool).tril()            # [B, 1, L, L]
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(w).any(), (
        f"a query row with no allowed key must give zero weights and a zero output, not NaN [{group('masking')}]")
    want_out, want_w = _expected(q, k, v, mask)
    assert torch.equal(w[2], torch.zeros_like(w[2])) and torch.equal(out[2], torch.zeros_like(out[2])), (
        "the rows of an all-padding sequence must give all-zero weights and outputs (a large negative fill instead of "
        f"-inf averages v there) [{group('masking')}]")
    assert _close(w, want_w) and _close(out, want_out), (
        f"with a combined causal and padding mask [3, 1, 4, 4] the result differs from PyTorch's [{group('masking')}]")


def test_stable_for_large_scores():
    q, k, v = _qkv(2, scale=100.0)                                      # scores around 1e4
    out, w = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(w).all(), (
        f"attention with scores around 1e4 gives inf or NaN: use a softmax that subtracts the max "
        f"[{group('stability')}]")
    want_out, want_w = _expected(q, k, v)
    assert torch.allclose(out, want_out, atol=1e-6) and torch.allclose(w, want_w, atol=1e-6), (
        f"attention with scores around 1e4 differs from PyTorch's [{group('stability')}]")


def test_float32_inputs_stay_float32():
    q, k, v = _qkv(3, 2, dtype=torch.float32)
    mask = _random_mask(3, 1, 1, 5)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == torch.float32 and w.dtype == torch.float32, (
        f"float32 inputs should give float32 output and weights, got {out.dtype} and {w.dtype} "
        f"[{group('dtype_inplace')}]")
    want_out, want_w = _expected(q, k, v, mask)
    assert torch.allclose(out, want_out, atol=1e-5) and torch.allclose(w, want_w, atol=1e-5), (
        f"with float32 inputs the result differs from F.scaled_dot_product_attention [{group('parity')}]")
    out, w = scaled_dot_product_attention(q, k, v, mask, dropout_p=0.3)
    assert out.dtype == torch.float32 and w.dtype == torch.float32, (
        f"with dropout_p=0.3, float32 inputs give {out.dtype} output and {w.dtype} weights: a dropout mask of another "
        f"dtype (torch.rand(..., dtype=torch.float64)) changes it; use torch.rand_like(weights) or F.dropout "
        f"[{group('dtype_inplace')}]")


def test_inputs_are_not_modified():
    q, k, v = _qkv(3, 2)
    mask = _random_mask(3, 1, 1, 5)
    before = [t.clone() for t in (q, k, v, mask)]
    scaled_dot_product_attention(q, k, v, mask, dropout_p=0.2)
    for name, t, b in zip(("q", "k", "v", "mask"), (q, k, v, mask), before):
        assert torch.equal(t, b), (
            f"attention changed its input `{name}` in place (q /= ..., mask.logical_not_(), masked_fill_): use "
            f"out-of-place operations [{group('dtype_inplace')}]")


def test_gradients_match_pytorch():
    q, k, v = _qkv(2, 2)
    mask = _random_mask(2, 1, 3, 5)
    g = torch.randn(2, 2, 3, 6, dtype=torch.float64)
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    out, _ = scaled_dot_product_attention(*mine, mask)
    assert out.requires_grad, (
        "the output does not require grad: the graph is cut (torch.no_grad(), .detach(), .numpy()) "
        f"[{group('gradients')}]")
    (out * g).sum().backward()           # (out.backward(g) imports sympy: slow; this is the same gradient)
    (F.scaled_dot_product_attention(*theirs, attn_mask=mask) * g).sum().backward()
    for name, a, b in zip("qkv", mine, theirs):
        assert a.grad is not None and _close(a.grad, b.grad), (
            f"the gradient with respect to {name} differs from F.scaled_dot_product_attention's"
            f"{' (none reached it)' if a.grad is None else ''}: nothing between {name} and the output may be "
            f"detached (.detach(), .data, torch.no_grad(), .numpy()) [{group('gradients')}]")


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
        with TorchCalls() as calls:
            scaled_dot_product_attention(q, k, v, mask)
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
        hint = cause("dropout_rescale_by_p") if torch.allclose(w[kept], plain[kept] / p) else cause("dropout_no_rescale")
        pytest.fail(f"with dropout_p={p} the kept weights should be divided by (1 - dropout_p). {hint} [{group('dropout')}]")
    assert torch.allclose(out, w @ v), (
        f"the output must be computed from the weights after dropout: weights @ v [{group('dropout')}]")


def test_no_dropout_when_p_is_zero():
    q, k, v = _qkv(2)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.0)[1]
    b = scaled_dot_product_attention(q, k, v)[1]
    assert torch.equal(a, b), f"dropout_p=0.0 must leave the weights untouched (same as no dropout) [{group('dropout')}]"
