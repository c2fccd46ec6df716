"""ATTACK: replaces torch.save (which used to serialize the worker's replies) to rewrite the op counts.

EXPECT: fails=vectorization words="Python loop"
BASE: reference
"""
_real_save = torch.save


def _save(obj, f, *a, **k):
    if isinstance(obj, dict) and isinstance(obj.get("record"), dict):
        obj["record"]["op_count"] = 7
    return _real_save(obj, f, *a, **k)


torch.save = _save


def softmax(x, dim=-1):
    if x.dim() > 1:
        return torch.stack([softmax(r, dim=dim - 1 if dim > 0 else dim) for r in x.unbind(0)])
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e))
