"""Mistake: the dropout keep-mask is drawn once with shape [Lq, Lk] and broadcast, so every batch item and every head drops the same weights (each weight should be dropped independently, as F.dropout does).

CATCHES: dropout
DIAGNOSIS: dropout_mask_shared
"""
import math

import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim` (a slice of only -inf gives zeros)."""
    x_max = x.amax(dim=dim, keepdim=True)
    x_max = torch.where(torch.isfinite(x_max), x_max, torch.zeros_like(x_max))
    e = torch.exp(x - x_max)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask and inverted dropout on the weights."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)                                 # [..., Lq, Lk]
    if dropout_p > 0.0:
        lq, lk = weights.shape[-2:]
        # one keep/drop decision per (query, key) pair; it broadcasts over the leading dims
        keep = torch.rand(lq, lk, dtype=weights.dtype, device=weights.device) >= dropout_p
        weights = weights * keep / (1.0 - dropout_p)
    output = weights @ v
    return output, weights


def padding_mask(tokens, pad_id):
    """[B, L] ids -> [B, 1, L] bool, True where the token is real."""
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    """[L, L] bool, True on and below the diagonal."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
