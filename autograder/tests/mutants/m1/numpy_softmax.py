"""Mistake: softmax is computed with NumPy (via .detach().numpy()), which cuts the autograd graph.

CATCHES: gradients, vectorization
DIAGNOSIS: graph_cut, numpy_work

BASE: reference
"""

import numpy as np
import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`; an all -inf slice gives zeros."""
    a = x.detach().cpu().numpy()
    a_max = a.max(axis=dim, keepdims=True)
    a_max = np.where(np.isfinite(a_max), a_max, 0.0)
    e = np.exp(a - a_max)
    total = e.sum(axis=dim, keepdims=True)
    return torch.from_numpy(e / np.where(total > 0, total, 1.0)).to(x.dtype)
