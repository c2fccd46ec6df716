"""Mistake: softmax shifts its input in place (x -= max), modifying the caller's tensor.

Inside attention the in-place shift also overwrites a tensor autograd saved for amax's backward.

CATCHES: gradients, dtype_inplace
DIAGNOSIS: input_modified, inplace_breaks_autograd

BASE: reference
"""


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`; an all -inf slice gives zeros."""
    x_max = x.amax(dim=dim, keepdim=True)
    x_max = torch.where(torch.isfinite(x_max), x_max, torch.zeros_like(x_max))
    x -= x_max
    e = torch.exp(x)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
