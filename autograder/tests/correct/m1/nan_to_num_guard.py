"""Correct: plain max-shift softmax whose all -inf slices are repaired with nan_to_num afterwards."""
import math

import torch


def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))   # all -inf slice: exp(nan) = nan
    return torch.nan_to_num(e / e.sum(dim=dim, keepdim=True), nan=0.0)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q.matmul(k.mT) / math.sqrt(k.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), -math.inf)
    weights = softmax(scores)
    weights = torch.nn.functional.dropout(weights, p=dropout_p, training=dropout_p > 0)
    return weights.matmul(v), weights


def padding_mask(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    return torch.tril(torch.ones((size, size), dtype=torch.bool, device=device))
