"""Mistake: softmax exponentiates without subtracting the max, so exp overflows for large logits.

The all -inf guard is kept (0 / 1), so ordinary inputs and masking are still right.

CATCHES: stability
DIAGNOSIS: softmax_overflow

BASE: reference
"""


def softmax(x, dim=-1):
    """Softmax of `x` along `dim`; an all -inf slice gives zeros."""
    e = torch.exp(x)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
