"""Mistake: softmax always reduces over the last dimension, whatever `dim` says.

CATCHES: softmax
DIAGNOSIS: softmax_ignores_dim

BASE: reference
"""


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`; an all -inf slice gives zeros."""
    x_max = x.amax(dim=-1, keepdim=True)
    x_max = torch.where(torch.isfinite(x_max), x_max, torch.zeros_like(x_max))
    e = torch.exp(x - x_max)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
