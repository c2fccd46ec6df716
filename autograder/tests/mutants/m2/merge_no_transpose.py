"""Mistake: merge_heads flattens [B, H, L, d_k] to [B, L, H*d_k] without moving the head
dimension back after the length first.

CATCHES: split_merge
DIAGNOSIS: merge_no_transpose

BASE: reference
"""


def merge_heads(x):
    """[B, H, L, d_k] -> [B, L, H*d_k], the inverse of split_heads."""
    B, H, L, d_k = x.shape
    return x.reshape(B, L, H * d_k)          # [B, L, d_model]
