"""Mistake: the scores are divided by d_k instead of sqrt(d_k).

(The stability group fails it only by ~1e-9 at the default seed, so it is not listed.)

CATCHES: masking
DIAGNOSIS: divide_by_dk

BASE: reference
"""


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / d_k                   # [..., Lq, Lk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)                        # [..., Lq, Lk]
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ v                                     # [..., Lq, d_v]
    return output, weights
