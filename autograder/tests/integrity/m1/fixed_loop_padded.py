"""ATTACK (no trick): a loop over the batch that always runs 8 times (the batch is padded to 8), so the number
of operations is the same at every small batch size.

EXPECT: fails=vectorization words="Python loop"
BASE: reference
"""


def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    flat = moved.reshape(-1, moved.size(-1))
    n = flat.size(0)
    padded = torch.zeros(max(8, n), flat.size(-1), dtype=x.dtype)
    padded[:n] = flat
    rows = []
    for i in range(8):
        row = padded[i * ((n + 7) // 8):(i + 1) * ((n + 7) // 8)]
        m = row.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(row - m)
        s = e.sum(-1, keepdim=True)
        rows.append(torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e)))
    out = torch.cat(rows)[:n]
    return out.reshape(moved.shape).movedim(-1, dim)
