"""Public tests for milestone 3. Run `pytest -q` in this folder (about 1.8 s cold on 2 cores
measured with the reference files; several times that while other jobs share the machine).

A quick subset of the grader's checks: LayerNorm against nn.LayerNorm (eps, a large mean with a tiny spread,
float32), FeedForward against its definition, the ValueError, both layers (post-LN and pre-LN, relu and gelu,
float64 and float32) against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer given the same
weights (with and without masks), where dropout acts in training mode (each sub-layer swapped for a
constant so the dropped values can be read off; the layer's rate reaching the attentions and the
feed-forward), gradients of every parameter, inputs left unchanged, loops (torch calls counted as the batch
and the length grow, with every kind of mask) and the forbidden functions. A failing test names the hidden
check group that would lose points (testkit.py). The hidden checks go further.
"""
import fnmatch

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from blocks import DecoderLayer, EncoderLayer, FeedForward, LayerNorm
from multihead import MultiHeadAttention
from testkit import FORBIDDEN, TorchCalls, cause, group

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores
D, H, D_FF = 8, 2, 16


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-9, atol=1e-10)      # float64: only rounding may differ (the grader's tolerance)


def _precision(a, b):
    """A hint when two float64 results agree only to float32 precision."""
    if a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6):
        return (" (they agree only to about 1e-7, float32 precision: is something computed in float32 on the way, "
                "e.g. .float() or a float32 tensor created inside?)")
    return ""


def _their_mask(mask, lq):
    """Our mask (True = may attend; [Lq, Lk] or [B, Lq or 1, Lk]) as the attn_mask of PyTorch's layers (True =
    blocked; [Lq, Lk] or [B * H, Lq, Lk]). (Their key_padding_mask would do too, but it imports sympy: slow.)"""
    if mask is None or mask.dim() == 2:
        return None if mask is None else ~mask
    return (~mask).expand(mask.size(0), lq, mask.size(-1)).repeat_interleave(H, dim=0)


def _masks(B=3, Lt=4, Ls=6):
    """Source padding [B, 1, Ls], and causal AND target padding [B, Lt, Lt] (no row fully masked)."""
    src_keep = torch.tensor([[1] * Ls, [1] * (Ls - 2) + [0] * 2, [1, 1] + [0] * (Ls - 2)], dtype=torch.bool)
    tgt_keep = torch.tensor([[1] * Lt, [1] * (Lt - 1) + [0], [1, 1] + [0] * (Lt - 2)], dtype=torch.bool)
    src = src_keep[[b % 3 for b in range(B)]][:, None, :]
    tgt = torch.ones(Lt, Lt, dtype=torch.bool).tril() & tgt_keep[[b % 3 for b in range(B)]][:, None, :]
    return src, tgt


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


def _pytorch_copy(mine, decoder, norm_first, activation="relu", dtype=torch.float64):
    """PyTorch's layer with the weights of `mine` (norms randomised first, so a swapped or skipped norm shows)."""
    _randomise_norms(mine)
    cls = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    theirs = cls(D, H, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first, dtype=dtype)
    _copy_attention(mine.self_attn, theirs.self_attn)
    if decoder:
        _copy_attention(mine.cross_attn, theirs.multihead_attn)
    with torch.no_grad():
        theirs.linear1.load_state_dict(mine.feed_forward.linear1.state_dict())
        theirs.linear2.load_state_dict(mine.feed_forward.linear2.state_dict())
        for name in ("norm1", "norm2", "norm3") if decoder else ("norm1", "norm2"):
            getattr(theirs, name).weight.copy_(getattr(mine, name).weight)
            getattr(theirs, name).bias.copy_(getattr(mine, name).bias)
    return theirs


def _run_theirs(theirs, decoder, x, memory=None, src_mask=None, tgt_mask=None):
    L = x.size(1)
    if decoder:
        return theirs(x, memory, tgt_mask=_their_mask(tgt_mask, L), memory_mask=_their_mask(src_mask, L))
    return theirs(x, src_mask=_their_mask(src_mask, L))


# ----------------------------------------------------------------------------------- LayerNorm

