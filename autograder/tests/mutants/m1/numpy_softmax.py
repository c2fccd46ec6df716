"""Mistake: softmax is computed with NumPy (via .detach().numpy()), which cuts the autograd graph.

CATCHES: gradients, vectorization
DIAGNOSIS: graph_cut, numpy_work
"""

import math

import numpy as np
import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`; an all -inf slice gives zeros."""
    a = x.detach().cpu().numpy()
    a_max = a.max(axis=dim, keepdims=True)
    a_max = np.where(np.isfinite(a_max), a_max, 0.0)
    e = np.exp(a - a_max)
    total = e.sum(axis=dim, keepdims=True)
    return torch.from_numpy(e / np.where(total > 0, total, 1.0)).to(x.dtype)


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
