"""Mistake: softmax loops in Python over the slices along `dim`, one row at a time.

CATCHES: vectorization
DIAGNOSIS: python_loop
"""

import math

import torch


def softmax(x, dim=-1):
    """Softmax of `x` along `dim`, one slice at a time; an all -inf slice gives zeros."""
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.size(-1))
    out = []
    for row in rows:
        m = row.max()
        if torch.isinf(m):
            m = torch.zeros_like(m)
        e = torch.exp(row - m)
        s = e.sum()
        out.append(e / s if s > 0 else e)
    return torch.stack(out).reshape(moved.shape).movedim(-1, dim)


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
