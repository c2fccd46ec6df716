"""Milestone 3's recipes: code the judge sends to the worker as source, to run beside the student's blocks.py.
Each imports what it needs itself; only plain values come back."""
from __future__ import annotations


def recipe_signature(cls_name, method):
    """The parameters of the student's `cls_name.method` as [name, kind, default repr or None], or None when
    they cannot be read (not a plain function, no such class)."""
    import inspect
    import blocks
    fn = getattr(getattr(blocks, cls_name, None), method, None)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return [[p.name, p.kind.name, None if p.default is p.empty else repr(p.default)[:30]] for p in params]
