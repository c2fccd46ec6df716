"""Correct: LayerNorm with x.var(unbiased=False) and torch.rsqrt; FeedForward keeps an nn.ReLU/nn.GELU
module; both layers route every sub-layer through one helper `_sublayer` that switches on norm_first."""
import torch
from torch import nn

from multihead import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return self.weight * ((x - mu) * torch.rsqrt(var + self.eps)) + self.bias


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        acts = {"relu": nn.ReLU, "gelu": nn.GELU}
        if activation not in acts:
            raise ValueError(f"unknown activation {activation!r}; use one of {sorted(acts)}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.act = acts[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.dropout(self.act(self.linear1(x))))


def _sublayer(x, norm, fn, drop, norm_first):
    """One residual sub-layer: x + drop(fn(norm(x))) (pre-LN) or norm(x + drop(fn(x))) (post-LN)."""
    if norm_first:
        return x + drop(fn(norm(x)))
    return norm(x + drop(fn(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.drop_attn = nn.Dropout(dropout)
        self.drop_ff = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, src_mask=None):
        x = _sublayer(x, self.norm1, lambda h: self.self_attn(h, h, h, src_mask), self.drop_attn, self.norm_first)
        return _sublayer(x, self.norm2, self.feed_forward, self.drop_ff, self.norm_first)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.drop_self = nn.Dropout(dropout)
        self.drop_cross = nn.Dropout(dropout)
        self.drop_ff = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = _sublayer(x, self.norm1, lambda h: self.self_attn(h, h, h, tgt_mask), self.drop_self, self.norm_first)
        x = _sublayer(x, self.norm2, lambda h: self.cross_attn(h, memory, memory, src_mask), self.drop_cross,
                      self.norm_first)
        return _sublayer(x, self.norm3, self.feed_forward, self.drop_ff, self.norm_first)
