"""Mistake: attention casts q, k, v to float64 "for accuracy" and returns float64 for float32 input.

CATCHES: dtype_inplace, dropout
DIAGNOSIS: dtype_changed
"""

import math

import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`; an all -inf slice gives zeros."""
    x_max = x.amax(dim=dim, keepdim=True)
    # an all -inf slice has max -inf: shift it by 0 instead so no NaN appears
    x_max = torch.where(torch.isfinite(x_max), x_max, torch.zeros_like(x_max))
    e = torch.exp(x - x_max)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    q, k, v = q.double(), k.double(), v.double()             # more precision
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ v
    return output, weights


def padding_mask(tokens, pad_id):
    """[B, L] token ids -> [B, 1, L] bool, True where the token is not padding."""
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    """[size, size] bool, True on and below the diagonal."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
