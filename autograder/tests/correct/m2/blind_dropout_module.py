"""Written blind, from the stub docstrings only. m2 variant 2: reshape/transpose, nn.Dropout module kept as self.dropout, weights re-applied."""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    b, l, d = x.shape
    return x.reshape(b, l, num_heads, -1).transpose(1, 2)


def merge_heads(x):
    b, h, l, dk = x.shape
    return x.transpose(1, 2).reshape(b, l, h * dk)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.dropout = nn.Dropout(dropout)
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        h = self.num_heads
        q = split_heads(self.w_q(query), h)
        k = split_heads(self.w_k(key), h)
        v = split_heads(self.w_v(value), h)
        if mask is not None and mask.ndim >= 3:
            mask = mask.unsqueeze(-3)
        # attention without dropout, then the dropout module on the weights (identity in eval)
        _, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=0.0)
        weights = self.dropout(weights)
        self.attn_weights = weights.detach()
        out = weights @ v
        return self.w_o(merge_heads(out))
