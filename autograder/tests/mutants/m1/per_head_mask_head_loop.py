"""Mistake: with a per-head mask [B, H, Lq, Lk] attention masks the scores head by head in a Python loop
("each head has its own mask"); every other mask shape is handled at once, so only that mask shows the loop.

CATCHES: vectorization
DIAGNOSIS: python_loop

BASE: reference
"""


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None and mask.dim() == 4 and mask.size(1) > 1:
        per_head = []
        for h in range(mask.size(1)):                      # each head with its own mask
            per_head.append(scores[:, h].masked_fill(~mask[:, h], float("-inf")))
        scores = torch.stack(per_head, dim=1)
    elif mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    return weights @ v, weights
