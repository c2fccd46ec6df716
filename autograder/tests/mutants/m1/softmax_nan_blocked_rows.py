"""Mistake: softmax subtracts the max without guarding all -inf slices, which then give NaN.

CATCHES: softmax
DIAGNOSIS: softmax_nan_blocked_row
"""

import math

import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`."""
    x_max = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - x_max)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)        # [..., Lq, Lk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)                        # [..., Lq, Lk]
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ v                                     # [..., Lq, d_v]
    return output, weights


def padding_mask(tokens, pad_id):
    """[B, L] token ids -> [B, 1, L] bool, True where the token is not padding."""
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    """[size, size] bool, True on and below the diagonal."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
