"""Mistake: causal_mask uses triu, so True sits on and above the diagonal (future keys allowed).

CATCHES: mask_helpers
DIAGNOSIS: causal_transposed

BASE: reference
"""


def causal_mask(size, device=None):
    """[size, size] bool, True on and below the diagonal."""
    return torch.ones(size, size, dtype=torch.bool, device=device).triu()
