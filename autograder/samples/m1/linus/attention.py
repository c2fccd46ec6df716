"""Milestone 1: scaled dot-product attention and masks (Linus's attempt)."""
import math

import torch


def softmax(x, dim=-1):
    e = x.exp()
    return e / e.sum(dim, keepdim=True)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))   # hide the masked positions
    attn = softmax(scores, dim=-1)
    if dropout_p:
        attn = torch.nn.functional.dropout(attn, dropout_p)
    return attn @ v, attn


def padding_mask(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
