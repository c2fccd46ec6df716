"""Mistake: attention computes its output with torch.nn.functional.scaled_dot_product_attention.

CATCHES: from_scratch, dropout
DIAGNOSIS: forbidden_api, output_not_from_weights

BASE: reference
"""
import torch.nn.functional as F


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return output, weights
