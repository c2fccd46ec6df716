"""Correct: projections with F.linear, split/merge with einsum index permutations, the mask
always expanded to a full [B, 1, Lq, Lk], and dropout read from an nn.Dropout submodule."""
import torch
import torch.nn.functional as F
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    B, L, D = x.shape
    return torch.einsum("blhd->bhld", x.view(B, L, num_heads, D // num_heads))


def merge_heads(x):
    B, H, L, d_k = x.shape
    return torch.einsum("bhld->blhd", x).reshape(B, L, H * d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        d_k, rest = divmod(d_model, num_heads)
        if rest != 0:
            raise ValueError("d_model must be a multiple of num_heads "
                             f"(got d_model={d_model}, num_heads={num_heads})")
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_k
        self.w_q = nn.Linear(d_model, d_model, bias)
        self.w_k = nn.Linear(d_model, d_model, bias)
        self.w_v = nn.Linear(d_model, d_model, bias)
        self.w_o = nn.Linear(d_model, d_model, bias)
        self.attn_drop = nn.Dropout(dropout)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        B, Lq, Lk = query.size(0), query.size(1), key.size(1)
        q = split_heads(F.linear(query, self.w_q.weight, self.w_q.bias), self.num_heads)
        k = split_heads(F.linear(key, self.w_k.weight, self.w_k.bias), self.num_heads)
        v = split_heads(F.linear(value, self.w_v.weight, self.w_v.bias), self.num_heads)
        if mask is not None:
            mask = mask.expand(B, Lq, Lk).unsqueeze(1)    # [B, 1, Lq, Lk]
        p = self.attn_drop.p if self.training else 0.0
        context, weights = scaled_dot_product_attention(q, k, v, mask, p)
        self.attn_weights = weights.detach()
        return F.linear(merge_heads(context), self.w_o.weight, self.w_o.bias)
