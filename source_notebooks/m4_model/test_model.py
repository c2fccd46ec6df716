"""Public tests for milestone 4. Run `pytest -q` in this folder.

A useful subset of the grader's checks: the positional table, the embeddings, stacks and the
whole model's shapes, weight tying, parameter counts, and one parity test of the whole model
against torch.nn.Transformer given the same weights. The hidden checks go further (pre-LN parity,
layer order, dropout, initialisation, padding invariance, float32, gradients, ...).
"""
import math

import pytest
import torch
from torch import nn

from blocks import LayerNorm
from model import (Decoder, Encoder, PositionalEncoding, TokenEmbedding, Transformer,
                   sinusoidal_positional_encoding)

torch.manual_seed(0)


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-7, atol=1e-10)


# --------------------------------------------------------------------------- positional encoding

def test_sinusoidal_table_values():
    pe = sinusoidal_positional_encoding(50, 6)
    assert pe.shape == (50, 6), f"expected [max_len, d_model] = (50, 6), got {tuple(pe.shape)}"
    assert pe.dtype == torch.get_default_dtype(), f"the table should be in the default dtype, got {pe.dtype}"
    assert torch.allclose(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])), "row 0 should be [sin 0, cos 0, ...] = [0, 1, 0, 1, 0, 1]"
    pos, i = 7, 2                                                   # columns 4 (sin) and 5 (cos)
    angle = pos / 10000 ** (2 * i / 6)
    assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6), "PE[pos, 2i] should be sin(pos / 10000^(2i/d_model))"
    assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6), "PE[pos, 2i+1] should be cos(pos / 10000^(2i/d_model))"


def test_sinusoidal_table_rejects_odd_width():
    with pytest.raises(ValueError):
        sinusoidal_positional_encoding(10, 5)


def test_positional_encoding_module():
    pos = PositionalEncoding(4, max_len=10)
    assert "pe" in dict(pos.named_buffers()), "the table should be a buffer named 'pe' (register_buffer)"
    assert "pe" not in dict(pos.named_parameters()), "the table must not be a parameter"
    x = torch.randn(2, 3, 4)
    got = pos(x)
    assert got.shape == (2, 3, 4), f"expected [B, L, d_model] = (2, 3, 4), got {tuple(got.shape)}"
    assert torch.allclose(got, x + sinusoidal_positional_encoding(10, 4)[:3]), "forward should return x + pe[:L]"
    with pytest.raises(ValueError) as info:
        pos(torch.randn(1, 11, 4))
    assert "11" in str(info.value) and "10" in str(info.value), (
        f"the ValueError for L=11 > max_len=10 should name both numbers, got {str(info.value)!r}")


def test_token_embedding_scaled():
    emb = TokenEmbedding(11, 16)
    tokens = torch.tensor([[1, 2, 3], [4, 0, 10]])
    got = emb(tokens)
    assert got.shape == (2, 3, 16), f"expected [B, L, d_model] = (2, 3, 16), got {tuple(got.shape)}"
    assert torch.allclose(got, emb.embedding(tokens) * 4.0), "the embedding should be multiplied by sqrt(d_model) = 4"


# ----------------------------------------------------------------------------------- stacks

def test_stacks_hold_separate_layers_and_final_norm():
    for cls in (Encoder, Decoder):
        for norm_first in (False, True):
            stack = cls(3, 8, 2, 16, norm_first=norm_first)
            assert isinstance(stack.layers, nn.ModuleList) and len(stack.layers) == 3, (
                f"{cls.__name__}.layers should be an nn.ModuleList of num_layers=3 layers")
            assert len({id(layer) for layer in stack.layers}) == 3, f"{cls.__name__}'s layers must be 3 separate objects"
            if norm_first:
                assert isinstance(stack.norm, LayerNorm), f"{cls.__name__}(norm_first=True).norm should be a LayerNorm"
            else:
                assert stack.norm is None, f"{cls.__name__}(norm_first=False).norm should be None"


# ------------------------------------------------------------------------------------ model

