"""Public tests for milestone 2. Run `pytest -q` in this folder.

A useful subset of the grader's checks: shapes, head layout, the ValueError, and one parity test
against torch.nn.MultiheadAttention. The hidden checks go further (masks, dropout, gradients, loops).
"""
import pytest
import torch
from torch import nn

from multihead import MultiHeadAttention, merge_heads, split_heads

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores


def test_split_heads_layout():
    x = torch.arange(2 * 3 * 4, dtype=torch.float64).reshape(2, 3, 4)     # [B=2, L=3, d_model=4]
    got = split_heads(x, 2)
    assert got.shape == (2, 2, 3, 2), f"expected [B, H, L, d_k] = (2, 2, 3, 2), got {tuple(got.shape)}"
    assert torch.equal(got[0, 1, 0], x[0, 0, 2:4]), "head 1 of position 0 must hold features 2:4 of position 0"


def test_merge_heads_inverts_split():
    x = torch.randn(2, 5, 12)
    back = merge_heads(split_heads(x, 3))
    assert back.shape == x.shape, f"merge_heads should give [B, L, d_model] = {tuple(x.shape)}, got {tuple(back.shape)}"
    assert torch.equal(back, x), "merge_heads(split_heads(x, H)) should give x back"


def test_rejects_indivisible_width():
    with pytest.raises(ValueError):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("lq, lk", [(5, 5), (4, 6)])
def test_shapes(lq, lk):
    mha = MultiHeadAttention(8, 2)
    q, kv = torch.randn(3, lq, 8), torch.randn(3, lk, 8)
    out = mha(q, kv, kv)
    assert out.shape == (3, lq, 8), f"expected [B, Lq, d_model] = (3, {lq}, 8), got {tuple(out.shape)}"
    assert mha.attn_weights.shape == (3, 2, lq, lk), (
        f"self.attn_weights should be [B, H, Lq, Lk] = (3, 2, {lq}, {lk}), got {tuple(mha.attn_weights.shape)}")


def _pytorch_copy(mine, d, h):
    ref = nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mine.w_q.weight, mine.w_k.weight, mine.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mine.w_q.bias, mine.w_k.bias, mine.w_v.bias]))
        ref.out_proj.weight.copy_(mine.w_o.weight)
        ref.out_proj.bias.copy_(mine.w_o.bias)
    return ref


@pytest.mark.parametrize("batch", [3, 2])          # batch 2 == heads 2: a missing head dim is silent there
def test_matches_pytorch_with_padding_mask(batch):
    d, h = 8, 2
    mine = MultiHeadAttention(d, h).double().eval()
    ref = _pytorch_copy(mine, d, h)
    x = torch.randn(batch, 5, d, dtype=torch.float64)
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)[:batch]
    mask = keep[:, None, :]                                        # [B, 1, L]; our masks: True = may attend
    try:
        got = mine(x, x, x, mask)
    except RuntimeError as e:
        pytest.fail(f"a padding mask [B, 1, L] made forward raise {e!r}. Does the mask get a head dimension "
                    f"(mask.unsqueeze(-3) -> [B, 1, 1, L]) before it meets the scores [B, H, L, L]?")
    want, _ = ref(x, x, x, key_padding_mask=~keep)                 # PyTorch's: True = blocked
    if batch == h:   # the same mask without a head dimension: item b's padding lands on head b of every item
        no_head = (~keep)[None, :, None, :].expand(batch, h, 5, 5).reshape(batch * h, 5, 5)
        wrong, _ = ref(x, x, x, attn_mask=no_head)
        assert not torch.allclose(got, wrong), (
            "your output is what a mask without a head dimension gives: with B == H it lines the batch up with "
            "the heads instead of failing. Give a [B, 1, L] or [B, L, L] mask a head dimension: mask.unsqueeze(-3) "
            "(which also leaves a 2-D [Lq, Lk] mask such as a causal one right; unsqueeze(1) would not).")
    assert torch.allclose(got, want), "output differs from nn.MultiheadAttention given the same weights and mask"


def test_dropout_only_in_training():
    d, h = 8, 2
    mha = MultiHeadAttention(d, h, dropout=0.5).double()
    x = torch.randn(2, 6, d, dtype=torch.float64)
    mha.eval()
    a, b = mha(x, x, x), mha(x, x, x)
    assert torch.equal(a, b), "in eval mode (model.eval()) dropout must be off: two calls should give the same output"
    mha.train()
    torch.manual_seed(0)
    c = mha(x, x, x)
    assert not torch.allclose(a, c), "in training mode, dropout=0.5 should change the output"
    assert (mha.attn_weights == 0).any(), (
        "in training mode some attention weights should be 0: dropout acts on the attention weights "
        "(pass dropout_p to scaled_dot_product_attention) and self.attn_weights keeps the weights used")


@pytest.mark.parametrize("shape", ["[L, L]", "[B, L, L]"])
def test_matches_pytorch_with_a_causal_mask(shape):
    """A 2-D causal mask [L, L] broadcasts over batch and heads as it is; a [B, L, L] one needs a head dimension."""
    d, h, L = 8, 2, 5
    mine = MultiHeadAttention(d, h).double().eval()
    ref = _pytorch_copy(mine, d, h)
    x = torch.randn(3, L, d, dtype=torch.float64)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    mask = causal if shape == "[L, L]" else causal.expand(3, L, L)
    got = mine(x, x, x, mask)
    want, _ = ref(x, x, x, attn_mask=~causal)
    assert torch.allclose(got, want), (
        f"with a causal mask of shape {shape} the output differs from nn.MultiheadAttention: give a mask its head "
        "dimension with mask.unsqueeze(-3) (a 2-D mask then stays [1, L, L]; unsqueeze(1) would make it [L, 1, L])")