def test_layernorm_parameters():
    ln = LayerNorm(D)
    names = dict(ln.named_parameters())
    assert set(names) == {"weight", "bias"}, (
        f"LayerNorm should have parameters weight and bias, got {sorted(names)} [{group('layer_norm')}]")
    assert torch.equal(ln.weight, torch.ones(D)), f"weight should start as ones of shape [{D}] [{group('layer_norm')}]"
    assert torch.equal(ln.bias, torch.zeros(D)), f"bias should start as zeros of shape [{D}] [{group('layer_norm')}]"


@pytest.mark.parametrize("spread, mean", [(1.0, 0.0), (1e-3, 0.0), (1e-3, 100.0)])
def test_layernorm_matches_pytorch(spread, mean):
    mine = LayerNorm(D).double()
    theirs = nn.LayerNorm(D, dtype=torch.float64)
    with torch.no_grad():
        mine.weight.copy_(torch.randn(D))
        mine.bias.copy_(torch.randn(D))
        theirs.weight.copy_(mine.weight)
        theirs.bias.copy_(mine.bias)
    x = spread * torch.randn(2, 3, 4, D, dtype=torch.float64) + mean     # [2, 3, 4, d_model]: any leading dims
    before = x.clone()
    got = mine(x)
    assert got.shape == x.shape, f"LayerNorm should keep the shape {tuple(x.shape)}, got {tuple(got.shape)} [{group('layer_norm')}]"
    want = theirs(x)
    if not _close(got, want):
        hint = ("normalise over the last dimension with the biased variance and eps inside the square root"
                + _precision(got, want))
        if mean:
            hint = ("at a large mean with a tiny spread, E[x^2] - E[x]^2 cancels to noise: take the variance of "
                    "the centred values, ((x - mean) ** 2).mean(-1)")
        pytest.fail(f"LayerNorm differs from nn.LayerNorm (float64, input mean {mean:g}, spread {spread:g}): {hint} "
                    f"[{group('layer_norm')}]")
    assert torch.equal(x, before), f"LayerNorm changed its input in place (x -= mean): use out-of-place operations [{group('layer_norm')}]"


def test_layernorm_uses_its_eps():
    x = torch.randn(3, 5, D, dtype=torch.float64)
    got = LayerNorm(D, eps=0.1).double()(x)
    assert _close(got, nn.LayerNorm(D, eps=0.1, dtype=torch.float64)(x)), (
        f"LayerNorm(d_model, eps=0.1) differs from nn.LayerNorm(d_model, eps=0.1): use the eps you are given, inside "
        f"the square root: (x - mean) / sqrt(var + eps) [{group('layer_norm')}]")


def test_layernorm_keeps_float32():
    x = torch.randn(3, D)
    got = LayerNorm(D)(x)
    assert got.dtype == torch.float32, f"float32 input and parameters should give float32, got {got.dtype} [{group('layer_norm')}]"
    assert torch.allclose(got, nn.LayerNorm(D)(x), atol=1e-5), f"LayerNorm differs from nn.LayerNorm in float32 [{group('layer_norm')}]"


# --------------------------------------------------------------------------------- FeedForward

@pytest.mark.parametrize("activation, fn", [("relu", F.relu), ("gelu", F.gelu)])
def test_feedforward(activation, fn):
    ff = FeedForward(D, D_FF, activation=activation).double()
    assert ff.linear1.weight.shape == (D_FF, D) and ff.linear2.weight.shape == (D, D_FF), (
        f"linear1 should map d_model={D} -> d_ff={D_FF} and linear2 back: weights ({D_FF}, {D}) and ({D}, {D_FF}) "
        f"[{group('feed_forward')}]")
    x = torch.randn(3, 5, D, dtype=torch.float64)
    before = x.clone()
    got = ff(x)
    assert got.shape == (3, 5, D), f"FeedForward should give [B, L, d_model] = (3, 5, {D}), got {tuple(got.shape)} [{group('feed_forward')}]"
    assert torch.equal(x, before), f"FeedForward changed its input in place: leave x as it was [{group('feed_forward')}]"
    want = ff.linear2(fn(ff.linear1(x)))
    assert _close(got, want), f"FeedForward({activation!r}) should compute linear2({activation}(linear1(x)))" + (
        " with the exact (erf) GELU, not the tanh approximation" if activation == "gelu" else "") + f" [{group('feed_forward')}]"


