"""Correct: split with torch.chunk over features + torch.stack on a new head dim (no loop over a
data dimension: chunk/stack are single ops), merge with torch.cat of the unbound heads;
mask broadcast by indexing mask[..., None, :, :] only when it has a batch dimension."""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)      # [B, H, L, d_k]


def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)                  # [B, L, H*d_k]


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"{d_model} % {num_heads} != 0")
        self.num_heads = num_heads
        self.dropout = dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.num_heads)
        k = split_heads(self.w_k(key), self.num_heads)
        v = split_heads(self.w_v(value), self.num_heads)
        if mask is not None and mask.dim() == 3:
            mask = mask[..., None, :, :]
        out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout * self.training)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(out))
