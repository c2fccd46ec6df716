"""Written blind from the stub docstrings: causal_mask ignores its device argument.

CATCHES: mask_helpers
DIAGNOSIS: causal_ignores_device

BASE: reference
"""


def causal_mask(size, device=None):
    """Mask that stops a position from attending to later positions.

    Args:
        size: sequence length L.
        device: where to create the mask (None = the default device).

    Returns:
        bool tensor [L, L]: entry [i, j] is True when j <= i (on and below the diagonal).

    Example:
        >>> causal_mask(3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True,  True,  True]])
    """
    return torch.tril(torch.ones(size, size)).bool()
