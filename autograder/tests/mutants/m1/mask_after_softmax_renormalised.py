"""Mistake: the mask is applied after an unmasked softmax and the rows are renormalised (weights = softmax(scores) * mask, divided by their sum): right in most cases, but where a blocked key's score dominates, the allowed keys' weights underflow to 0 and the row comes out all zeros instead of a softmax over the allowed keys.

CATCHES: masking
DIAGNOSIS: mask_after_softmax_renormalised
"""
import math

import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim` (a slice of only -inf gives zeros)."""
    biggest = x.amax(dim=dim, keepdim=True)
    biggest = torch.where(torch.isinf(biggest), torch.zeros_like(biggest), biggest)
    e = torch.exp(x - biggest)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v; blocked keys get weight 0 and each row is renormalised over the others."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)            # [..., Lq, Lk]
    weights = softmax(scores, dim=-1)
    if mask is not None:
        # Zero the blocked keys, then rescale what is left so every row sums to 1 again
        # (a row with no allowed key sums to 0: leave it at 0).
        weights = weights * mask
        row_sum = weights.sum(dim=-1, keepdim=True)
        weights = weights / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    return weights @ v, weights


def padding_mask(tokens, pad_id):
    """[B, L] ids -> [B, 1, L] bool, True where the token is real."""
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    """[L, L] bool, True on and below the diagonal."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
