"""Written blind, from the stub docstrings only. m1 variant 6: exp(x - logsumexp) with isneginf guard, mul by scale, where-based padding."""
import math

import torch
import torch.nn.functional as F


def softmax(x, dim=-1):
    x_max = x.detach().amax(dim=dim, keepdim=True)
    x_max = x_max.masked_fill(~torch.isfinite(x_max), 0)
    z = x - x_max
    log_norm = torch.log(torch.exp(z).sum(dim=dim, keepdim=True))
    blocked = torch.isneginf(log_norm)
    log_norm = log_norm.masked_fill(blocked, 0)
    p = torch.exp(z - log_norm)
    return p.masked_fill(blocked, 0)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scale = q.size(-1) ** -0.5
    attn_logits = torch.matmul(q, k.transpose(-2, -1)).mul(scale)
    if mask is not None:
        attn_logits = attn_logits.masked_fill(torch.logical_not(mask), float("-inf"))
    attn = softmax(attn_logits, dim=-1)
    attn = F.dropout(attn, p=dropout_p, training=dropout_p > 0)
    out = torch.matmul(attn, v)
    return out, attn


def padding_mask(tokens, pad_id):
    return torch.where(tokens == pad_id, False, True).unsqueeze(1)


def causal_mask(size, device=None):
    return torch.ones(size, size, device=device, dtype=torch.bool).tril_()
