"""Correct: einsum for both products, torch.where for the mask, where-guarded softmax."""
import math

import torch


def softmax(x, dim=-1):
    m = torch.amax(x, dim=dim, keepdim=True)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    z = torch.exp(x - m)
    s = torch.sum(z, dim=dim, keepdim=True)
    return torch.where(s == 0, torch.zeros_like(z), z / s)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.einsum("...qd,...kd->...qk", q, k) * scale
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0:
        keep = (torch.rand_like(weights) >= dropout_p).to(weights.dtype)
        weights = weights * keep / (1.0 - dropout_p)
    out = torch.einsum("...qk,...kd->...qd", weights, v)
    return out, weights


def padding_mask(tokens, pad_id):
    return tokens.ne(pad_id)[:, None, :]


def causal_mask(size, device=None):
    idx = torch.arange(size, device=device)
    return idx[None, :] <= idx[:, None]
