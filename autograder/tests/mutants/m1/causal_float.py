"""Mistake: causal_mask returns a float 0/1 tensor (torch.tril(torch.ones(L, L))) instead of bool.

CATCHES: mask_helpers
DIAGNOSIS: mask_not_bool

BASE: reference
"""


def causal_mask(size, device=None):
    """[size, size] mask, 1 on and below the diagonal."""
    return torch.tril(torch.ones(size, size, device=device))
