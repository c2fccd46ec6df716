"""Milestone 1: scaled dot-product attention and masks (Grace's attempt)."""
import torch


def softmax(x, dim=-1):
    x_max = x.max(dim=dim, keepdim=True).values
    x_max[torch.isinf(x_max)] = 0.0
    e = torch.exp(x - x_max)
    total = e.sum(dim=dim, keepdim=True)
    total[total == 0] = 1.0
    return e / total


def _attend(q, k, v, mask):
    # q [Lq, d], k [Lk, d], v [Lk, d_v], mask [Lq, Lk] or None
    scores = q @ k.t()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ v, w


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    lead = q.shape[:-2]
    Lq, Lk = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk)
    qf = q.reshape(-1, Lq, q.shape[-1])
    kf = k.reshape(-1, Lk, k.shape[-1])
    vf = v.reshape(-1, Lk, v.shape[-1])
    outputs, weights = [], []
    for b in range(qf.shape[0]):
        o, w = _attend(qf[b], kf[b], vf[b], None if mask is None else mask[b])
        if dropout_p > 0.0:
            w = torch.nn.functional.dropout(w, p=dropout_p)
            o = w @ vf[b]
        outputs.append(o)
        weights.append(w)
    out = torch.stack(outputs).reshape(*lead, Lq, v.shape[-1])
    return out, torch.stack(weights).reshape(*lead, Lq, Lk)


def padding_mask(tokens, pad_id):
    return (tokens != pad_id)[:, None, :]


def causal_mask(size, device=None):
    m = torch.zeros(size, size, dtype=torch.bool, device=device)
    for i in range(size):
        m[i, : i + 1] = True
    return m
