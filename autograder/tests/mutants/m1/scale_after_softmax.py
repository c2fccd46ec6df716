"""Mistake: the softmax weights are divided by sqrt(d_k) (scaling after the softmax, not before).

CATCHES: masking
DIAGNOSIS: scale_after_softmax

BASE: reference
"""


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, with an optional boolean mask.

    Args:
        q: queries [..., Lq, d_k]
        k: keys    [..., Lk, d_k]
        v: values  [..., Lk, d_v]
           The leading dims "..." (batch, heads, ...) are the same for q, k and v.
        mask: None, or a bool tensor broadcastable to [..., Lq, Lk]. True = may attend.
              For example a padding mask [B, 1, Lk] or a causal mask [Lq, Lk].
        dropout_p: probability of dropping each attention weight (0.0: no dropout; callers pass 0.0
                   when not training). Dropped weights become 0 and the kept ones are divided by
                   (1 - dropout_p), as torch.nn.functional.dropout does, so the expected output is
                   unchanged.

    Returns:
        (output, weights):
            output  [..., Lq, d_v], same dtype as q, computed as weights @ v
            weights [..., Lq, Lk], the weights the output was computed with (after dropout, if
                    any). Without dropout each row sums to 1 over the keys it may attend to;
                    blocked entries are exactly 0. A query row with no allowed key gets all-zero
                    weights, so its output row is all zeros (as in
                    torch.nn.functional.scaled_dot_product_attention).

    The inputs are not modified. No Python loops: one batched computation for every leading dim.

    Example (one query, two keys, the second key blocked):
        q = [[1., 0.]], k = [[1., 0.], [0., 1.]], v = [[10.], [20.]], mask = [[True, False]]
        -> weights [[1., 0.]], output [[10.]]
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1)                          # [..., Lq, Lk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))     # blocked keys get -inf
    weights = softmax(scores, dim=-1) / math.sqrt(d_k)        # [..., Lq, Lk]
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ v                                      # [..., Lq, d_v]
    return output, weights
