"""Written differently: blocked scores set with torch.where before the softmax (right even when a blocked key's score is far above the allowed ones), dropout with torch.bernoulli over the weights' full shape, padding_mask with ne() and unsqueeze(-2) (a real token 0 with another pad_id stays True)."""
import math

import torch


def softmax(x, dim=-1):
    top = torch.amax(x, dim, keepdim=True)
    top = top.nan_to_num(neginf=0.0)                  # an all -inf slice is shifted by 0
    e = torch.exp(x - top)
    z = torch.sum(e, dim, keepdim=True)
    return e / z.where(z != 0, torch.ones_like(z))


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(k.shape[-1]))
    if mask is not None:
        blocked = torch.full_like(scores, float("-inf"))
        scores = torch.where(mask, scores, blocked)
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        keep = torch.bernoulli(torch.full_like(weights, 1.0 - dropout_p))
        weights = weights * keep / (1.0 - dropout_p)
    return torch.matmul(weights, v), weights


def padding_mask(tokens, pad_id):
    return tokens.ne(pad_id).unsqueeze(-2)


def causal_mask(size, device=None):
    rows = torch.arange(size, device=device)
    return rows[:, None] >= rows[None, :]
