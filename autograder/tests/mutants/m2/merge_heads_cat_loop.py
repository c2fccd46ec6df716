"""Mistake: merge_heads concatenates the heads one by one in a Python loop (x[:, h] for each head), so the
number of operations grows with num_heads (right values; the README forbids loops over the heads).

CATCHES: vectorization
DIAGNOSIS: python_loop
"""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    B, L, d_model = x.shape
    return x.reshape(B, L, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x):
    outs = []
    for h in range(x.size(1)):
        outs.append(x[:, h])              # [B, L, d_k], head h
    return torch.cat(outs, dim=-1)        # [B, L, H * d_k]: head h at features h*d_k:(h+1)*d_k


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide d_model ({d_model})")
        self.num_heads = num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        h = self.num_heads
        q, k, v = split_heads(self.w_q(query), h), split_heads(self.w_k(key), h), split_heads(self.w_v(value), h)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(-3)
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=self.dropout if self.training else 0.0)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(out))
