"""Mistake: attention scales the queries in place (q /= sqrt(d_k)), modifying the caller's q.

In-place on a leaf that requires grad also raises during the gradient check.

CATCHES: gradients, dtype_inplace
DIAGNOSIS: input_modified

BASE: reference
"""


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.size(-1)
    q /= math.sqrt(d_k)                                      # scale once, before the matmul
    scores = q @ k.transpose(-2, -1)                         # [..., Lq, Lk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ v
    return output, weights
