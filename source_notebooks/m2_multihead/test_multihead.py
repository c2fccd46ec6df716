"""Public tests for milestone 2. Run `pytest -q` in this folder (about 1.3 s cold on 2 cores
measured with the reference files; several times that while other jobs share the machine).

A quick subset of the grader's checks: shapes, head layout, the ValueError (and its message), parity with
torch.nn.MultiheadAttention given the same weights (padding, causal and combined masks, cross-attention,
bias=False), the per-head weights kept in attn_weights (detached), dropout (training mode only, at its
rate, on the weights only: the output is computed with the stored weights), gradients, inputs left unchanged,
loops (torch calls counted as a size grows, with every kind of mask; split_heads and merge_heads as the heads
grow) and the forbidden functions. A failing test names the hidden check group that checks the same thing
(testkit.py). One mistake is charged once, where it is; the hidden checks go further.

(PYTEST_DONT_REWRITE: that marker keeps pytest from expanding each failed expression, so a failure prints
its own message only.)
"""
import fnmatch
import math
import re

import pytest
import torch
from torch import nn

import multihead
from testkit import FORBIDDEN, TorchCalls, cause, describe, expecting, group, guarded

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores


split_heads, merge_heads = guarded(multihead.split_heads), guarded(multihead.merge_heads)
MultiHeadAttention = multihead.MultiHeadAttention
MultiHeadAttention.__init__ = guarded(MultiHeadAttention.__init__)
# forward gets copies of its tensors: a change in place fails only test_inputs_are_not_modified, which calls the
# forward as it is (_forward_as_is), not every value test after it.
_forward_as_is = guarded(MultiHeadAttention.forward)
MultiHeadAttention.forward = guarded(MultiHeadAttention.forward, copies=True)


def _diff(got, want):
    """Where and how far two tensors of one shape differ, in words."""
    bad = ~torch.isclose(got, want, rtol=1e-9, atol=1e-10)
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
    return any(i == int(found[3]) and s == {int(found[1]), int(found[2])} for i, s in clashes)


def _split_problem():
    """(which, what): what is wrong with split_heads or merge_heads (which: "split", "merge" or "" if nothing) on
    x = arange [B=2, L=3, d_model=4] and H=2; a known mistake is named only when its own result (a PyTorch
    reshape of x) is exactly yours."""
    x = torch.arange(2 * 3 * 4, dtype=torch.float64).reshape(2, 3, 4)
    got = split_heads(x, 2)
    if got.shape != (2, 2, 3, 2):
        return "split", f"split_heads(x [2, 3, 4], 2) has shape {list(got.shape)}, expected [B, H, L, d_k] = [2, 2, 3, 2]"
    for b, h, pos in ((b, h, pos) for b in range(2) for h in range(2) for pos in range(3)):
        if not torch.equal(got[b, h, pos], x[b, pos, 2 * h:2 * h + 2]):
            if torch.equal(got, x.reshape(2, 2, 3, 2)):
                known = f" Yours is x viewed straight as [B, H, L, d_k]. {cause('split_plain_view')}"
            elif torch.equal(got, x.reshape(2, 3, 2, 2).permute(0, 3, 1, 2)):
                known = f" Yours takes every H-th feature. {cause('split_interleaved')}"
            else:
                known = ""
            return "split", (f"for x = torch.arange(24.).reshape(2, 3, 4), split_heads(x, 2)[{b}, {h}, {pos}] is "
                    f"{got[b, h, pos].tolist()}; head {h} of position {pos} must hold features {2 * h}:{2 * h + 2} "
                    f"of position {pos}, {x[b, pos, 2 * h:2 * h + 2].tolist()}.{known}")
    back = merge_heads(got)
    if back.shape != x.shape or not torch.equal(back, x):
        flat = back.shape == x.shape and torch.equal(back, got.reshape(2, 3, 4))
        return "merge", (f"merge_heads(split_heads(x, 2)) for x = torch.arange(24.).reshape(2, 3, 4) gives "
                f"{back.tolist() if back.numel() < 30 else list(back.shape)}, not x"
                + (f". Yours flattens [B, H, L, d_k] as it is. {cause('merge_no_transpose')}" if flat else ""))
    return "", ""


def _stored(mha, call):
    """self.attn_weights after `call`, which must be a tensor."""
    w = mha.attn_weights
    assert isinstance(w, torch.Tensor), (
        f"after {call}, self.attn_weights is {type(w).__name__}, not the tensor of attention weights: forward must "
        f"store them [{group('head_weights')}]")
    return w


