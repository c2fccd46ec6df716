"""Correct: unflatten/flatten for split and merge, mask[:, None] for the head dimension,
projections kept in an nn.ModuleDict-free loop over (name, input) pairs."""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).transpose(-3, -2)


def merge_heads(x):
    return x.transpose(-3, -2).flatten(-2)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
        self.h = num_heads
        self.p = float(dropout)
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        q, k, v = (split_heads(proj(x), self.h)
                   for proj, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        if mask is not None and mask.ndim == 3:
            mask = mask[:, None]
        out, w = scaled_dot_product_attention(q, k, v, mask=mask,
                                              dropout_p=self.p if self.training else 0.0)
        self.attn_weights = w.detach()
        return self.w_o(merge_heads(out))
