"""Milestone 2: multi-head attention (Tomas's attempt)."""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    B, L, d_model = x.shape
    return x.reshape(B, L, num_heads, d_model // num_heads).permute(0, 2, 1, 3)


def merge_heads(x):
    B, H, L, d_k = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, L, H * d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
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
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        p = self.dropout if self.training else 0.0
        # one head at a time is easier to debug
        head_outputs, head_weights = [], []
        for h in range(self.num_heads):
            m = mask[:, 0] if mask is not None and mask.dim() == 4 else mask
            o, w = scaled_dot_product_attention(q[:, h], k[:, h], v[:, h], m, dropout_p=p)
            head_outputs.append(o)
            head_weights.append(w)
        out = torch.stack(head_outputs, dim=1)
        # average over heads for plotting
        self.attn_weights = torch.stack(head_weights, dim=1).mean(dim=1).detach()
        return self.w_o(merge_heads(out))