def _unless_heads():
    """A sentence for a value test that failed: your split_heads or merge_heads is wrong itself, if it is."""
    which, problem = _split_problem()
    return f" Your {which}_heads is wrong itself, so fix it first: {problem}" if which else ""


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-9, atol=1e-10)      # float64: only rounding may differ (the grader's tolerance)


def _pytorch_copy(mine, d, h, bias=True):
    ref = nn.MultiheadAttention(d, h, bias=bias, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mine.w_q.weight, mine.w_k.weight, mine.w_v.weight]))
        ref.out_proj.weight.copy_(mine.w_o.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([mine.w_q.bias, mine.w_k.bias, mine.w_v.bias]))
            ref.out_proj.bias.copy_(mine.w_o.bias)
    return ref


def _their_mask(mask, batch, heads, lq):
    """Our mask (True = may attend; [Lq, Lk] or [B, Lq or 1, Lk]) as nn.MultiheadAttention's attn_mask
    (True = blocked; [Lq, Lk] or [B * H, Lq, Lk]). (key_padding_mask would do too, but it imports sympy: slow.)"""
    if mask.dim() == 2:
        return ~mask
    return (~mask).expand(batch, lq, mask.size(-1)).repeat_interleave(heads, dim=0)


def _padding(batch, length):
    keep = torch.tensor([[1] * length, [1] * (length - 2) + [0] * 2, [1] * 2 + [0] * (length - 2)], dtype=torch.bool)
    return keep[:batch]


# ------------------------------------------------------------------------------- split / merge

def test_split_heads_layout():
    which, problem = _split_problem()
    assert which != "split", f"{problem} [{group('split_merge')}]"


def test_merge_heads_inverts_split():
    x = torch.randn(2, 5, 12)
    back = merge_heads(split_heads(x, 3))
    assert back.shape == x.shape, (
        f"merge_heads should give [B, L, d_model] = {tuple(x.shape)}, got {tuple(back.shape)} [{group('split_merge')}]")
    assert torch.equal(back, x), (
        f"merge_heads(split_heads(x, 3)) for x [2, 5, 12] should give x back: {_diff(back, x)}.{_unless_heads()} "
        f"[{group('split_merge')}]")


# -------------------------------------------------------------------------------- construction

def test_rejects_indivisible_width_naming_both_numbers():
    with expecting(ValueError, f"[{group('init_errors')}]"), pytest.raises(ValueError) as info:
        MultiHeadAttention(10, 3)
    msg = str(info.value)
    assert "10" in msg and "3" in msg, (
        f"the ValueError for d_model=10, num_heads=3 should give both numbers, got {msg!r} [{group('init_errors')}]")


@pytest.mark.parametrize("d, h", [(12, 3), (8, 8), (6, 1)])
def test_accepts_divisible_widths(d, h):
    mha = MultiHeadAttention(d, h)
    names = {name for name, _ in mha.named_parameters()}
    want = {f"w_{p}.{w}" for p in "qkvo" for w in ("weight", "bias")}
    assert names == want, f"MultiHeadAttention({d}, {h}) should have parameters {sorted(want)}, got {sorted(names)} [{group('init_errors')}]"


def test_bias_false_has_no_bias():
    mha = MultiHeadAttention(8, 2, bias=False).double().eval()
    with_bias = [n for n in ("w_q", "w_k", "w_v", "w_o") if getattr(mha, n).bias is not None]
    # The hidden checks see this in init_errors and in parity's values; it is charged once, in parity (worth more).
    assert not with_bias, f"with bias=False, {', '.join(with_bias)} still has a bias. {cause('bias_ignored')} [{group('parity')}]"
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    want, _ = _pytorch_copy(mha, 8, 2, bias=False)(x, x, x)
    got = mha(x, x, x)
    assert _close(got, want), (f"with bias=False the output for x [3, 5, 8] differs from nn.MultiheadAttention(bias=False) "
                               f"given the same weights: {_diff(got, want)}.{_unless_heads()} [{group('parity')}]")


# ------------------------------------------------------------------------------------- values

