"""Mistake: softmax loops in Python over the slices along `dim`, one row at a time.

CATCHES: vectorization
DIAGNOSIS: python_loop

BASE: reference
"""


def softmax(x, dim=-1):
    """Softmax of `x` along `dim`, one slice at a time; an all -inf slice gives zeros."""
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.size(-1))
    out = []
    for row in rows:
        m = row.max()
        if torch.isinf(m):
            m = torch.zeros_like(m)
        e = torch.exp(row - m)
        s = e.sum()
        out.append(e / s if s > 0 else e)
    return torch.stack(out).reshape(moved.shape).movedim(-1, dim)
