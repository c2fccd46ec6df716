"""ATTACK (written by the red team, outside the course team): Excludes the Python and PythonTLSSnapshot dispatch keys (torch._C._ExcludeDispatchKeyGuard) and disables torch function handling while the looped, forbidden code runs: Python dispatch modes are skipped.

EXPECT: score_at_most=17
"""
# RED-TEAM ATTACK SUBMISSION: private dispatcher API: ExcludeDispatchKeyGuard(Python)
# 
# Excludes the Python and PythonTLSSnapshot dispatch keys (torch._C._ExcludeDispatchKeyGuard) and disables torch function handling while the looped, forbidden code runs: Python dispatch modes are skipped.
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

def _unseen(fn, *args):
    keys = _torch._C.DispatchKeySet(_torch._C.DispatchKey.Python).add(_torch._C.DispatchKey.PythonTLSSnapshot)
    with _torch._C.DisableTorchFunction(), _torch._C._ExcludeDispatchKeyGuard(keys):
        return fn(*args)


def softmax(x, dim=-1):
    return _unseen(_loop_softmax, x, dim)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    return _unseen(_loop_attention, q, k, v, mask, dropout_p)