@pytest.mark.parametrize("cls", [FeedForward, EncoderLayer, DecoderLayer], ids=lambda c: c.__name__)
def test_rejects_unknown_activation(cls):
    args = (D, D_FF) if cls is FeedForward else (D, H, D_FF)
    with pytest.raises(ValueError) as info:
        cls(*args, activation="tanh")
    msg = str(info.value)
    assert "relu" in msg and "gelu" in msg, (
        f"{cls.__name__}(..., activation='tanh'): the ValueError message should name 'relu' and 'gelu', got {msg!r} "
        f"[{group('structure')}]")


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


# ------------------------------------------------------------------------ layers vs PyTorch

@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_pytorch(norm_first, activation):
    mine = EncoderLayer(D, H, D_FF, activation=activation, norm_first=norm_first).double()
    assert mine.norm_first is norm_first, f"EncoderLayer should store norm_first as given [{group('structure')}]"
    theirs = _pytorch_copy(mine, False, norm_first, activation)
    x = torch.randn(3, 5, D, dtype=torch.float64)
    src_mask, _ = _masks(3, 5, 5)                                         # our mask: [B, 1, L], True = may attend
    got = mine(x, src_mask)
    want = _run_theirs(theirs, False, x, src_mask=src_mask)
    assert got.shape == (3, 5, D), f"EncoderLayer should give [B, L, d_model] = (3, 5, {D}), got {tuple(got.shape)} [{group('encoder_layer')}]"
    kind = "pre-LN: x + drop(sublayer(norm(x)))" if norm_first else "post-LN: norm(x + drop(sublayer(x)))"
    assert _close(got, want), (
        f"EncoderLayer ({kind}, {activation}, a padding mask [3, 1, 5]) differs from nn.TransformerEncoderLayer with "
        f"the same weights{_precision(got, want)}: the activation goes to feed_forward, the mask to self_attn "
        f"[{group('encoder_layer')}]")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_pytorch(norm_first, activation):
    mine = DecoderLayer(D, H, D_FF, activation=activation, norm_first=norm_first).double()
    assert mine.norm_first is norm_first, f"DecoderLayer should store norm_first as given [{group('structure')}]"
    theirs = _pytorch_copy(mine, True, norm_first, activation)
    B, Lt, Ls = 3, 4, 6
    x = torch.randn(B, Lt, D, dtype=torch.float64)
    memory = torch.randn(B, Ls, D, dtype=torch.float64)
    src_mask, tgt_mask = _masks(B, Lt, Ls)                                # [B, 1, Ls] and [B, Lt, Lt]
    got = mine(x, memory, src_mask, tgt_mask)                             # positional: (x, memory, src_mask, tgt_mask)
    want = _run_theirs(theirs, True, x, memory, src_mask, tgt_mask)
    assert got.shape == (B, Lt, D), f"DecoderLayer should give [B, Lt, d_model] = ({B}, {Lt}, {D}), got {tuple(got.shape)} [{group('decoder_layer')}]"
    assert _close(got, want), (
        f"DecoderLayer ({'pre' if norm_first else 'post'}-LN, {activation}) differs from nn.TransformerDecoderLayer with "
        f"the same weights{_precision(got, want)}: check the order self-attention (tgt_mask) -> cross-attention "
        "(queries from x, keys/values from memory, src_mask) -> feed-forward (with the activation you are given), and "
        f"which norm goes with which sub-layer [{group('decoder_layer')}]")


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_layers_without_masks_match_pytorch(decoder, norm_first):
    """mask None means no mask at all: nothing causal is added, nothing is padded."""
    cls = DecoderLayer if decoder else EncoderLayer
    mine = cls(D, H, D_FF, norm_first=norm_first).double()
    theirs = _pytorch_copy(mine, decoder, norm_first)
    x = torch.randn(2, 4, D, dtype=torch.float64)
    memory = torch.randn(2, 3, D, dtype=torch.float64)
    got = mine(x, memory) if decoder else mine(x)
    want = theirs(x, memory) if decoder else theirs(x)
    assert _close(got, want), (
        f"{cls.__name__} called without masks differs from PyTorch's layer without masks: a mask that is None means "
        "no mask at all (nothing causal is added for you)" + (f". {cause('tgt_mask_added')}" if decoder else "")
        + f" [{group('decoder_layer' if decoder else 'encoder_layer')}]")


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_layers_in_float32(decoder):
    cls = DecoderLayer if decoder else EncoderLayer
    mine = cls(D, H, D_FF, activation="gelu", norm_first=True)
    theirs = _pytorch_copy(mine, decoder, True, "gelu", torch.float32)
    x, memory = torch.randn(3, 4, D), torch.randn(3, 6, D)
    src_mask, tgt_mask = _masks(3, 4, 6)
    got = mine(x, memory, src_mask, tgt_mask) if decoder else mine(x, src_mask[:, :, :4])
    want = _run_theirs(theirs, decoder, x, memory, src_mask, tgt_mask) if decoder else _run_theirs(theirs, False, x, src_mask=src_mask[:, :, :4])
    assert got.dtype == torch.float32, f"{cls.__name__} on float32 inputs returns {got.dtype}; keep float32 [{group('decoder_layer' if decoder else 'encoder_layer')}]"
    assert torch.allclose(got, want, atol=1e-5), (
        f"{cls.__name__} (pre-LN, gelu) differs from PyTorch's layer in float32 "
        f"[{group('decoder_layer' if decoder else 'encoder_layer')}]")


