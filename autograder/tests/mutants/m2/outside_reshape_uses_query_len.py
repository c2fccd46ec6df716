"""Written blind by an outside tester (from the student folder only): Splits heads inline in forward with the query's length L for k and v too (fails when Lq != Lk).

CATCHES: shapes, parity, head_weights, gradients
DIAGNOSIS: reshape_wrong_size

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
        B, L, _ = query.shape
        H, d_k = self.num_heads, self.d_k
        q = self.w_q(query).view(B, L, H, d_k).transpose(1, 2)
        k = self.w_k(key).view(B, L, H, d_k).transpose(1, 2)
        v = self.w_v(value).view(B, L, H, d_k).transpose(1, 2)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(out))
