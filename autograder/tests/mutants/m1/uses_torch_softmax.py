"""Mistake: softmax calls torch.softmax instead of being written from basic operations.

CATCHES: from_scratch
DIAGNOSIS: forbidden_api

BASE: reference
"""


def softmax(x, dim=-1):
    """Softmax of `x` along `dim`; an all -inf slice gives zeros."""
    return torch.nan_to_num(torch.softmax(x, dim=dim), nan=0.0)
