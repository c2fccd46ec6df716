"""Mistake: split_heads reshapes to [B, L, d_k, H], so head h takes every H-th feature
(h, h+H, ...) instead of the contiguous block h*d_k:(h+1)*d_k; merge_heads is the standard one.

CATCHES: split_merge
DIAGNOSIS: split_interleaved

BASE: reference
"""


def split_heads(x, num_heads):
    """[B, L, d_model] -> [B, H, L, d_k]: head h holds features h*d_k : (h+1)*d_k."""
    B, L, d_model = x.shape
    d_k = d_model // num_heads
    return x.reshape(B, L, d_k, num_heads).permute(0, 3, 1, 2)   # [B, H, L, d_k]