def test_forward_shapes_and_api():
    model = Transformer(11, 13, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0, max_len=20)
    src, tgt = torch.randint(0, 11, (3, 7)), torch.randint(0, 13, (3, 5))
    src_mask = torch.ones(3, 1, 7, dtype=torch.bool)
    tgt_mask = torch.ones(5, 5, dtype=torch.bool).tril()
    memory = model.encode(src, src_mask)
    assert memory.shape == (3, 7, 16), f"encode should give memory [B, Ls, d_model] = (3, 7, 16), got {tuple(memory.shape)}"
    out = model.decode(tgt, memory, src_mask, tgt_mask)
    assert out.shape == (3, 5, 16), f"decode should give [B, Lt, d_model] = (3, 5, 16), got {tuple(out.shape)}"
    logits = model(src, tgt, src_mask, tgt_mask)
    assert logits.shape == (3, 5, 13), f"forward should give logits [B, Lt, tgt_vocab] = (3, 5, 13), got {tuple(logits.shape)}"
    assert isinstance(model.generator, nn.Linear) and model.generator.bias is not None, "generator should be nn.Linear with a bias"


def test_tied_embeddings_share_one_parameter():
    model = Transformer(12, 12, d_model=16, num_heads=2, num_layers=1, d_ff=32, tie_embeddings=True)
    w = model.tgt_embed.embedding.weight
    assert model.src_embed.embedding.weight is w and model.generator.weight is w, (
        "with tie_embeddings=True, src_embed.embedding.weight, tgt_embed.embedding.weight and generator.weight "
        "must be the same Parameter object")
    with pytest.raises(ValueError):
        Transformer(12, 13, d_model=16, num_heads=2, num_layers=1, d_ff=32, tie_embeddings=True)


@pytest.mark.parametrize("kwargs, expected", [
    (dict(tie_embeddings=True), 63_119_496),
    (dict(tie_embeddings=True, norm_first=True), 63_121_544),
    (dict(), 101_007_496),
])
def test_parameter_count_of_the_base_model(kwargs, expected):
    model = Transformer(37000, 37000, **kwargs)
    got = sum(p.numel() for p in model.parameters())
    assert got == expected, f"Transformer(37000, 37000, **{kwargs}) should have {expected:,} parameters, got {got:,}"


def test_matches_pytorch_transformer():
    d, h, n, d_ff, V = 16, 2, 2, 32, 11
    mine = Transformer(V, V, d_model=d, num_heads=h, num_layers=n, d_ff=d_ff, dropout=0.0, max_len=50).double()
    theirs = nn.Transformer(d, h, n, n, d_ff, dropout=0.0, batch_first=True, dtype=torch.float64)
    theirs.encoder.norm = None          # post-LN: our stacks have no final norm
    theirs.decoder.norm = None
    with torch.no_grad():
        for my_stack, their_stack in ((mine.encoder, theirs.encoder), (mine.decoder, theirs.decoder)):
            for my_layer, their_layer in zip(my_stack.layers, their_stack.layers):
                pairs = [(my_layer.self_attn, their_layer.self_attn)]
                if hasattr(my_layer, "cross_attn"):
                    pairs.append((my_layer.cross_attn, their_layer.multihead_attn))
                for a, b in pairs:
                    b.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
                    b.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
                    b.out_proj.load_state_dict(a.w_o.state_dict())
                their_layer.linear1.load_state_dict(my_layer.feed_forward.linear1.state_dict())
                their_layer.linear2.load_state_dict(my_layer.feed_forward.linear2.state_dict())
                for name in ("norm1", "norm2", "norm3"):
                    if hasattr(my_layer, name):
                        getattr(my_layer, name).weight.copy_(1 + 0.3 * torch.randn(d))   # make layers differ
                        getattr(their_layer, name).weight.copy_(getattr(my_layer, name).weight)
                        getattr(their_layer, name).bias.copy_(getattr(my_layer, name).bias)
    src = torch.randint(0, V, (3, 7))
    tgt = torch.randint(0, V, (3, 5))
    src_keep = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4], dtype=torch.bool)   # [B, Ls]
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    got = mine(src, tgt, src_keep[:, None, :], causal)
    # nn.Transformer takes embedded inputs: feed it our embeddings + positions, apply our generator.
    emb_src = mine.pos_encoding(mine.src_embed(src))
    emb_tgt = mine.pos_encoding(mine.tgt_embed(tgt))
    want = mine.generator(theirs(emb_src, emb_tgt, tgt_mask=~causal, src_key_padding_mask=~src_keep,
                                 memory_key_padding_mask=~src_keep))
    assert got.shape == (3, 5, V), f"forward should give [B, Lt, V] = (3, 5, {V}), got {tuple(got.shape)}"
    assert _close(got, want), "the model differs from nn.Transformer (post-LN, no final norms) given the same weights"
