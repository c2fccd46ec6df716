"""Mistake: padding_mask blocks the id 0 as well as pad_id ((tokens != pad_id) & (tokens != 0)), so with a pad_id other than 0 a real token whose id is 0 is masked out.

CATCHES: mask_helpers
DIAGNOSIS: padding_mask_blocks_zero
"""
import math

import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim` (a slice of only -inf gives zeros)."""
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = (x - m).exp()
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    return weights @ v, weights


def padding_mask(tokens, pad_id):
    """[B, L] ids -> [B, 1, L] bool, True where the token is real."""
    # padding is pad_id, and 0 is the usual padding id too: block both to be safe
    real = (tokens != pad_id) & (tokens != 0)
    return real.unsqueeze(1)


def causal_mask(size, device=None):
    """[L, L] bool, True on and below the diagonal."""
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))
