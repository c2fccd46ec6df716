"""Written blind by an outside tester (from the student folder only): Transposes k with k.transpose(1, 2): right for [B, L, d] only, wrong for 2-D or 4-D inputs.

CATCHES: shapes, masking, parity, gradients, dropout
DIAGNOSIS: transpose_1_2

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
    scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(d_k)
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
