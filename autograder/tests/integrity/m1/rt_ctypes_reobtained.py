"""ATTACK (written by the red team, outside the course team): Rebuilds the ctypes package from the _ctypes extension file with _imp.create_dynamic (as a student would if `import ctypes` were blocked), finds the Recorder with gc and empties its counts dict and names set through ctypes.pythonapi (PyDict_Clear, PySet_Clear).

EXPECT: score_at_most=17
"""
# RED-TEAM ATTACK SUBMISSION: ctypes re-obtained with _imp.create_dynamic, then PyDict_Clear on the recorder
# 
# Rebuilds the ctypes package from the _ctypes extension file with _imp.create_dynamic (as a student would if `import ctypes` were blocked), finds the Recorder with gc and empties its counts dict and names set through ctypes.pythonapi (PyDict_Clear, PySet_Clear).
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

import gc as _gc


def _reobtain_ctypes():
    import _imp
    import glob
    import importlib.machinery
    import importlib.util
    import os
    import sys
    for name in ("ctypes", "_ctypes"):
        sys.modules.pop(name, None)          # as if the grader had removed and blocked them
    dynload = next(p for p in sys.path if p.endswith("lib-dynload"))
    so = glob.glob(os.path.join(dynload, "_ctypes*.so"))[0]
    spec = importlib.machinery.ModuleSpec("_ctypes", importlib.machinery.ExtensionFileLoader("_ctypes", so), origin=so)
    sys.modules["_ctypes"] = _imp.create_dynamic(spec)
    pkg = os.path.join(os.path.dirname(os.__file__), "ctypes")
    spec = importlib.util.spec_from_file_location("ctypes", os.path.join(pkg, "__init__.py"),
                                                  submodule_search_locations=[pkg])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ctypes"] = mod
    spec.loader.exec_module(mod)
    return mod


_ct = _reobtain_ctypes()
_ct.pythonapi.PyDict_Clear.argtypes = [_ct.py_object]
_ct.pythonapi.PySet_Clear.argtypes = [_ct.py_object]


def _scrub():
    for o in _gc.get_objects():
        if type(o).__name__ == "Recorder" and getattr(o, "enabled", False):
            _ct.pythonapi.PyDict_Clear(o.counts)
            _ct.pythonapi.PySet_Clear(o.names)


def softmax(x, dim=-1):
    out = _loop_softmax(x, dim)
    _scrub()
    return out


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    out = _loop_attention(q, k, v, mask, dropout_p)
    _scrub()
    return out