@pytest.mark.parametrize("lq, lk", [(5, 5), (4, 6)])
def test_shapes(lq, lk):
    mha = MultiHeadAttention(8, 2)
    q, kv = torch.randn(3, lq, 8), torch.randn(3, lk, 8)
    out = mha(q, kv, kv)
    assert out.shape == (3, lq, 8), f"expected [B, Lq, d_model] = (3, {lq}, 8), got {tuple(out.shape)} [{group('shapes')}]"
    w = _stored(mha, f"forward(query [3, {lq}, 8], key and value [3, {lk}, 8])")
    assert w.shape == (3, 2, lq, lk), (
        f"self.attn_weights should be [B, H, Lq, Lk] = (3, 2, {lq}, {lk}), got {tuple(w.shape)} "
        f"[{group('head_weights')}]")


@pytest.mark.parametrize("batch", [3, 2])          # batch 2 == heads 2: a missing head dim is silent there
def test_matches_pytorch_with_padding_mask(batch):
    d, h = 8, 2
    mine = MultiHeadAttention(d, h).double().eval()
    ref = _pytorch_copy(mine, d, h)
    x = torch.randn(batch, 5, d, dtype=torch.float64)
    mask = _padding(batch, 5)[:, None, :]                              # [B, 1, L]; our masks: True = may attend
    try:
        got = mine(x, x, x, mask)
    except pytest.fail.Exception as failure:
        if _broadcast_clash(failure.__cause__, (batch, h, 5, 5), mask.shape):
            pytest.fail(f"{failure.msg.rstrip('.')}. That is the clash of the mask as given, {list(mask.shape)}, with the scores "
                        f"[B, H, L, L] = {[batch, h, 5, 5]}. {cause('mask_no_head_dim')} [{group('parity')}]")
        raise
    want, _ = ref(x, x, x, attn_mask=_their_mask(mask, batch, h, 5))
    if batch == h:   # the same mask without a head dimension: item b's padding lands on head b of every item
        no_head = (~mask[:, 0])[None, :, None, :].expand(batch, h, 5, 5).reshape(batch * h, 5, 5)
        wrong, _ = ref(x, x, x, attn_mask=no_head)
        assert not torch.allclose(got, wrong), (
            "your output is what a mask without a head dimension gives: with B == H it lines the batch up with "
            "the heads instead of failing. Give a [B, 1, L] or [B, L, L] mask a head dimension: mask.unsqueeze(-3) "
            f"(which also leaves a 2-D [Lq, Lk] mask such as a causal one right; unsqueeze(1) would not) [{group('parity')}]")
    assert _close(got, want), (
        f"with x [{batch}, 5, 8] and a padding mask [{batch}, 1, 5] the output differs from nn.MultiheadAttention given "
        f"the same weights and mask: {_diff(got, want)}.{_unless_heads()} [{group('parity')}]")


@pytest.mark.parametrize("shape", ["[L, L]", "[B, L, L]"])
def test_matches_pytorch_with_a_causal_mask(shape):
    """A 2-D causal mask [L, L] broadcasts over batch and heads as it is; a [B, L, L] one needs a head dimension."""
    d, h, L = 8, 2, 5
    mine = MultiHeadAttention(d, h).double().eval()
    ref = _pytorch_copy(mine, d, h)
    x = torch.randn(3, L, d, dtype=torch.float64)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    mask = causal if shape == "[L, L]" else causal & _padding(3, L)[:, None, :]     # [B, L, L]: causal and padding
    try:
        got = mine(x, x, x, mask)
    except pytest.fail.Exception as failure:
        scores = (3, h, L, L)
        if mask.dim() == 2 and _broadcast_clash(failure.__cause__, scores, mask.unsqueeze(1).shape):
            pytest.fail(f"{failure.msg.rstrip('.')}. That is the clash of the mask with unsqueeze(1), {list(mask.unsqueeze(1).shape)}, "
                        f"with the scores [B, H, L, L] = {list(scores)}. {cause('mask_unsqueeze_always')} "
                        f"[{group('parity')}]")
        if mask.dim() == 3 and _broadcast_clash(failure.__cause__, scores, mask.shape):
            pytest.fail(f"{failure.msg.rstrip('.')}. That is the clash of the mask as given, {list(mask.shape)}, with the scores "
                        f"[B, H, L, L] = {list(scores)}. {cause('mask_no_head_dim')} [{group('parity')}]")
        raise
    want, _ = ref(x, x, x, attn_mask=_their_mask(mask, 3, h, L))
    if not _close(got, want):
        unmasked = _close(got, ref(x, x, x)[0])
        pytest.fail(f"with x [3, {L}, 8] and a causal mask of shape {shape} the output differs from "
                    f"nn.MultiheadAttention given the same weights and mask: {_diff(got, want)}."
                    + (" Yours is exactly nn.MultiheadAttention's output without any mask: the mask does not reach "
                       "the attention." if unmasked else _unless_heads()) + f" [{group('parity')}]")


