"""Correct: PyTorch's parameter names in the stub's order (src / mask, tgt / memory_mask), the norms built
with an explicit eps=1e-5, a pre-LN written with one variable `h` reassigned before each sub-layer, and a
feed-forward whose activation is chosen by a bound method."""
import torch
import torch.nn.functional as F
from torch import nn

from multihead import MultiHeadAttention

EPS = 1e-5


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, src):
        centred = src - src.mean(-1, keepdim=True)
        var = centred.square().mean(-1, keepdim=True)
        return self.weight * centred / (var + self.eps).sqrt() + self.bias


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation == "relu":
            self.act = self._relu
        elif activation == "gelu":
            self.act = self._gelu
        else:
            raise ValueError(f"unknown activation {activation!r}: use 'relu' or 'gelu'")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    @staticmethod
    def _relu(h):
        return torch.relu(h)

    @staticmethod
    def _gelu(h):
        return F.gelu(h)

    def forward(self, inputs):
        return self.linear2(self.drop(self.act(self.linear1(inputs))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model, eps=EPS)
        self.norm2 = LayerNorm(d_model, eps=EPS)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, src, mask=None):
        if self.norm_first:
            h = self.norm1(src)
            src = src + self.drop1(self.self_attn(h, h, h, mask))
            h = self.norm2(src)
            return src + self.drop2(self.feed_forward(h))
        src = self.norm1(src + self.drop1(self.self_attn(src, src, src, mask)))
        return self.norm2(src + self.drop2(self.feed_forward(src)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model, eps=EPS)
        self.norm2 = LayerNorm(d_model, eps=EPS)
        self.norm3 = LayerNorm(d_model, eps=EPS)
        self.drop1, self.drop2, self.drop3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, tgt, memory, memory_mask=None, tgt_mask=None):
        if self.norm_first:
            h = self.norm1(tgt)
            tgt = tgt + self.drop1(self.self_attn(h, h, h, tgt_mask))
            h = self.norm2(tgt)
            tgt = tgt + self.drop2(self.cross_attn(h, memory, memory, memory_mask))
            h = self.norm3(tgt)
            return tgt + self.drop3(self.feed_forward(h))
        tgt = self.norm1(tgt + self.drop1(self.self_attn(tgt, tgt, tgt, tgt_mask)))
        tgt = self.norm2(tgt + self.drop2(self.cross_attn(tgt, memory, memory, memory_mask)))
        return self.norm3(tgt + self.drop3(self.feed_forward(tgt)))
