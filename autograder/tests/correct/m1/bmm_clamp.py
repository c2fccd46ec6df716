"""Correct: flattens the leading dims for bmm, pre-scales q, softmax guarded with clamp_min."""
import torch


def softmax(x, dim=-1):
    peak = x.max(dim=dim, keepdim=True).values
    peak = peak.nan_to_num(neginf=0.0)              # all -inf slice: shift by 0
    e = (x - peak).exp()
    # any slice with a finite entry sums to >= 1 (its max gives exp(0)); an all -inf slice sums to 0
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1.0)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    *lead, lq, d_k = q.shape
    lk, d_v = k.shape[-2], v.shape[-1]
    q3 = (q * d_k ** -0.5).reshape(-1, lq, d_k)
    k3 = k.reshape(-1, lk, d_k)
    v3 = v.reshape(-1, lk, d_v)
    scores = torch.bmm(q3, k3.transpose(1, 2)).reshape(*lead, lq, lk)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, dropout_p)
    n = weights.shape[:-2]
    w3 = weights.reshape(-1, lq, lk)
    # a mask with extra leading dims can make weights bigger than q: broadcast v to match
    v3 = v.expand(*n, lk, d_v).reshape(-1, lk, d_v)
    out = torch.bmm(w3, v3).reshape(*n, lq, d_v)
    return out, weights


def padding_mask(tokens, pad_id):
    return torch.ne(tokens, pad_id).unsqueeze(-2)


def causal_mask(size, device=None):
    return torch.ones(size, size, device=device).tril().bool()
