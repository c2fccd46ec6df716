"""Mistake: split_heads views [B, L, d_model] straight as [B, H, L, d_k] (no transpose), so
each 'head' gets a mix of positions and features instead of one feature block per position.

CATCHES: split_merge
DIAGNOSIS: split_plain_view

BASE: reference
"""


def split_heads(x, num_heads):
    """[B, L, d_model] -> [B, H, L, d_k]: head h holds features h*d_k : (h+1)*d_k."""
    B, L, d_model = x.shape
    d_k = d_model // num_heads
    return x.view(B, num_heads, L, d_k)   # [B, H, L, d_k]