# ------------------------------------------------------------------------------- behaviour

def test_decoder_layer_does_not_look_ahead_with_a_causal_mask():
    layer = DecoderLayer(D, H, D_FF).double().eval()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    memory = torch.randn(2, 3, D, dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, 2, D, dtype=torch.float64)            # change positions 3 and 4 only
    a, b = layer(x, memory, tgt_mask=causal), layer(changed, memory, tgt_mask=causal)
    assert _close(a[:, :3], b[:, :3]), (
        f"with a causal tgt_mask, outputs at positions 0..2 must not depend on positions 3, 4 [{group('behaviour')}]")


def test_eval_mode_has_no_dropout():
    layer = EncoderLayer(D, H, D_FF, dropout=0.5)
    x = torch.randn(2, 5, D)
    layer.eval()
    assert torch.equal(layer(x), layer(x)), (
        f"in eval mode, two runs on the same input must give the same output [{group('behaviour')}]")
    layer.train()
    assert not torch.equal(layer(x), layer(x)), "in training mode with dropout=0.5 the output should vary between runs"


def test_submodule_names():
    dec = DecoderLayer(D, H, D_FF, dropout=0.1, activation="gelu")
    for name in ["self_attn", "cross_attn", "feed_forward", "norm1", "norm2", "norm3"]:
        assert hasattr(dec, name), f"DecoderLayer should have a submodule named {name!r} [{group('structure')}]"
    assert isinstance(dec.feed_forward, FeedForward) and isinstance(dec.norm3, LayerNorm), (
        f"feed_forward should be a FeedForward and norm1..norm3 LayerNorms (the ones of blocks.py) [{group('structure')}]")
    assert isinstance(dec.self_attn, MultiHeadAttention) and isinstance(dec.cross_attn, MultiHeadAttention), (
        f"self_attn and cross_attn should be MultiHeadAttention (the one of multihead.py) [{group('structure')}]")
    assert dec.self_attn is not dec.cross_attn, f"self_attn and cross_attn must be two separate modules [{group('structure')}]"


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_layers_leave_their_inputs_unchanged(decoder, norm_first):
    cls = DecoderLayer if decoder else EncoderLayer
    layer = cls(D, H, D_FF, dropout=0.2, norm_first=norm_first).double()
    x, memory = torch.randn(3, 4, D, dtype=torch.float64), torch.randn(3, 6, D, dtype=torch.float64)
    src_mask, tgt_mask = _masks(3, 4, 6)
    if not decoder:
        src_mask = src_mask[:, :, :4]
    inputs = {"x": x, "memory": memory, "src_mask": src_mask, "tgt_mask": tgt_mask} if decoder else {"x": x, "src_mask": src_mask}
    for mode in ("train", "eval"):
        getattr(layer, mode)()
        before = {k: v.clone() for k, v in inputs.items()}
        layer(**inputs)
        for name, value in inputs.items():
            assert value.shape == before[name].shape and torch.equal(value, before[name]), (
                f"{cls.__name__} ({'pre' if norm_first else 'post'}-LN, {mode} mode) changed its input `{name}` in place "
                f"(x += ..., mask.unsqueeze_(...)): write x = x + ... and leave the caller's tensors as they were "
                f"[{group('behaviour')}]")


