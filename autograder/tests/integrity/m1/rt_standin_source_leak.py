"""ATTACK (written by the red team, outside the course team): Gives a wrong softmax on purpose, so later groups send the judge's stand-in softmax (hidden check code) as 'patches' with each request; attention then reads req['patches'] from the worker's frame and raises it back in an exception message.

EXPECT: absent="def _stand_in_softmax"

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: leak the judge's stand-in source
# 
# Reads the stand-in source the judge sends with each request and leaks it.
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
    return x * 0 + 1.0 / x.size(dim)               # wrong on purpose: the judge then sends its stand-in


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    sources = _rt_patch_sources()
    if sources:
        raise RuntimeError("RTLEAK " + " | ".join(s.replace("\n", " ; ") for s in sources)[:480])
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return scores @ v, scores

def _rt_patch_sources():
    import sys
    f = sys._getframe(1)
    while f is not None:
        req = f.f_locals.get("req")
        if isinstance(req, dict) and req.get("patches"):
            return [p["source"] for p in req["patches"]]
        f = f.f_back
    return []
