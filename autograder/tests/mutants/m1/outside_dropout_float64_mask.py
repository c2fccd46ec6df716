"""Written blind by an outside tester (from the student folder only): Hand-made dropout mask created as float64 (torch.rand(shape, dtype=torch.float64)): float32 inputs give float64 weights/output when dropout_p > 0.

CATCHES: dropout
DIAGNOSIS: dtype_mismatch

BASE: reference
"""
import torch.nn.functional as F


def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim` (all -inf slices give zeros)."""
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)   # all -inf slice: shift by 0
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == False, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        keep = (torch.rand(weights.shape, dtype=torch.float64) >= dropout_p).double()
        weights = weights * keep / (1.0 - dropout_p)
    output = torch.matmul(weights, v)
    return output, weights


def causal_mask(size, device=None):
    """[L, L] bool, True on and below the diagonal."""
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))
