"""Correct: attention computed by hand (einsum scores, masked_fill), dropout written out as a Bernoulli keep
mask scaled by 1/(1 - p) on the weights, in training mode only; split with unflatten/movedim."""
import math

import torch
from torch import nn


def split_heads(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).movedim(2, 1)       # [B, H, L, d_k]


def merge_heads(x):
    return x.movedim(1, 2).flatten(-2)                          # [B, L, H*d_k]


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model = {d_model} cannot be split into num_heads = {num_heads} equal heads")
        self.num_heads = num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.num_heads)
        k = split_heads(self.w_k(key), self.num_heads)
        v = split_heads(self.w_v(value), self.num_heads)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
        if mask is not None:
            if mask.dim() == 3:
                mask = mask[:, None]
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights = torch.nan_to_num(weights, nan=0.0)            # a query with every key blocked
        if self.training and self.dropout > 0:
            keep = torch.rand_like(weights) >= self.dropout
            weights = weights * keep / (1.0 - self.dropout)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(weights @ v))