def test_cross_attention_weights_and_gradients_match_pytorch():
    """query, key and value all different (Lq != Lk), a padding mask on the keys; the per-head weights kept in
    attn_weights; then the gradients of the inputs and of all four projections."""
    d, h, B, Lq, Lk = 8, 2, 3, 4, 6
    mine = MultiHeadAttention(d, h).double().eval()
    ref = _pytorch_copy(mine, d, h)
    q, k, v = (torch.randn(B, n, d, dtype=torch.float64) for n in (Lq, Lk, Lk))
    mask = _padding(B, Lk)[:, None, :]
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    try:
        got = mine(*ins, mask)
    except pytest.fail.Exception as failure:
        if _broadcast_clash(failure.__cause__, (B, h, Lq, Lk), mask.shape):
            pytest.fail(f"{failure.msg.rstrip('.')}. That is the clash of the mask as given, {list(mask.shape)}, with the scores "
                        f"[B, H, Lq, Lk] = {[B, h, Lq, Lk]}. {cause('mask_no_head_dim')} [{group('parity')}]")
        raise
    want, want_w = ref(*theirs, attn_mask=_their_mask(mask, B, h, Lq), average_attn_weights=False)
    if not _close(got, want):
        theirs_mask = _their_mask(mask, B, h, Lq)
        with torch.no_grad():
            if _close(got.detach(), ref(q, k, k, attn_mask=theirs_mask)[0]):
                hint = f" Yours is nn.MultiheadAttention's output with `key` as the value. {cause('value_from_key')}"
            elif _close(got.detach(), ref(q, v, k, attn_mask=theirs_mask)[0]):
                hint = f" Yours is nn.MultiheadAttention's output with key and value swapped. {cause('keys_values_swapped')}"
            elif _close(got.detach(), ref(q, v, v, attn_mask=theirs_mask)[0]):
                hint = (" Yours is nn.MultiheadAttention's output with `value` as the key: the keys are projected "
                        "from `value`; keys come from `key`: k = w_k(key).")
            else:
                hint = _unless_heads()
        pytest.fail(f"cross-attention (query [3, 4, 8], key and value [3, 6, 8], a padding mask [3, 1, 6]) differs from "
                    f"nn.MultiheadAttention given the same weights: {_diff(got.detach(), want.detach())}.{hint} "
                    f"[{group('parity')}]")
    w = mine.attn_weights
    assert w is not None and w.shape == (B, h, Lq, Lk) and _close(w, want_w.detach()), (
        f"self.attn_weights should be the per-head weights [B, H, Lq, Lk] = {(B, h, Lq, Lk)} that "
        f"nn.MultiheadAttention(..., average_attn_weights=False) returns [{group('head_weights')}]")
    assert not w.requires_grad, (
        f"self.attn_weights still carries the autograd graph: store weights.detach() [{group('head_weights')}]")
    g = torch.randn(B, Lq, d, dtype=torch.float64)
    assert got.requires_grad, f"the output does not require grad: the graph is cut (.detach(), torch.no_grad()) [{group('gradients')}]"
    (got * g).sum().backward()            # (got.backward(g) imports sympy: slow; this is the same gradient)
    (want * g).sum().backward()
    pairs = [(name, a.grad, b.grad) for name, a, b in zip(("query", "key", "value"), ins, theirs)]
    in_w, in_b = ref.in_proj_weight.grad.chunk(3), ref.in_proj_bias.grad.chunk(3)
    for i, name in enumerate(("w_q", "w_k", "w_v")):
        pairs += [(f"{name}.weight", getattr(mine, name).weight.grad, in_w[i]), (f"{name}.bias", getattr(mine, name).bias.grad, in_b[i])]
    pairs += [("w_o.weight", mine.w_o.weight.grad, ref.out_proj.weight.grad), ("w_o.bias", mine.w_o.bias.grad, ref.out_proj.bias.grad)]
    for name, a, b in pairs:
        assert a is not None and _close(a, b), (
            f"the gradient of {name} differs from nn.MultiheadAttention's "
            + ("(none reached it)" if a is None else f"({_diff(a, b)})")
            + ", while the output is the same as nn.MultiheadAttention's: autograd does not see all of how the output "
            f"depends on {name}; something on the way is cut from the graph (.detach(), torch.no_grad(), an output "
            f"computed from the stored, detached attn_weights) [{group('gradients')}]")


