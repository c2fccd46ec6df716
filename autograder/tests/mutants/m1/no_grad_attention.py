"""Mistake: attention runs under torch.no_grad() "to save memory", so no gradient reaches q, k, v.

CATCHES: gradients
DIAGNOSIS: graph_cut

BASE: reference
"""


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    with torch.no_grad():
        d_k = q.size(-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = softmax(scores, dim=-1)
        if dropout_p > 0.0:
            weights = torch.nn.functional.dropout(weights, p=dropout_p)
        output = weights @ v
    return output, weights
