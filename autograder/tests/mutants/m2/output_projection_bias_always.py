"""Mistake: the three input projections come from one helper that passes `bias` on, but the output
projection is written separately as nn.Linear(d_model, d_model), so with bias=False w_o keeps a bias.

CATCHES: parity
DIAGNOSIS: bias_ignored
"""
import math

import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    batch, length, width = x.shape
    return x.view(batch, length, num_heads, width // num_heads).permute(0, 2, 1, 3)


def merge_heads(x):
    batch, heads, length, d_k = x.shape
    return x.permute(0, 2, 1, 3).reshape(batch, length, heads * d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
        self.num_heads = num_heads
        self.dropout = dropout

        def projection():
            return nn.Linear(d_model, d_model, bias=bias)

        self.w_q, self.w_k, self.w_v = projection(), projection(), projection()
        self.w_o = nn.Linear(d_model, d_model)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.num_heads)
        k = split_heads(self.w_k(key), self.num_heads)
        v = split_heads(self.w_v(value), self.num_heads)
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=self.dropout if self.training else 0.0)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(out))