# ------------------------------------------------------------------------------------- dropout

def test_dropout_only_in_training():
    d, h = 8, 2
    mha = MultiHeadAttention(d, h, dropout=0.5).double()
    x = torch.randn(2, 6, d, dtype=torch.float64)
    mha.eval()
    a, b = mha(x, x, x), mha(x, x, x)
    assert torch.equal(a, b), (
        f"in eval mode (model.eval()) dropout must be off: two calls should give the same output [{group('dropout')}]")
    mha.train()
    torch.manual_seed(0)
    c = mha(x, x, x)
    assert not torch.allclose(a, c), f"in training mode, dropout=0.5 should change the output [{group('dropout')}]"
    assert (_stored(mha, "forward in training mode") == 0).any(), (
        "in training mode with dropout=0.5, none of the stored self.attn_weights is 0, while the output changes: "
        "dropout belongs on the attention weights (dropout_p of scaled_dot_product_attention), and the docstring asks "
        f"self.attn_weights to hold the weights the output was computed with, after dropout [{group('dropout')}]")


def test_dropout_rate():
    mha = MultiHeadAttention(8, 2, dropout=0.2).double().train()
    x = torch.randn(4, 8, 8, dtype=torch.float64)                       # 4 * 2 * 8 * 8 = 512 weights
    torch.manual_seed(1)
    mha(x, x, x)
    w = _stored(mha, "forward in training mode")
    dropped = (w == 0).double().mean().item()
    if abs(dropped - 0.8) < 0.08 and w.shape == (4, 2, 8, 8):
        # the mistake's own result: dropout_p = 1 - 0.2, so the weights kept are scaled by 1 / 0.2
        mha.eval()
        mha(x, x, x)
        keep_prob = _close(w, torch.where(w != 0, mha.attn_weights / 0.2, 0))
    else:
        keep_prob = False
    assert abs(dropped - 0.2) < 0.08, (
        f"MultiHeadAttention(dropout=0.2) in training mode dropped {dropped:.0%} of the attention weights, not about 20%"
        + (f" (and scales the ones it keeps by 5 = 1 / 0.2). {cause('dropout_keep_probability')}" if keep_prob else "")
        + f" [{group('dropout')}]")


