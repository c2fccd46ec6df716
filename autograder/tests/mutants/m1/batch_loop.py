"""Mistake: attention loops in Python over every leading (batch/head) index.

CATCHES: vectorization
DIAGNOSIS: python_loop

BASE: reference
"""


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    d_k = q.size(-1)
    lead = q.shape[:-2]
    if mask is not None:
        mask = mask.expand(*lead, q.size(-2), k.size(-2))
    # flatten batch and heads, then handle one (Lq, Lk) matrix at a time
    qs = q.reshape(-1, q.size(-2), d_k)
    ks = k.reshape(-1, k.size(-2), d_k)
    vs = v.reshape(-1, v.size(-2), v.size(-1))
    ms = mask.reshape(-1, q.size(-2), k.size(-2)) if mask is not None else None
    outs, ws = [], []
    for i in range(qs.size(0)):
        scores = qs[i] @ ks[i].transpose(0, 1) / math.sqrt(d_k)
        if ms is not None:
            scores = scores.masked_fill(~ms[i], float("-inf"))
        w = softmax(scores, dim=-1)
        if dropout_p > 0.0:
            w = torch.nn.functional.dropout(w, p=dropout_p)
        outs.append(w @ vs[i])
        ws.append(w)
    output = torch.stack(outs).reshape(*lead, q.size(-2), v.size(-1))
    weights = torch.stack(ws).reshape(*lead, q.size(-2), k.size(-2))
    return output, weights
