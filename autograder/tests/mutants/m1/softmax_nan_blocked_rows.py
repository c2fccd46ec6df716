"""Mistake: softmax subtracts the max without guarding all -inf slices, which then give NaN.

CATCHES: softmax
DIAGNOSIS: softmax_nan_blocked_row

BASE: reference
"""


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`."""
    x_max = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - x_max)
    return e / e.sum(dim=dim, keepdim=True)
