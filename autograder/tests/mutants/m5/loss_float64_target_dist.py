"""Mistake: the smoothed target distribution is built as a float64 tensor, so float32 logits give a float64
loss (the values are right).

CATCHES: loss
DIAGNOSIS: dtype_changed

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    logits = logits.reshape(-1, V)                                         # [N, V]
    target = target.reshape(-1)                                            # [N]
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)     # [N, V]
    if pad_id is None:
        keep = torch.ones_like(target, dtype=torch.bool)
    else:
        keep = target != pad_id                                            # [N]
    safe_target = torch.where(keep, target, torch.zeros_like(target))
    q = torch.full(log_probs.shape, smoothing / V, dtype=torch.float64)    # the smoothed targets
    q.scatter_add_(1, safe_target.unsqueeze(1), torch.full((len(target), 1), 1.0 - smoothing, dtype=torch.float64))
    cost = -(q * log_probs).sum(dim=-1)                                    # [N]
    cost = torch.where(keep, cost, torch.zeros_like(cost))
    return cost.sum() / keep.sum()
