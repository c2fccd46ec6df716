"""Public tests for milestone 3. Run `pytest -q` in this folder (about 1.8 s cold on 2 cores
measured with the reference files; several times that while other jobs share the machine).

A quick subset of the grader's checks: LayerNorm and FeedForward against their definitions, the
ValueError, both layers (post-LN and pre-LN) against torch.nn.TransformerEncoderLayer /
TransformerDecoderLayer given the same weights (with and without masks), where dropout acts in
training mode (each sub-layer swapped for a constant so the dropped values can be read off), gradients,
loops (torch calls counted at two batch sizes) and the forbidden functions. A failing test names the
hidden check group that would lose points (testkit.py). The hidden checks go further.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from blocks import DecoderLayer, EncoderLayer, FeedForward, LayerNorm
from testkit import FORBIDDEN, TorchCalls, cause, group

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores
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
    got = mine(x, memory, src_keep[:, None, :], tgt_mask)                 # positional: (x, memory, src_mask, tgt_mask)
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


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_layers_without_masks_match_pytorch(decoder, norm_first):
    """mask None means no mask at all: nothing causal is added, nothing is padded."""
    cls = DecoderLayer if decoder else EncoderLayer
    mine = cls(D, H, D_FF, norm_first=norm_first).double()
    _randomise_norms(mine)
    args = (D, H, D_FF)
    kw = dict(dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64)
    theirs = nn.TransformerDecoderLayer(*args, **kw) if decoder else nn.TransformerEncoderLayer(*args, **kw)
    _copy_attention(mine.self_attn, theirs.self_attn)
    if decoder:
        _copy_attention(mine.cross_attn, theirs.multihead_attn)
    _copy_linear_and_norm(mine, theirs, ["norm1", "norm2", "norm3"] if decoder else ["norm1", "norm2"])
    x = torch.randn(2, 4, D, dtype=torch.float64)
    memory = torch.randn(2, 3, D, dtype=torch.float64)
    got = mine(x, memory) if decoder else mine(x)
    want = theirs(x, memory) if decoder else theirs(x)
    assert _close(got, want), (
        f"{cls.__name__} called without masks differs from PyTorch's layer without masks: a mask that is None means "
        "no mask at all (nothing causal is added for you)" + (f". {cause('tgt_mask_added')}" if decoder else "")
        + f" [{group('decoder_layer' if decoder else 'encoder_layer')}]")


# ----------------------------------------------------------------------- dropout (training mode)

class _Const(nn.Module):
    """Stands in for a sub-layer: returns `value` everywhere, whatever it is given."""

    def __init__(self, value):
        super().__init__()
        self.value = value

    def forward(self, x, *args, **kwargs):
        return torch.full_like(x, self.value)


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_residual_dropout_on_each_sublayer_output(decoder, norm_first):
    """Sub-layers replaced by constants 1, 2, 4 and the norms by identities: then, in training mode with
    dropout 0.5, out - x = 2 * (the sum of the kept constants), and each is kept about half the time."""
    torch.manual_seed(1)
    cls = DecoderLayer if decoder else EncoderLayer
    layer = cls(D, H, D_FF, dropout=0.5, norm_first=norm_first).double().train()
    names = ["self_attn", "cross_attn", "feed_forward"] if decoder else ["self_attn", "feed_forward"]
    for i, name in enumerate(names):
        setattr(layer, name, _Const(float(2 ** i)))
    for n in range(1, len(names) + 1):
        setattr(layer, f"norm{n}", nn.Identity())
    x = torch.randn(4, 50, D, dtype=torch.float64)
    memory = torch.randn(4, 7, D, dtype=torch.float64)
    out = layer(x, memory) if decoder else layer(x)
    kept = (out - x) / 2                                                  # sum of kept constants, if all is right
    where = f"{cls.__name__}(dropout=0.5, norm_first={norm_first}) in training mode"
    rounded = kept.round()
    assert torch.allclose(kept, rounded, atol=1e-9) and rounded.min() >= 0 and rounded.max() <= 2 ** len(names) - 1, (
        f"{where}: with every sub-layer returning a constant and the norms set to identities, out - x should be "
        "the kept sub-layer outputs, each scaled by 1/(1 - p). It is not, so dropout acts on the residual sum "
        "(x + sublayer(x)) or on the stream itself; it belongs on each sub-layer's output before the residual add: "
        f"x + drop(sublayer(...)) [{group('dropout')}]")
    bits = rounded.long()
    for i, name in enumerate(names):
        share = ((bits >> i) & 1).double().mean().item()
        assert 0.35 < share < 0.65, (
            f"{where}: the output of {name} is kept in {share:.0%} of the positions, not about half: "
            + ("it reaches the residual without dropout. Apply drop(...) to each sub-layer's output before the "
               "residual add" if share >= 0.65 else "it is dropped too often")
            + f" [{group('dropout')}]")
    layer.eval()
    out = layer(x, memory) if decoder else layer(x)
    assert torch.allclose(out - x, torch.full_like(x, 2 ** len(names) - 1.0)), (
        f"{cls.__name__} in eval mode still drops sub-layer outputs: dropout acts in training mode only "
        f"(nn.Dropout, or F.dropout(..., training=self.training)) [{group('behaviour')}]")


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_layer_dropout_reaches_attention(decoder):
    cls = DecoderLayer if decoder else EncoderLayer
    torch.manual_seed(2)
    layer = cls(D, H, D_FF, dropout=0.5).train()
    x, memory = torch.randn(2, 6, D), torch.randn(2, 6, D)
    layer(x, memory) if decoder else layer(x)
    for name in (["self_attn", "cross_attn"] if decoder else ["self_attn"]):
        w = getattr(layer, name).attn_weights
        assert w is not None and (w == 0).float().mean() > 0.2, (
            f"{cls.__name__}(dropout=0.5) in training mode: the attention weights of {name} are never dropped, so "
            f"{name} was built without the layer's dropout: MultiHeadAttention(d_model, num_heads, dropout) "
            f"[{group('dropout')}]")


def test_feedforward_dropout_on_hidden_activations():
    torch.manual_seed(3)
    W = 64                                                                # d_ff = d_model, so linear2 can be the identity
    ff = FeedForward(W, W, dropout=0.5, activation="gelu").double().train()
    x = torch.randn(4, 10, W, dtype=torch.float64)
    with torch.no_grad():
        ff.linear2.weight.zero_()
        ff.linear2.bias.fill_(1.0)
    assert torch.equal(ff(x), torch.ones(4, 10, W, dtype=torch.float64)), (
        "FeedForward(dropout=0.5) in training mode drops values after linear2 (with linear2's weights zero and bias "
        "one the output should be all ones): the dropout belongs on the hidden activations, between the activation "
        f"and linear2 [{group('feed_forward')}]")
    with torch.no_grad():                                                 # now the output is drop(gelu(linear1(x)))
        ff.linear2.weight.copy_(torch.eye(W))
        ff.linear2.bias.zero_()
    h = F.gelu(ff.linear1(x))
    out = ff(x)
    kept = out != 0
    assert 0.35 < kept.double().mean() < 0.65, (
        "FeedForward(dropout=0.5) in training mode does not drop about half of its hidden activations "
        f"(kept {kept.double().mean():.0%}): linear2(dropout(activation(linear1(x)))) [{group('feed_forward')}]")
    assert torch.allclose(out[kept], 2 * h[kept], atol=1e-12), (
        "FeedForward(dropout=0.5, activation='gelu') in training mode: the kept hidden values are not "
        "gelu(linear1(x)) / (1 - p); the dropout goes after the activation, not before it "
        f"[{group('feed_forward')}]")


# --------------------------------------------------------------------- gradients, loops, APIs

@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_gradients_reach_everything(norm_first):
    layer = DecoderLayer(D, H, D_FF, norm_first=norm_first).double()
    theirs = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first,
                                        dtype=torch.float64)
    _copy_attention(layer.self_attn, theirs.self_attn)
    _copy_attention(layer.cross_attn, theirs.multihead_attn)
    _copy_linear_and_norm(layer, theirs, ["norm1", "norm2", "norm3"])
    x = torch.randn(2, 4, D, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    x2, memory2 = x.detach().clone().requires_grad_(), memory.detach().clone().requires_grad_()
    g = torch.randn(2, 4, D, dtype=torch.float64)
    layer(x, memory).backward(g)
    theirs(x2, memory2).backward(g)
    for name, a, b in (("x", x.grad, x2.grad), ("memory", memory.grad, memory2.grad),
                       ("linear1.weight", layer.feed_forward.linear1.weight.grad, theirs.linear1.weight.grad),
                       ("norm1.weight", layer.norm1.weight.grad, theirs.norm1.weight.grad)):
        assert a is not None and _close(a, b), (
            f"DecoderLayer (norm_first={norm_first}): the gradient of {name} differs from nn.TransformerDecoderLayer's"
            f"{' (none reached it)' if a is None else ''}: is something detached, e.g. the residual path x? "
            f"[{group('gradients')}]")


def test_no_loop_over_the_batch():
    layer = EncoderLayer(D, H, D_FF).eval()
    counts = []
    for B in (2, 5):
        with TorchCalls() as calls:
            layer(torch.randn(B, 6, D))
        counts.append(calls.count)
    assert counts[0] == counts[1], (
        f"EncoderLayer makes {counts[0]} torch calls for a batch of 2 and {counts[1]} for 5: a count that grows "
        f"with the batch means a Python loop over the batch items [{group('vectorization')}]")


def test_no_forbidden_functions():
    import fnmatch
    layer = DecoderLayer(D, H, D_FF).train()
    with TorchCalls() as calls:
        layer(torch.randn(2, 4, D), torch.randn(2, 3, D))
        LayerNorm(D)(torch.randn(3, D))
    for _, patterns, plain in FORBIDDEN:
        used = sorted({n for n in calls.names for p in patterns if not p.startswith("aten::")
                       and fnmatch.fnmatchcase(n, p)})
        assert not used, f"blocks.py calls {', '.join(used)}: do not use {plain} [{group('from_scratch')}]"
