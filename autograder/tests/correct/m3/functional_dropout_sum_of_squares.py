"""Correct: no nn.Dropout anywhere (F.dropout with training=self.training, in the feed-forward and on
each sub-layer output); LayerNorm's variance as a sum of squared deviations divided by d; pre/post
written as two separate methods chosen in forward."""
import torch
import torch.nn.functional as F
from torch import nn

from multihead import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        d = x.shape[-1]
        centred = x - x.sum(dim=-1, keepdim=True) / d
        var = (centred * centred).sum(dim=-1, keepdim=True) / d
        return centred / (var + self.eps).sqrt() * self.weight + self.bias


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation != "relu" and activation != "gelu":
            raise ValueError('activation must be "relu" or "gelu"')
        self.activation = activation
        self.p = dropout
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.linear1(x)
        h = torch.relu(h) if self.activation == "relu" else F.gelu(h, approximate="none")
        h = F.dropout(h, p=self.p, training=self.training)
        return self.linear2(h)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.p = dropout
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def _drop(self, t):
        return F.dropout(t, p=self.p, training=self.training)

    def _pre(self, x, mask):
        n = self.norm1(x)
        x = x + self._drop(self.self_attn(n, n, n, mask))
        return x + self._drop(self.feed_forward(self.norm2(x)))

    def _post(self, x, mask):
        x = self.norm1(x + self._drop(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self._drop(self.feed_forward(x)))

    def forward(self, x, src_mask=None):
        return self._pre(x, src_mask) if self.norm_first else self._post(x, src_mask)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.p = dropout
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)

    def _drop(self, t):
        return F.dropout(t, p=self.p, training=self.training)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.norm_first:
            n = self.norm1(x)
            x = x + self._drop(self.self_attn(n, n, n, tgt_mask))
            x = x + self._drop(self.cross_attn(self.norm2(x), memory, memory, src_mask))
            x = x + self._drop(self.feed_forward(self.norm3(x)))
            return x
        x = self.norm1(x + self._drop(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self._drop(self.cross_attn(x, memory, memory, src_mask)))
        x = self.norm3(x + self._drop(self.feed_forward(x)))
        return x
