"""Public tests for milestone 1. Run `pytest -q` in this folder.

They check the basics quickly; the grader's hidden checks go further (more shapes, float32, gradients,
no Python loops, inputs left unmodified, ...).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from attention import causal_mask, padding_mask, scaled_dot_product_attention, softmax

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores


def _qkv(*lead, lq=3, lk=5, d_k=4, d_v=6):
    return (torch.randn(*lead, lq, d_k, dtype=torch.float64), torch.randn(*lead, lk, d_k, dtype=torch.float64),
            torch.randn(*lead, lk, d_v, dtype=torch.float64))


def test_softmax_rows_sum_to_one():
    x = torch.randn(2, 5, dtype=torch.float64)
    got = softmax(x, dim=-1)
    assert got.shape == x.shape, f"softmax should keep the shape {tuple(x.shape)}, got {tuple(got.shape)}"
    assert torch.allclose(got, torch.softmax(x, -1)), "softmax(x) differs from torch.softmax(x, -1)"


def test_softmax_respects_dim():
    x = torch.randn(3, 4, dtype=torch.float64)
    assert torch.allclose(softmax(x, dim=0), torch.softmax(x, 0)), "softmax(x, dim=0) should normalise columns"


def test_softmax_of_all_minus_inf_is_zero():
    got = softmax(torch.full((1, 3), float("-inf")))
    assert not torch.isnan(got).any(), "a row that is entirely -inf must give zeros, not NaN"
    assert torch.equal(got, torch.zeros(1, 3))


def test_softmax_is_stable_for_large_logits():
    got = softmax(torch.tensor([1e4, 1e4 - 1.0], dtype=torch.float64))
    assert torch.isfinite(got).all(), "exp(1e4) overflows: subtract the max before exp"


def test_padding_mask():
    got = padding_mask(torch.tensor([[5, 7, 0], [3, 0, 0]]), pad_id=0)
    assert got.dtype == torch.bool, f"padding_mask should return a bool tensor, got {got.dtype}"
    assert got.shape == (2, 1, 3), f"padding_mask should return [B, 1, L] = (2, 1, 3), got {tuple(got.shape)}"
    assert got.tolist() == [[[True, True, False]], [[True, False, False]]], "True must mark real tokens"


def test_causal_mask():
    got = causal_mask(3)
    assert got.dtype == torch.bool and got.shape == (3, 3), (
        f"causal_mask(3) should be a bool tensor of shape (3, 3), got {got.dtype} of shape {tuple(got.shape)}")
    assert torch.equal(got, torch.ones(3, 3, dtype=torch.bool).tril()), "True must be on and below the diagonal"


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)])
def test_attention_shapes(lead):
    q, k, v = _qkv(*lead)
    out, w = scaled_dot_product_attention(q, k, v)
    assert w.shape == (*lead, 3, 5), f"weights should be [..., Lq, Lk] = {(*lead, 3, 5)}, got {tuple(w.shape)}"
    assert out.shape == (*lead, 3, 6), f"output should be [..., Lq, d_v] = {(*lead, 3, 6)}, got {tuple(out.shape)}"


def test_attention_matches_pytorch():
    q, k, v = _qkv(2)
    out, w = scaled_dot_product_attention(q, k, v)
    want_w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), dim=-1)
    assert torch.allclose(w, want_w), "weights should be softmax(q @ k^T / sqrt(d_k)) over the keys"
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v)), "output should be weights @ v"


def test_masked_keys_get_exactly_zero_weight():
    q, k, v = _qkv(2)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), pad_id=0)   # [2, 1, 5]
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(w[0, :, 3:] == 0), "masked keys (mask False) must get weight exactly 0"
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), (
        "with a padding mask, the output differs from F.scaled_dot_product_attention(q, k, v, attn_mask=mask)")


def test_fully_masked_row_gives_zeros():
    q, k, v = _qkv(1)
    mask = torch.ones(1, 3, 5, dtype=torch.bool)
    mask[0, 1] = False                      # query 1 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any(), "a fully masked query row must give zeros, not NaN"
    assert torch.equal(w[0, 1], torch.zeros(5, dtype=w.dtype)) and torch.equal(out[0, 1], torch.zeros(6, dtype=out.dtype))


def test_dropout_drops_and_rescales():
    """dropout_p: each weight is dropped (set to 0) with that probability, the kept ones are divided by
    (1 - dropout_p), and the output is computed from these weights."""
    q, k, v = _qkv(4, 2, lq=8, lk=8)
    _, plain = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(1)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    dropped = (w == 0).double().mean().item()
    assert 0.3 < dropped < 0.7, f"with dropout_p=0.5 about half of the weights should be 0, got {dropped:.0%}"
    kept = w != 0
    assert torch.allclose(w[kept], plain[kept] / 0.5), (
        "the weights kept by dropout must be divided by (1 - dropout_p): with dropout_p=0.5 they double")
    assert torch.allclose(out, w @ v), "the output must be computed from the weights after dropout: weights @ v"


def test_no_dropout_when_p_is_zero():
    q, k, v = _qkv(2)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.0)[1]
    b = scaled_dot_product_attention(q, k, v)[1]
    assert torch.equal(a, b), "dropout_p=0.0 must leave the weights untouched (same as no dropout)"
