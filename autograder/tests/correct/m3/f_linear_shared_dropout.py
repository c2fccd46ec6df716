"""Correct: the feed-forward calls F.linear with the weights of its nn.Linear submodules instead of
calling them; LayerNorm divides by torch.sqrt(torch.mean(torch.square(...))) with torch.addcmul for the
affine part; one shared nn.Dropout module for every residual branch; torch.add for the sums."""
import torch
import torch.nn.functional as F
from torch import nn

from multihead import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - torch.mean(x, dim=-1, keepdim=True)
        denom = torch.sqrt(torch.mean(torch.square(centred), dim=-1, keepdim=True) + self.eps)
        return torch.addcmul(self.bias, torch.div(centred, denom), self.weight)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in {"relu", "gelu"}:
            raise ValueError("FeedForward: activation should be 'relu' or 'gelu', not " + repr(activation))
        self.use_gelu = activation == "gelu"
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = F.linear(x, self.linear1.weight, self.linear1.bias)
        h = F.gelu(h) if self.use_gelu else h.clamp(min=0)
        return F.linear(self.drop(h), self.linear2.weight, self.linear2.bias)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, src_mask=None):
        if not self.norm_first:
            a = self.norm1(torch.add(x, self.drop(self.self_attn(x, x, x, src_mask))))
            return self.norm2(torch.add(a, self.drop(self.feed_forward(a))))
        q = self.norm1(x)
        a = torch.add(x, self.drop(self.self_attn(q, q, q, src_mask)))
        return torch.add(a, self.drop(self.feed_forward(self.norm2(a))))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if not self.norm_first:
            a = self.norm1(torch.add(x, self.drop(self.self_attn(x, x, x, tgt_mask))))
            b = self.norm2(torch.add(a, self.drop(self.cross_attn(a, memory, memory, src_mask))))
            return self.norm3(torch.add(b, self.drop(self.feed_forward(b))))
        q = self.norm1(x)
        a = torch.add(x, self.drop(self.self_attn(q, q, q, tgt_mask)))
        b = torch.add(a, self.drop(self.cross_attn(self.norm2(a), memory, memory, src_mask)))
        return torch.add(b, self.drop(self.feed_forward(self.norm3(b))))
