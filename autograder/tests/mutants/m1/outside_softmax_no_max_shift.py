"""Written blind by an outside tester (from the student folder only): Softmax does not subtract the max (overflows for logits ~1e4); handles all -inf rows with nan_to_num.

CATCHES: stability
DIAGNOSIS: softmax_overflow

BASE: reference
"""
import torch.nn.functional as F


def softmax(x, dim=-1):
    """Softmax of `x` along `dim` (all -inf slices give zeros)."""
    e = torch.exp(x)
    s = e.sum(dim=dim, keepdim=True)
    return torch.nan_to_num(e / s, nan=0.0)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == False, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    output = torch.matmul(weights, v)
    return output, weights


def causal_mask(size, device=None):
    """[L, L] bool, True on and below the diagonal."""
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))
