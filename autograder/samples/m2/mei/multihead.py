"""Milestone 2: multi-head attention (Mei's attempt)."""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    B, L, d_model = x.shape
    d_k = d_model // num_heads
    x = x.view(B, L, num_heads, d_k)
    return x.transpose(1, 2)


def merge_heads(x):
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).contiguous().view(B, L, H * d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        assert d_model % num_heads == 0, "d_model has to be divisible by num_heads"
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
        # the mask broadcasts against the scores, so it can go straight in
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=self.dropout)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(out))
