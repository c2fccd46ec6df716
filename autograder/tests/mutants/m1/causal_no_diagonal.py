"""Mistake: causal_mask leaves out the diagonal (tril(-1)), so a position cannot attend to itself.

CATCHES: mask_helpers
DIAGNOSIS: causal_no_diagonal

BASE: reference
"""


def causal_mask(size, device=None):
    """[size, size] bool, True on and below the diagonal."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=-1)
