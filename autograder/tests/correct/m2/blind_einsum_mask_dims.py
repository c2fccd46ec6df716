"""Written blind, from the stub docstrings only. m2 variant 4: einsum for moving the head axis, mask[None, None] for 2-D masks."""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    B, L, D = x.shape
    x = x.reshape(B, L, num_heads, D // num_heads)
    return torch.einsum("blhd->bhld", x)


def merge_heads(x):
    B, H, L, d_k = x.shape
    return torch.einsum("bhld->blhd", x).reshape(B, L, H * d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads}")
        self.num_heads = num_heads
        self.dropout = dropout
        self.d_k = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model, bias)
        self.w_k = nn.Linear(d_model, d_model, bias)
        self.w_v = nn.Linear(d_model, d_model, bias)
        self.w_o = nn.Linear(d_model, d_model, bias)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        Q = split_heads(self.w_q(query), self.num_heads)
        K = split_heads(self.w_k(key), self.num_heads)
        V = split_heads(self.w_v(value), self.num_heads)
        if mask is not None:
            if mask.dim() == 2:
                mask = mask[None, None]          # [Lq, Lk] -> [1, 1, Lq, Lk]
            elif mask.dim() == 3:
                mask = mask.unsqueeze(1)         # [B, *, Lk] -> [B, 1, *, Lk]
        drop = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(Q, K, V, mask, drop)
        self.attn_weights = weights.detach()
        out = merge_heads(out)
        return self.w_o(out)
