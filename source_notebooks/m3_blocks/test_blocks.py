"""Public tests for milestone 3. Run `pytest -q` in this folder.

A useful subset of the grader's checks: LayerNorm and FeedForward against their definitions, the
ValueError, and both layers (post-LN and pre-LN) against torch.nn.TransformerEncoderLayer /
TransformerDecoderLayer given the same weights. The hidden checks go further (dropout placement in
training mode, float32, gradients, more masks, forbidden APIs, ...).
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from blocks import DecoderLayer, EncoderLayer, FeedForward, LayerNorm

torch.manual_seed(0)
D, H, D_FF = 8, 2, 16


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-7, atol=1e-10)


def _randomise_norms(layer):
    """Give every LayerNorm random weights, so a swapped or skipped norm shows."""
    with torch.no_grad():
        for m in layer.modules():
            if isinstance(m, LayerNorm):
                m.weight.copy_(1 + 0.5 * torch.randn_like(m.weight))
                m.bias.copy_(0.5 * torch.randn_like(m.bias))


def _copy_attention(mine, theirs):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([mine.w_q.weight, mine.w_k.weight, mine.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([mine.w_q.bias, mine.w_k.bias, mine.w_v.bias]))
        theirs.out_proj.weight.copy_(mine.w_o.weight)
        theirs.out_proj.bias.copy_(mine.w_o.bias)


def _copy_linear_and_norm(mine, theirs, names):
    with torch.no_grad():
        theirs.linear1.load_state_dict(mine.feed_forward.linear1.state_dict())
        theirs.linear2.load_state_dict(mine.feed_forward.linear2.state_dict())
        for name in names:
            getattr(theirs, name).weight.copy_(getattr(mine, name).weight)
            getattr(theirs, name).bias.copy_(getattr(mine, name).bias)


# ----------------------------------------------------------------------------------- LayerNorm

def test_layernorm_parameters():
    ln = LayerNorm(D)
    names = dict(ln.named_parameters())
    assert set(names) == {"weight", "bias"}, f"LayerNorm should have parameters weight and bias, got {sorted(names)}"
    assert torch.equal(ln.weight, torch.ones(D)), f"weight should start as ones of shape [{D}]"
    assert torch.equal(ln.bias, torch.zeros(D)), f"bias should start as zeros of shape [{D}]"


@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_layernorm_matches_pytorch(scale):
    mine = LayerNorm(D).double()
    theirs = nn.LayerNorm(D, dtype=torch.float64)
    with torch.no_grad():
        mine.weight.copy_(torch.randn(D))
        mine.bias.copy_(torch.randn(D))
        theirs.weight.copy_(mine.weight)
        theirs.bias.copy_(mine.bias)
    x = scale * torch.randn(2, 3, 4, D, dtype=torch.float64)       # [2, 3, 4, d_model]: any leading dims
    got = mine(x)
    assert got.shape == x.shape, f"LayerNorm should keep the shape {tuple(x.shape)}, got {tuple(got.shape)}"
    assert _close(got, theirs(x)), (
        f"LayerNorm differs from nn.LayerNorm (input std {scale}): normalise over the last dimension "
        "with the biased variance and eps inside the square root")


def test_layernorm_keeps_float32():
    got = LayerNorm(D)(torch.randn(3, D))
    assert got.dtype == torch.float32, f"float32 input and parameters should give float32, got {got.dtype}"


# --------------------------------------------------------------------------------- FeedForward

@pytest.mark.parametrize("activation, fn", [("relu", F.relu), ("gelu", F.gelu)])
def test_feedforward(activation, fn):
    ff = FeedForward(D, D_FF, activation=activation).double()
    assert ff.linear1.weight.shape == (D_FF, D) and ff.linear2.weight.shape == (D, D_FF), (
        f"linear1 should map d_model={D} -> d_ff={D_FF} and linear2 back: weights ({D_FF}, {D}) and ({D}, {D_FF})")
    x = torch.randn(3, 5, D, dtype=torch.float64)
    got = ff(x)
    assert got.shape == (3, 5, D), f"FeedForward should give [B, L, d_model] = (3, 5, {D}), got {tuple(got.shape)}"
    want = ff.linear2(fn(ff.linear1(x)))
    assert _close(got, want), f"FeedForward({activation!r}) should compute linear2({activation}(linear1(x)))" + (
        " with the exact (erf) GELU, not the tanh approximation" if activation == "gelu" else "")


def test_feedforward_rejects_unknown_activation():
    with pytest.raises(ValueError) as info:
        FeedForward(D, D_FF, activation="tanh")
    msg = str(info.value)
    assert "relu" in msg and "gelu" in msg, f"the ValueError message should name 'relu' and 'gelu', got {msg!r}"


# ------------------------------------------------------------------------ layers vs PyTorch

@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_pytorch(norm_first, activation):
    mine = EncoderLayer(D, H, D_FF, activation=activation, norm_first=norm_first).double()
    assert mine.norm_first is norm_first, "EncoderLayer should store norm_first as given"
    _randomise_norms(mine)
    theirs = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, activation=activation, batch_first=True,
                                        norm_first=norm_first, dtype=torch.float64)
    _copy_attention(mine.self_attn, theirs.self_attn)
    _copy_linear_and_norm(mine, theirs, ["norm1", "norm2"])
    x = torch.randn(3, 5, D, dtype=torch.float64)
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)   # [B, L]
    got = mine(x, keep[:, None, :])                                       # our mask: [B, 1, L], True = may attend
    want = theirs(x, src_key_padding_mask=~keep)                          # PyTorch's: True = blocked
    assert got.shape == (3, 5, D), f"EncoderLayer should give [B, L, d_model] = (3, 5, {D}), got {tuple(got.shape)}"
    kind = "pre-LN: x + drop(sublayer(norm(x)))" if norm_first else "post-LN: norm(x + drop(sublayer(x)))"
    assert _close(got, want), f"EncoderLayer ({kind}, {activation}) differs from nn.TransformerEncoderLayer with the same weights"


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_matches_pytorch(norm_first):
    mine = DecoderLayer(D, H, D_FF, norm_first=norm_first).double()
    assert mine.norm_first is norm_first, "DecoderLayer should store norm_first as given"
    _randomise_norms(mine)
    theirs = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first,
                                        dtype=torch.float64)
    _copy_attention(mine.self_attn, theirs.self_attn)
    _copy_attention(mine.cross_attn, theirs.multihead_attn)
    _copy_linear_and_norm(mine, theirs, ["norm1", "norm2", "norm3"])
    B, Lt, Ls = 3, 4, 6
    x = torch.randn(B, Lt, D, dtype=torch.float64)
    memory = torch.randn(B, Ls, D, dtype=torch.float64)
    src_keep = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)   # [B, Ls]
    tgt_keep = torch.tensor([[1] * 4, [1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)              # [B, Lt]
    causal = torch.ones(Lt, Lt, dtype=torch.bool).tril()
    tgt_mask = causal & tgt_keep[:, None, :]                               # [B, Lt, Lt]
    got = mine(x, memory, src_mask=src_keep[:, None, :], tgt_mask=tgt_mask)
    want = theirs(x, memory, tgt_mask=~causal, tgt_key_padding_mask=~tgt_keep, memory_key_padding_mask=~src_keep)
    assert got.shape == (B, Lt, D), f"DecoderLayer should give [B, Lt, d_model] = ({B}, {Lt}, {D}), got {tuple(got.shape)}"
    assert _close(got, want), (
        f"DecoderLayer ({'pre' if norm_first else 'post'}-LN) differs from nn.TransformerDecoderLayer with the same "
        "weights: check the order self-attention -> cross-attention (queries from x, keys/values from memory) "
        "-> feed-forward, and which norm goes with which sub-layer")


# ------------------------------------------------------------------------------- behaviour

def test_decoder_layer_does_not_look_ahead_with_a_causal_mask():
    layer = DecoderLayer(D, H, D_FF).double().eval()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    memory = torch.randn(2, 3, D, dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, 2, D, dtype=torch.float64)            # change positions 3 and 4 only
    a, b = layer(x, memory, tgt_mask=causal), layer(changed, memory, tgt_mask=causal)
    assert _close(a[:, :3], b[:, :3]), "with a causal tgt_mask, outputs at positions 0..2 must not depend on positions 3, 4"


def test_eval_mode_has_no_dropout():
    layer = EncoderLayer(D, H, D_FF, dropout=0.5)
    x = torch.randn(2, 5, D)
    layer.eval()
    assert torch.equal(layer(x), layer(x)), "in eval mode, two runs on the same input must give the same output"
    layer.train()
    assert not torch.equal(layer(x), layer(x)), "in training mode with dropout=0.5 the output should vary between runs"


def test_submodule_names():
    dec = DecoderLayer(D, H, D_FF, dropout=0.1, activation="gelu")
    for name in ["self_attn", "cross_attn", "feed_forward", "norm1", "norm2", "norm3"]:
        assert hasattr(dec, name), f"DecoderLayer should have a submodule named {name!r}"
    assert isinstance(dec.feed_forward, FeedForward) and isinstance(dec.norm3, LayerNorm), (
        "feed_forward should be a FeedForward and norm1..norm3 LayerNorms (the ones of blocks.py)")
    assert dec.self_attn is not dec.cross_attn, "self_attn and cross_attn must be two separate modules"
