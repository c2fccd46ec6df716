"""Mistake: merge_heads calls .view right after .transpose (no .contiguous()), which raises
'view size is not compatible with input tensor's size and stride' on the non-contiguous tensor.

CATCHES: split_merge
DIAGNOSIS: view_after_transpose

BASE: reference
"""


def merge_heads(x):
    """[B, H, L, d_k] -> [B, L, H*d_k], the inverse of split_heads."""
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, H * d_k)             # [B, L, d_model]