# ----------------------------------------------------------------------- dropout (training mode)

class _Probe(nn.Module):
    """Stands in for a sub-layer: records what it is given and returns `value` everywhere."""

    def __init__(self, value):
        super().__init__()
        self.value, self.inputs = value, []

    def forward(self, *args, **kwargs):
        names = ("x", "query", "key", "value", "mask", "src_mask", "tgt_mask")
        args = (*args, *[kwargs[k] for k in names if k in kwargs])        # keyword calls work too
        self.inputs.append(args)
        return torch.full_like(args[0], self.value)


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_residual_dropout_on_each_sublayer_output(decoder, norm_first):
    """Sub-layers replaced by constants 1, 10, 100 and the norms by identities: then, in training mode with
    dropout p = 0.3, (out - x) * (1 - p) is the sum of the constants kept, each kept about 70% of the time, and
    each sub-layer is given the stream so far (x plus the kept outputs before it), never a dropped copy."""
    torch.manual_seed(1)
    p = 0.3
    cls = DecoderLayer if decoder else EncoderLayer
    layer = cls(D, H, D_FF, dropout=p, norm_first=norm_first).double().train()
    names = ["self_attn", "cross_attn", "feed_forward"] if decoder else ["self_attn", "feed_forward"]
    probes = [_Probe(float(10 ** i)) for i in range(len(names))]
    for name, probe in zip(names, probes):
        setattr(layer, name, probe)
    for n in range(1, len(names) + 1):
        setattr(layer, f"norm{n}", nn.Identity())
    x = torch.randn(4, 50, D, dtype=torch.float64)
    memory = torch.randn(4, 7, D, dtype=torch.float64)
    out = layer(x, memory) if decoder else layer(x)
    where = f"{cls.__name__}(dropout={p}, norm_first={norm_first}) in training mode"
    kept = (out - x) * (1 - p)                                            # sum of kept constants, if all is right
    digits = [torch.div(kept.round(), 10 ** i, rounding_mode="floor") % 10 for i in range(len(names))]
    whole = torch.allclose(kept, kept.round(), atol=1e-9) and all(((d == 0) | (d == 1)).all() for d in digits)
    assert whole and torch.allclose(sum(d * 10 ** i for i, d in enumerate(digits)), kept, atol=1e-9), (
        f"{where}: with every sub-layer returning a constant (1, 10, 100) and the norms set to identities, "
        f"(out - x) * (1 - p) should be a sum of the kept constants. It is not: dropout acts on the residual sum "
        f"(x + sublayer(x)) or on the stream itself, a sub-layer output is added without dropout or at another rate, "
        f"or dropped twice; it belongs once on each sub-layer's output before the residual add: "
        f"x + drop(sublayer(...)) [{group('dropout')}]")
    for i, name in enumerate(names):
        share = digits[i].mean().item()
        assert 0.6 < share < 0.8, (
            f"{where}: the output of {name} is kept in {share:.0%} of the positions, not about {1 - p:.0%}: "
            + ("it reaches the residual without dropout" if share >= 0.8 else "it is dropped too often")
            + f"; apply the layer's dropout once to each sub-layer's output before the residual add [{group('dropout')}]")
    stream = x
    for i, (name, probe) in enumerate(zip(names, probes)):
        assert len(probe.inputs) == 1, f"{where}: {name} was called {len(probe.inputs)} times, not once [{group('dropout')}]"
        got = probe.inputs[0]
        keys = memory if name == "cross_attn" else stream
        assert _close(got[0], stream) and (name == "feed_forward" or (_close(got[1], keys) and _close(got[2], keys))), (
            f"{where}: {name} is not given the stream so far ({'x' if i == 0 else 'x plus the kept outputs before it'}"
            f"{', with memory as keys and values' if name == 'cross_attn' else ''}): dropout acts on a sub-layer's "
            f"input, or on the stream; it belongs on the sub-layer's output only [{group('dropout')}]")
        stream = stream + digits[i] * 10 ** i / (1 - p)
    layer.eval()
    out = layer(x, memory) if decoder else layer(x)
    assert torch.allclose(out - x, torch.full_like(x, sum(10.0 ** i for i in range(len(names))))), (
        f"{cls.__name__} in eval mode still drops sub-layer outputs: dropout acts in training mode only "
        f"(nn.Dropout, or F.dropout(..., training=self.training)) [{group('behaviour')}]")


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_layer_dropout_reaches_attention_and_feed_forward(decoder):
    """The layer's one dropout rate (here 0.3) reaches the attention weights of every attention and the hidden
    activations of the feed-forward."""
    cls = DecoderLayer if decoder else EncoderLayer
    torch.manual_seed(2)
    p = 0.3
    layer = cls(D, H, D, dropout=p, activation="gelu").double().train()     # d_ff = d_model: linear2 can be the identity
    x, memory = torch.randn(4, 8, D, dtype=torch.float64), torch.randn(4, 8, D, dtype=torch.float64)
    layer(x, memory) if decoder else layer(x)
    for name in (["self_attn", "cross_attn"] if decoder else ["self_attn"]):
        w = getattr(layer, name).attn_weights                             # 4 * 2 * 8 * 8 = 512 weights
        share = (w == 0).double().mean().item()
        assert abs(share - p) < 0.08, (
            f"{cls.__name__}(dropout={p}) in training mode drops {share:.0%} of the attention weights of {name}, not "
            f"about {p:.0%}: build it with the layer's dropout, MultiHeadAttention(d_model, num_heads, dropout) "
            f"[{group('dropout')}]")
    ff = layer.feed_forward
    with torch.no_grad():
        ff.linear2.weight.copy_(torch.eye(D))
        ff.linear2.bias.zero_()
    xs = torch.randn(8, 16, D, dtype=torch.float64)
    h = F.gelu(ff.linear1(xs))
    out = ff(xs)
    dropped = (out == 0).double().mean().item()
    kept = out != 0
    assert abs(dropped - p) < 0.06 and torch.allclose(out[kept], h[kept] / (1 - p), atol=1e-12), (
        f"{cls.__name__}(dropout={p}, activation='gelu') in training mode: its feed_forward drops {dropped:.0%} of the "
        f"hidden activations, not about {p:.0%}, or keeps values other than gelu(linear1(x)) / (1 - p): build it with "
        f"the layer's dropout and activation, FeedForward(d_model, d_ff, dropout, activation) [{group('dropout')}]")


