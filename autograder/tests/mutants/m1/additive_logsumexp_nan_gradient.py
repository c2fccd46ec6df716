"""Mistake: additive float mask (0 / -inf) and a logsumexp softmax whose -inf normaliser is replaced by 0
after it is computed: the values are right, but for a query whose keys are all blocked the NaN of
logsumexp's backward reaches q and k through the addition. (Written as a correct variant by an outside
helper; the check of a fully masked row's gradients, added after a newcomer found this kind, showed it.)

CATCHES: gradients
DIAGNOSIS: nan_gradient_blocked_row
"""
import math

import torch


def softmax(x, dim=-1):
    # log-normaliser of each slice; an all -inf slice has lse = -inf, replaced by 0 so exp gives 0
    lse = torch.logsumexp(x, dim=dim, keepdim=True)
    lse = lse.masked_fill(torch.isinf(lse), 0.0)
    return torch.exp(x - lse)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    d_k = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d_k)
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        bias = bias.masked_fill(mask.logical_not(), float("-inf"))
        scores = scores + bias
    weights = softmax(scores, dim=-1)
    if dropout_p:
        weights = torch.nn.functional.dropout(weights, p=dropout_p, training=True)
    return torch.matmul(weights, v), weights


def padding_mask(tokens, pad_id):
    return (tokens != pad_id).view(tokens.size(0), 1, tokens.size(1))


def causal_mask(size, device=None):
    full = torch.ones(size, size, dtype=torch.bool, device=device)
    return ~torch.triu(full, diagonal=1)
