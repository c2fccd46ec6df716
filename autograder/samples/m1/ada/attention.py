"""Milestone 1: scaled dot-product attention and masks (Ada's attempt)."""
import math

import torch


def softmax(x, dim=-1):
    # subtract the max so exp never overflows
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    ex = torch.exp(x - m)
    s = ex.sum(dim=dim, keepdim=True)
    return ex / torch.where(s > 0, s, torch.ones_like(s))


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    d_k = q.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        # a very negative number is as good as -inf after exp (the annotated transformer does this)
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        p_attn = torch.nn.functional.dropout(p_attn, p=dropout_p)
    return torch.matmul(p_attn, v), p_attn


def padding_mask(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(-2)


def causal_mask(size, device=None):
    return torch.tril(torch.ones(size, size, device=device)).bool()
