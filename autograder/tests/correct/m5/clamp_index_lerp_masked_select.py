"""Correct: the loss picks the target's logit by advanced indexing with the targets clamped into 0..V-1 (a pad_id
of -100 or V lands on a valid class, whose cost is dropped anyway), writes -log p as logsumexp minus the logit,
mixes the two costs with torch.lerp ((1 - e) * nll + e * uniform) and keeps the real positions with
masked_select before the sum.
BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    flat_logits = logits.reshape(-1, V)
    flat_target = target.reshape(-1)
    lse = torch.logsumexp(flat_logits, dim=1)                          # [N]
    # where the target is pad_id any class will do (that cost is dropped below): clamp into range
    index = flat_target.clamp(0, V - 1)
    nll = lse - flat_logits[torch.arange(flat_target.numel()), index]   # -log p(target)
    uniform = lse - flat_logits.mean(dim=1)                            # mean over the classes of -log p
    cost = torch.lerp(nll, uniform, smoothing)
    if pad_id is None:
        return cost.mean()
    counted = flat_target.ne(pad_id)
    return cost.masked_select(counted).sum() / counted.sum()
