"""Mistake: the smoothed target distribution is built but the cost uses the plain one-hot target.

CATCHES: loss
DIAGNOSIS: smoothing_ignored

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
    safe_target = torch.where(keep, target, torch.zeros_like(target))      # pad_id may be out of range
    one_hot = torch.nn.functional.one_hot(safe_target, V).to(log_probs.dtype)   # [N, V]
    true_dist = (1.0 - smoothing) * one_hot + smoothing / V                # [N, V]
    cost = -(one_hot * log_probs).sum(dim=-1)                              # [N]
    cost = torch.where(keep, cost, torch.zeros_like(cost))
    return cost.sum() / keep.sum()
