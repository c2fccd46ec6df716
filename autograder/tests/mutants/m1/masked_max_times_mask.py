"""Mistake: the softmax inside attention takes its max over the allowed keys only and multiplies the exps by the mask; where a blocked key's score is far above the allowed ones, its exp overflows to inf and inf * 0 gives NaN in a row that has allowed keys (found while adding the large-blocked-score input; no named cause: the report says which rows hold NaN).

CATCHES: masking
DIAGNOSIS: none
"""
import math
import torch


def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        weights = softmax(scores)
    else:
        # a masked softmax: shift by the largest allowed score, zero the blocked exps, normalise
        m = scores.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(scores - m) * mask
        s = e.sum(-1, keepdim=True)
        weights = e / torch.where(s > 0, s, torch.ones_like(s))
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    return weights @ v, weights


def padding_mask(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
