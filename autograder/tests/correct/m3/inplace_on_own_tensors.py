"""Correct: in-place operations only on tensors the code created itself (nn.ReLU(inplace=True) on the
hidden layer, += on a fresh residual sum), never on the inputs; the normalisation written as
(x - mean) * (1 / sqrt(var + eps)); masks passed by keyword; the decoder's pre/post switch made
per sub-layer with conditional expressions."""
import torch
import torch.nn.functional as F
from torch import nn

from multihead import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        diff = x - mean
        inv_std = 1.0 / torch.sqrt(diff.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return diff * inv_std * self.weight + self.bias


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation == "relu":
            self.activation = nn.ReLU(inplace=True)
        elif activation == "gelu":
            self.activation = nn.GELU()
        else:
            raise ValueError(f"Got activation={activation!r}, expected 'relu' or 'gelu'.")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        hidden = self.linear1(x)            # a new tensor: safe to modify in place
        hidden = self.activation(hidden)
        return self.linear2(self.dropout(hidden))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.res_drop1 = nn.Dropout(dropout)
        self.res_drop2 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, src_mask=None):
        if self.norm_first:
            n = self.norm1(x)
            h = x + self.res_drop1(self.self_attn(n, n, n, mask=src_mask))
            out = self.res_drop2(self.feed_forward(self.norm2(h)))
            out += h                        # out is our own fresh tensor
            return out
        h = x + self.res_drop1(self.self_attn(x, x, x, mask=src_mask))
        h = self.norm1(h)
        s = h + self.res_drop2(self.feed_forward(h))
        return self.norm2(s)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.res_drop1 = nn.Dropout(dropout)
        self.res_drop2 = nn.Dropout(dropout)
        self.res_drop3 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        pre = self.norm_first
        q = self.norm1(x) if pre else x
        h = x + self.res_drop1(self.self_attn(q, q, q, mask=tgt_mask))
        if not pre:
            h = self.norm1(h)
        q = self.norm2(h) if pre else h
        h = h + self.res_drop2(self.cross_attn(q, memory, memory, mask=src_mask))
        if not pre:
            h = self.norm2(h)
        q = self.norm3(h) if pre else h
        h = h + self.res_drop3(self.feed_forward(q))
        if not pre:
            h = self.norm3(h)
        return h
