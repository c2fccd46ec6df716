"""ATTACK (written by the red team, outside the course team): Same stand-in leak, through the other channel: prints the judge's stand-in source and exits the worker with os._exit, so the feedback's 'Last output of your code' carries it.

EXPECT: absent="def _stand_in_softmax"

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: leak hidden source through the output tail
# 
# Prints hidden source and dies: the judge quotes the last output in the feedback.
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
    import os
    import sys
    sources = _rt_patch_sources()
    if sources:
        print("RTLEAK " + " | ".join(sources)[:560], file=sys.stderr, flush=True)
        os._exit(3)
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
