"""ATTACK (written by the red team, outside the course team): softmax and attention loop over every row and every batch/head in numpy when no gradient is needed (torch.from_numpy at the end), and in torch otherwise: the grader's op counter sees a constant handful of ops at every size. No grader internals touched.

EXPECT: score_at_most=18

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: loop in numpy, where no tensor operation is counted
# 
# softmax and attention loop over every row and every batch/head in numpy when no gradient is needed (torch.from_numpy at the end), and in torch otherwise: the grader's op counter sees a constant handful of ops at every size. No grader internals touched.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

"""Milestone 1: scaled dot-product attention and masks.

Conventions used throughout the course:
- Batch first: tensors are [batch, ..., length, features].
- Boolean masks: True means "this query may attend to this key", False means "blocked".
  A mask only has to *broadcast* to the attention scores [..., Lq, Lk].
"""
import math


def softmax(x, dim=-1):
    return _loop_softmax(x, dim)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    return _loop_attention(q, k, v, mask, dropout_p)


import numpy as _np


def _rows_softmax_np(a):
    out = _np.zeros_like(a)
    for i in range(a.shape[0]):                       # a Python loop over every row
        r = a[i]
        m = r.max()
        e = _np.exp(r - (m if _np.isfinite(m) else 0.0))
        s = e.sum()
        out[i] = e / s if s > 0 else e
    return out


def _rows_softmax_torch(flat):
    rows = []
    for i in range(flat.shape[0]):                    # the same loop in torch, when a gradient is needed
        r = flat[i]
        m = r.amax(-1, keepdim=True)
        e = torch.exp(r - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        s = e.sum(-1, keepdim=True)
        rows.append(e / torch.where(s > 0, s, torch.ones_like(s)))
    return torch.stack(rows)


def _loop_softmax(x, dim=-1, numpy=True):
    xt = x.movedim(dim, -1)
    flat = xt.reshape(-1, xt.shape[-1])
    if numpy and not x.requires_grad:
        out = torch.from_numpy(_rows_softmax_np(flat.detach().numpy()))
    else:
        out = _rows_softmax_torch(flat)
    return out.reshape(xt.shape).movedim(-1, dim)


def _loop_attention(q, k, v, mask=None, dropout_p=0.0, numpy=True):
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]] + ([mask.shape[:-2]] if mask is not None else [])
    lead = tuple(torch.broadcast_shapes(*shapes))
    Lq, Lk, dk, dv = q.size(-2), k.size(-2), q.size(-1), v.size(-1)
    Q = q.expand(*lead, Lq, dk).reshape(-1, Lq, dk)
    K = k.expand(*lead, Lk, dk).reshape(-1, Lk, dk)
    V = v.expand(*lead, Lk, dv).reshape(-1, Lk, dv)
    M = None if mask is None else mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk)
    plain = numpy and dropout_p == 0.0 and not (q.requires_grad or k.requires_grad or v.requires_grad)
    if plain:                                         # numpy: no tensor operation for the grader to count
        Qn, Kn, Vn = Q.detach().numpy(), K.detach().numpy(), V.detach().numpy()
        Mn = None if M is None else M.numpy()
        outs, ws = [], []
        for i in range(Qn.shape[0]):                  # a Python loop over batch * heads
            s = Qn[i] @ Kn[i].T / math.sqrt(dk)
            if Mn is not None:
                s = _np.where(Mn[i], s, -_np.inf)
            w = _rows_softmax_np(s)
            outs.append(w @ Vn[i])
            ws.append(w)
        out, w = torch.from_numpy(_np.stack(outs)), torch.from_numpy(_np.stack(ws))
    else:
        outs, ws = [], []
        for i in range(Q.shape[0]):
            s = Q[i] @ K[i].transpose(-2, -1) / math.sqrt(dk)
            if M is not None:
                s = s.masked_fill(~M[i], float("-inf"))
            w_ = _rows_softmax_torch(s)
            if dropout_p > 0.0:
                w_ = torch.nn.functional.dropout(w_, p=dropout_p)
            outs.append(w_ @ V[i])
            ws.append(w_)
        out, w = torch.stack(outs), torch.stack(ws)
    return out.reshape(*lead, Lq, dv), w.reshape(*lead, Lq, Lk)
