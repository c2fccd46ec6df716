"""Written blind, from the stub docstrings only. m1 variant 3: helper functions, masked_fill, manual inverted dropout, keyword arguments."""
import math

import torch

NEG_INF = float("-inf")


def _safe_max(x, dim):
    """Max along dim, with 0 for slices that are all -inf."""
    m = torch.max(x, dim=dim, keepdim=True).values
    return m.masked_fill(torch.isneginf(m), 0.0)


def _safe_divide(num, den):
    return num / torch.where(den > 0, den, torch.ones_like(den))


def softmax(x, dim=-1):
    shifted = x - _safe_max(x, dim=dim)
    numer = shifted.exp()
    return _safe_divide(numer, numer.sum(dim=dim, keepdim=True))


def _scores(q, k):
    return q.matmul(k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)


def _dropout(w, p):
    keep = (torch.rand_like(w) >= p).to(w.dtype)
    return w * keep / (1.0 - p)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = _scores(q=q, k=k)
    if mask is not None:
        scores = scores.masked_fill(mask == False, NEG_INF)  # noqa: E712
    weights = softmax(x=scores, dim=-1)
    if dropout_p:
        weights = _dropout(weights, p=dropout_p)
    output = weights.matmul(v)
    return output, weights


def padding_mask(tokens, pad_id):
    return (tokens != pad_id).view(tokens.shape[0], 1, tokens.shape[1])


def causal_mask(size, device=None):
    return torch.tril(torch.ones((size, size), dtype=torch.bool, device=device))
