"""ATTACK (written by the red team, outside the course team): When no gradient is needed, forks (os.fork), computes the looped, forbidden result in the child and sends the numbers back through a pipe (pickled numpy arrays): the parent only makes tensors from data (torch.from_numpy). With a gradient it runs clean code.

EXPECT: score_at_most=17
"""
# RED-TEAM ATTACK SUBMISSION: run the work in a forked child process, bring the numbers back as numpy data
# 
# When no gradient is needed, forks (os.fork), computes the looped, forbidden result in the child and sends the numbers back through a pipe (pickled numpy arrays): the parent only makes tensors from data (torch.from_numpy). With a gradient it runs clean code.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.


# ---- CHEAT CORE (what the student really wrote) ----------------------------------------------
# Python loops over every slice / every leading index, and PyTorch's own softmax and attention,
# all of which the m1 rules forbid (vectorization: -2, from_scratch: -1 -> an honest 17/20).
import math as _math

import torch as _torch
import torch.nn.functional as _F


def _loop_softmax(x, dim=-1):
    xt = x.movedim(dim, -1)
    flat = xt.reshape(-1, xt.shape[-1])
    rows = [_torch.nan_to_num(_torch.softmax(flat[i], -1), nan=0.0) for i in range(flat.shape[0])]
    return _torch.stack(rows).reshape(xt.shape).movedim(-1, dim)


def _loop_attention(q, k, v, mask=None, dropout_p=0.0):
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if mask is not None:
        shapes.append(mask.shape[:-2])
    lead = tuple(_torch.broadcast_shapes(*shapes))
    Lq, Lk, dk, dv = q.size(-2), k.size(-2), q.size(-1), v.size(-1)
    Q = q.expand(*lead, Lq, dk).reshape(-1, Lq, dk)
    K = k.expand(*lead, Lk, dk).reshape(-1, Lk, dk)
    V = v.expand(*lead, Lk, dv).reshape(-1, Lk, dv)
    M = None if mask is None else mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk)
    outs, ws = [], []
    for i in range(Q.shape[0]):                       # a Python loop over batch * heads
        s = Q[i] @ K[i].transpose(-2, -1) / _math.sqrt(dk)
        if M is not None:
            s = s.masked_fill(~M[i], float("-inf"))
        w = _torch.nan_to_num(_torch.softmax(s, -1), nan=0.0)
        if dropout_p > 0.0:
            w = _F.dropout(w, p=dropout_p)
            o = w @ V[i]
        else:                                          # PyTorch's own attention (forbidden)
            o = _F.scaled_dot_product_attention(Q[i:i + 1], K[i:i + 1], V[i:i + 1],
                                                attn_mask=None if M is None else M[i:i + 1])[0]
        outs.append(o)
        ws.append(w)
    return _torch.stack(outs).reshape(*lead, Lq, dv), _torch.stack(ws).reshape(*lead, Lq, Lk)


def padding_mask(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    return _torch.ones(size, size, dtype=_torch.bool, device=device).tril()
# ---- end of the cheat core -------------------------------------------------------------------

def _clean_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = _torch.exp(x - _torch.where(_torch.isfinite(m), m, _torch.zeros_like(m)))
    s = e.sum(dim=dim, keepdim=True)
    return e / _torch.where(s > 0, s, _torch.ones_like(s))


def _clean_attention(q, k, v, mask=None, dropout_p=0.0):
    s = q @ k.transpose(-2, -1) / _math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = _clean_softmax(s, -1)
    if dropout_p > 0.0:
        w = _F.dropout(w, p=dropout_p)
    return w @ v, w


def _needs_graph(args):
    return _torch.is_grad_enabled() and any(isinstance(a, _torch.Tensor) and a.requires_grad for a in args)


def _to_numpy(x):
    return tuple(_to_numpy(v) for v in x) if isinstance(x, tuple) else x.detach().numpy().copy()


def _from_numpy(x):
    return tuple(_from_numpy(v) for v in x) if isinstance(x, tuple) else _torch.from_numpy(x)

import os as _os
import pickle as _pickle


def _unseen(fn, *args):
    r, w = _os.pipe()
    pid = _os.fork()
    if pid == 0:
        try:
            _os.close(r)
            data = _pickle.dumps(_to_numpy(fn(*args)))
            with _os.fdopen(w, "wb") as f:
                f.write(data)
        finally:
            _os._exit(0)
    _os.close(w)
    with _os.fdopen(r, "rb") as f:
        data = f.read()
    _os.waitpid(pid, 0)
    return _from_numpy(_pickle.loads(data))


def softmax(x, dim=-1):
    return _clean_softmax(x, dim) if _needs_graph((x,)) else _unseen(_loop_softmax, x, dim)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    if _needs_graph((q, k, v)):
        return _clean_attention(q, k, v, mask, dropout_p)
    return _unseen(_loop_attention, q, k, v, mask, dropout_p)
