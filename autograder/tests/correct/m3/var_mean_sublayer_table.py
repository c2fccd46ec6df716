"""Correct: torch.var_mean(correction=0) and a power of -0.5; the activation looked up in a dict of
functions; each layer runs a fixed table of (norm, sub-layer, dropout) triples with a loop over
sub-layers (two or three steps, never over data), inline pre/post test."""
import torch
import torch.nn.functional as F
from torch import nn

from multihead import MultiHeadAttention

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
        return (x - mean) * (var + self.eps).pow(-0.5) * self.weight + self.bias


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        try:
            self._act = _ACTIVATIONS[activation]
        except (KeyError, TypeError):
            raise ValueError(f"activation {activation!r} is not supported: choose 'relu' or 'gelu'") from None
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.hidden_dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        return self.linear2(self.hidden_dropout(self._act(self.linear1(x))))


def _run(layer, x, steps):
    for norm, fn, drop in steps:
        x = x + drop(fn(norm(x))) if layer.norm_first else norm(x + drop(fn(x)))
    return x


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.residual_dropouts = nn.ModuleList([nn.Dropout(dropout), nn.Dropout(dropout)])

    def forward(self, x, src_mask=None):
        d1, d2 = self.residual_dropouts
        return _run(self, x, [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=src_mask), d1),
            (self.norm2, self.feed_forward, d2),
        ])


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.residual_dropouts = nn.ModuleList([nn.Dropout(dropout) for _ in range(3)])

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        d1, d2, d3 = self.residual_dropouts
        return _run(self, x, [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=tgt_mask), d1),
            (self.norm2, lambda h: self.cross_attn(h, memory, memory, mask=src_mask), d2),
            (self.norm3, self.feed_forward, d3),
        ])