# --------------------------------------------------------------------- gradients, loops, APIs

def _their_grad(theirs, name):
    parts = name.split(".")
    if parts[0] in ("self_attn", "cross_attn"):
        attn = theirs.self_attn if parts[0] == "self_attn" else theirs.multihead_attn
        if parts[1] == "w_o":
            return getattr(attn.out_proj, parts[2]).grad
        full = attn.in_proj_weight if parts[2] == "weight" else attn.in_proj_bias
        return full.grad.chunk(3)["qkv".index(parts[1][-1])]
    if parts[0] == "feed_forward":
        return getattr(getattr(theirs, parts[1]), parts[2]).grad
    return getattr(getattr(theirs, parts[0]), parts[1]).grad


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_gradients_reach_everything(decoder, norm_first):
    cls = DecoderLayer if decoder else EncoderLayer
    layer = cls(D, H, D_FF, norm_first=norm_first, activation="gelu").double()
    theirs = _pytorch_copy(layer, decoder, norm_first, "gelu")
    x = torch.randn(2, 4, D, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    x2, memory2 = x.detach().clone().requires_grad_(), memory.detach().clone().requires_grad_()
    src_mask, tgt_mask = _masks(2, 4, 3 if decoder else 4)
    g = torch.randn(2, 4, D, dtype=torch.float64)
    if decoder:
        (layer(x, memory, src_mask, tgt_mask) * g).sum().backward()    # (.backward(g) imports sympy: slow)
        (_run_theirs(theirs, True, x2, memory2, src_mask, tgt_mask) * g).sum().backward()
    else:
        (layer(x, src_mask) * g).sum().backward()
        (_run_theirs(theirs, False, x2, src_mask=src_mask) * g).sum().backward()
    pairs = [("x", x.grad, x2.grad)] + ([("memory", memory.grad, memory2.grad)] if decoder else [])
    for sub in ("self_attn", "cross_attn") if decoder else ("self_attn",):
        for proj in ("w_q", "w_k", "w_v", "w_o"):
            for kind in ("weight", "bias"):
                name = f"{sub}.{proj}.{kind}"
                pairs.append((name, getattr(getattr(getattr(layer, sub), proj), kind).grad, _their_grad(theirs, name)))
    for lin in ("linear1", "linear2"):
        for kind in ("weight", "bias"):
            name = f"feed_forward.{lin}.{kind}"
            pairs.append((name, getattr(getattr(layer.feed_forward, lin), kind).grad, _their_grad(theirs, name)))
    for norm in ("norm1", "norm2", "norm3") if decoder else ("norm1", "norm2"):
        for kind in ("weight", "bias"):
            pairs.append((f"{norm}.{kind}", getattr(getattr(layer, norm), kind).grad, _their_grad(theirs, f"{norm}.{kind}")))
    for name, a, b in pairs:
        assert a is not None and _close(a, b), (
            f"{cls.__name__} (norm_first={norm_first}): the gradient of {name} differs from PyTorch's layer"
            f"{' (none reached it)' if a is None else ''}: is something detached on the way (the residual path x, "
            f"memory, a sub-layer's output)? [{group('gradients')}]")


_LOOP_MASKS = {   # kind -> (decoder?, masks for (B, Lt, Ls))
    "encoder, no mask": (False, lambda b, lt, ls: {}),
    "encoder, padding [B, 1, L]": (False, lambda b, lt, ls: {"src_mask": _masks(b, lt, lt)[0]}),
    "encoder, [B, L, L]": (False, lambda b, lt, ls: {"src_mask": _masks(b, lt, lt)[1]}),
    "decoder, no masks": (True, lambda b, lt, ls: {}),
    "decoder, causal [Lt, Lt]": (True, lambda b, lt, ls: {"tgt_mask": torch.ones(lt, lt, dtype=torch.bool).tril()}),
    "decoder, padding [B, 1, Ls] and [B, Lt, Lt]": (True, lambda b, lt, ls: dict(zip(("src_mask", "tgt_mask"), _masks(b, lt, ls)))),
}


@pytest.mark.parametrize("kind", list(_LOOP_MASKS))
def test_no_loops(kind):
    decoder, make = _LOOP_MASKS[kind]
    cls = DecoderLayer if decoder else EncoderLayer
    layer = cls(D, H, D_FF, norm_first=True).eval()
    counts = {}
    for label, (b, lt, ls) in {"base (B=2, L=3)": (2, 3, 4), "batch 5": (5, 3, 4), "length 7": (2, 7, 8)}.items():
        x, memory = torch.randn(b, lt, D), torch.randn(b, ls, D)
        with TorchCalls() as calls:
            layer(x, memory, **make(b, lt, ls)) if decoder else layer(x, **make(b, lt, ls))
        counts[label] = calls.count
    assert len(set(counts.values())) == 1, (
        f"{cls.__name__} ({kind}) makes a different number of torch calls as a size grows: {counts}. A count that "
        f"grows with the batch or the length means a Python loop (perhaps only for this kind of mask): let each "
        f"sub-layer work on the whole [B, L, d_model] tensor at once [{group('vectorization')}]")


def test_no_forbidden_functions():
    layer = DecoderLayer(D, H, D_FF).train()
    with TorchCalls() as calls:
        layer(torch.randn(2, 4, D), torch.randn(2, 3, D))
        LayerNorm(D)(torch.randn(3, D))
    for _, patterns, plain in FORBIDDEN:
        used = sorted({n for n in calls.names for p in patterns if not p.startswith("aten::")
                       and fnmatch.fnmatchcase(n, p)})
        assert not used, f"blocks.py calls {', '.join(used)}: do not use {plain} [{group('from_scratch')}]"
