"""Mistake: the loss takes the log of a (stable) softmax, so probabilities that underflow to 0 give -inf.

CATCHES: loss
DIAGNOSIS: log_of_softmax_underflow

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    logits = logits.reshape(-1, V)                                         # [N, V]
    target = target.reshape(-1)                                            # [N]
    e = (logits - logits.amax(dim=-1, keepdim=True)).exp()
    probs = e / e.sum(dim=-1, keepdim=True)                                # a stable softmax
    log_probs = probs.log()
    if pad_id is None:
        keep = torch.ones_like(target, dtype=torch.bool)
    else:
        keep = target != pad_id                                            # [N]
    safe_target = torch.where(keep, target, torch.zeros_like(target))
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)     # [N]
    smooth = -log_probs.mean(dim=-1)                                       # [N]
    cost = (1.0 - smoothing) * nll + smoothing * smooth                    # [N]
    cost = torch.where(keep, cost, torch.zeros_like(cost))
    return cost.sum() / keep.sum()
