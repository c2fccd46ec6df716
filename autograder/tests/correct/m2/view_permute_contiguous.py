"""Correct: view + permute + contiguous (the Annotated Transformer style), mask.unsqueeze(-3)
for any 3-D mask, self.d_k stored, weights detached via .clone().detach()."""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    batch, length, d_model = x.size()
    return x.view(batch, length, num_heads, d_model // num_heads).permute(0, 2, 1, 3).contiguous()


def merge_heads(x):
    batch, heads, length, d_k = x.size()
    return x.permute(0, 2, 1, 3).contiguous().view(batch, length, heads * d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super(MultiHeadAttention, self).__init__()
        if not isinstance(num_heads, int) or num_heads <= 0 or d_model % num_heads != 0:
            raise ValueError("bad head count: %d heads for d_model %d" % (num_heads, d_model))
        self.d_k = d_model // num_heads
        self.num_heads = num_heads
        self.dropout_p = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(-3)
        query = split_heads(self.w_q(query), self.num_heads)
        key = split_heads(self.w_k(key), self.num_heads)
        value = split_heads(self.w_v(value), self.num_heads)
        x, attn = scaled_dot_product_attention(query, key, value, mask=mask,
                                               dropout_p=self.dropout_p if self.training else 0.0)
        self.attn_weights = attn.clone().detach()
        return self.w_o(merge_heads(x))
