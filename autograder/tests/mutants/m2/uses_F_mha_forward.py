"""Mistake: forward hands its own four projections to PyTorch's
F.multi_head_attention_forward instead of splitting heads and calling milestone 1's attention.

CATCHES: from_scratch
DIAGNOSIS: forbidden_api

BASE: reference
"""
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    """Multi-head attention with four projections: w_q, w_k, w_v (inputs) and w_o (output)."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None   # [B, H, Lq, Lk] after each forward pass

    def forward(self, query, key, value, mask=None):
        """query [B, Lq, d_model], key/value [B, Lk, d_model], bool mask (True = may attend)."""
        B, Lq, d_model = query.shape
        Lk = key.size(1)
        attn_mask = None
        if mask is not None:   # PyTorch wants True = blocked, [B*H, Lq, Lk]
            attn_mask = (~mask.expand(B, Lq, Lk)).repeat_interleave(self.num_heads, dim=0)
        bias = None if self.w_q.bias is None else torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])
        out, weights = F.multi_head_attention_forward(
            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), d_model, self.num_heads,
            torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight]), bias, None, None, False,
            self.dropout, self.w_o.weight, self.w_o.bias, training=self.training, need_weights=True,
            attn_mask=attn_mask, average_attn_weights=False)
        self.attn_weights = weights.detach()                    # [B, H, Lq, Lk]
        return out.transpose(0, 1)                              # [B, Lq, d_model]