def test_training_output_is_computed_with_the_stored_weights():
    d, h, p = 8, 2, 0.5
    mha = MultiHeadAttention(d, h, dropout=p).double().train()
    x = torch.randn(2, 6, d, dtype=torch.float64)
    torch.manual_seed(2)
    out = mha(x, x, x).detach()
    w = _stored(mha, "forward in training mode")
    assert w.shape == (2, h, 6, 6), (
        f"self.attn_weights has shape {list(w.shape)}, expected [B, H, Lq, Lk] = [2, {h}, 6, 6] [{group('head_weights')}]")
    with torch.no_grad():                      # w_o(merge_heads(weights @ v)), written out with PyTorch's reshapes
        v = mha.w_v(x).reshape(2, 6, h, d // h).transpose(1, 2)
        want = mha.w_o((w @ v).transpose(1, 2).reshape(2, 6, d))
    # a second dropout on the output: some entries 0, the others scaled by 1 / (1 - p)
    twice = _close(out, torch.where(out != 0, want / (1 - p), 0)) and not _close(out, want)
    assert _close(out, want), (
        f"in training mode (dropout={p}), the output is not w_o(merge_heads(self.attn_weights @ v)) computed with the "
        f"weights forward stored (after dropout): {_diff(out, want)}. Dropout acts on the attention weights only"
        + (f". {cause('dropout_on_output_too')}" if twice else "") + f".{_unless_heads()} [{group('dropout')}]")


# ---------------------------------------------------------------------- rules: inputs, loops, APIs

def test_inputs_are_not_modified():
    mha = MultiHeadAttention(8, 2).double().eval()
    q, k, v = torch.randn(3, 4, 8, dtype=torch.float64), torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(3, 5, 8, dtype=torch.float64)
    for mask in (_padding(3, 5)[:, None, :], torch.ones(3, 4, 5, dtype=torch.bool).tril()):
        before = [t.clone() for t in (q, k, v, mask)]
        try:
            _forward_as_is(mha, q, k, v, mask)               # the inputs themselves, to see whether they change
        except pytest.fail.Exception as failure:
            pytest.fail(f"{failure.msg.rstrip('.')}. This test can only look at the inputs once forward runs: the "
                        f"parity tests explain this error [{group('parity')}]")
        for name, t, b in zip(("query", "key", "value", "mask"), (q, k, v, mask), before):
            if t.shape != b.shape:
                grown = next((f" (that is {name}.unsqueeze_({d}))" for d in (1, -3, 0, -1)
                              if t.shape == b.unsqueeze(d).shape), "")
                pytest.fail(f"forward(query [3, 4, 8], key [3, 5, 8], value [3, 5, 8], mask {list(b.shape)}) changed "
                            f"the shape of its input `{name}` from {list(b.shape)} to {list(t.shape)}{grown}: the "
                            f"caller's tensors must be left as they were [{group('shapes')}]")
            assert torch.equal(t, b), (
                f"forward(query [3, 4, 8], key [3, 5, 8], value [3, 5, 8], mask {list(b.shape)}) changed the values "
                f"of its input `{name}` in place ({(t != b).sum().item()} entries): the caller's tensors must be left "
                f"as they were [{group('shapes')}]")


def test_split_and_merge_have_no_loop_over_heads():
    counts = {}
    for h in (2, 4, 8):
        x, y = torch.randn(2, 3, 2 * h), torch.randn(2, h, 3, 2)
        with TorchCalls() as split_calls:
            split_heads(x, h)
        with TorchCalls() as merge_calls:
            merge_heads(y)
        counts[h] = (split_calls.count, merge_calls.count)
    for i, name in enumerate(("split_heads", "merge_heads")):
        calls = {f"H={h}": c[i] for h, c in counts.items()}
        assert len(set(calls.values())) == 1, (
            f"{name} makes a different number of torch calls as num_heads grows: {calls}. A count that grows with "
            f"the heads means a Python loop over them (even one that only slices or indexes): use one reshape and "
            f"one transpose [{group('vectorization')}]")


_MASK_KINDS = {   # kind -> mask for (B, Lq, Lk)
    "no mask": lambda b, lq, lk: None,
    "padding [B, 1, Lk]": lambda b, lq, lk: _padding(3, lk)[[i % 3 for i in range(b)]][:, None, :],
    "causal [Lq, Lk]": lambda b, lq, lk: torch.ones(lq, lk, dtype=torch.bool).tril(),
    "combined [B, Lq, Lk]": lambda b, lq, lk: torch.ones(lq, lk, dtype=torch.bool).tril() & _padding(3, lk)[[i % 3 for i in range(b)]][:, None, :],
}


@pytest.mark.parametrize("kind", list(_MASK_KINDS))
def test_no_loops_and_no_forbidden_functions(kind):
    make = _MASK_KINDS[kind]
    counts = {}
    for label, (d, h, b, lq, lk) in {"base (B=2, H=2, Lq=3, Lk=4)": (8, 2, 2, 3, 4), "batch 5": (8, 2, 5, 3, 4),
                                      "heads 4": (8, 4, 2, 3, 4), "Lq 6": (8, 2, 2, 6, 4), "Lk 7": (8, 2, 2, 3, 7)}.items():
        mha = MultiHeadAttention(d, h).eval()
        kinds = {type(m).__name__ for m in mha.modules()}
        assert "MultiheadAttention" not in kinds, (
            f"MultiHeadAttention holds a torch.nn.MultiheadAttention: build it from the four projections and "
            f"scaled_dot_product_attention [{group('from_scratch')}]")
        q, kv = torch.randn(b, lq, d), torch.randn(b, lk, d)
        try:
            with TorchCalls() as calls:
                mha(q, kv, kv, make(b, lq, lk))
        except pytest.fail.Exception as failure:
            pytest.fail(f"with {kind} at size {label}: {failure.msg.rstrip('.')}. No verdict on loops here: the value tests report "
                        f"this failure")
        counts[label] = calls.count
        used = sorted({n for n in calls.names for _, patterns, _ in FORBIDDEN for p in patterns
                       if not p.startswith("aten::") and fnmatch.fnmatchcase(n, p)})
        assert not used, f"forward calls {', '.join(used)}: use scaled_dot_product_attention of attention.py [{group('from_scratch')}]"
    assert len(set(counts.values())) == 1, (
        f"with {kind}, forward makes a different number of torch calls as a size grows: {counts}. A count that grows "
        f"with a size means a Python loop (over the batch, the heads or the positions; perhaps only for this kind of "
        f"mask): give the mask a head dimension and let one call of attention handle every head [{group('vectorization')}]")
