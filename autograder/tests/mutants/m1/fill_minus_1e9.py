"""Mistake: masked scores are filled with -1e9 instead of -inf, so fully masked rows average v.

Rows with at least one allowed key are exact (exp(-1e9) == 0), so only the fully masked
rows of the masking group reveal it.

CATCHES: masking
DIAGNOSIS: fill_large_negative

BASE: reference
"""


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)        # [..., Lq, Lk]
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = softmax(scores, dim=-1)                        # [..., Lq, Lk]
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ v                                     # [..., Lq, d_v]
    return output, weights
