"""Written blind by an outside tester (from the student folder only): Creates a fresh nn.Linear for the output projection inside forward (random weights every call) instead of using self.w_o.

CATCHES: shapes, parity, dropout, gradients
DIAGNOSIS: w_o_never_used, random_forward

BASE: reference
"""
import math

import torch


def split_heads(x, num_heads):
    """[B, L, d_model] -> [B, H, L, d_k]."""
    B, L, d_model = x.shape
    d_k = d_model // num_heads
    return x.view(B, L, num_heads, d_k).transpose(1, 2)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections w_q, w_k, w_v, w_o."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
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
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)                  # [B, 1, Lq or 1, Lk]
        p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p)
        self.attn_weights = weights.detach()
        merged = merge_heads(out)
        out_proj = nn.Linear(merged.shape[-1], merged.shape[-1]).to(merged.dtype)
        return out_proj(merged)
