"""Mistake: the class wraps torch's nn.MultiheadAttention (self.mha) instead of building the
four projections w_q, w_k, w_v, w_o and calling milestone 1's attention.

CATCHES: shapes, parity, head_weights, dropout, gradients, vectorization, from_scratch, init_errors
DIAGNOSIS: parameter_names
"""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    """[B, L, d_model] -> [B, H, L, d_k]: head h holds features h*d_k : (h+1)*d_k."""
    B, L, d_model = x.shape
    d_k = d_model // num_heads
    return x.reshape(B, L, num_heads, d_k).transpose(1, 2)   # [B, H, L, d_k]


def merge_heads(x):
    """[B, H, L, d_k] -> [B, L, H*d_k], the inverse of split_heads."""
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)          # [B, L, d_model]


class MultiHeadAttention(nn.Module):
    """Multi-head attention with four projections: w_q, w_k, w_v (inputs) and w_o (output)."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.dropout = dropout
        self.mha = nn.MultiheadAttention(d_model, num_heads, dropout=dropout, bias=bias, batch_first=True)
        self.attn_weights = None   # [B, H, Lq, Lk] after each forward pass

    def forward(self, query, key, value, mask=None):
        """query [B, Lq, d_model], key/value [B, Lk, d_model], bool mask (True = may attend)."""
        attn_mask = None
        if mask is not None:   # PyTorch wants True = blocked, [B*H, Lq, Lk]
            B, Lq, Lk = query.size(0), query.size(1), key.size(1)
            attn_mask = (~mask.expand(B, Lq, Lk)).repeat_interleave(self.num_heads, dim=0)
        out, weights = self.mha(query, key, value, attn_mask=attn_mask, need_weights=True,
                                average_attn_weights=False)
        self.attn_weights = weights.detach()                    # [B, H, Lq, Lk]
        return out
