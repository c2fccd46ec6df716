"""Mistake: the loss keeps the [B, Lt] shape and returns one mean per sequence, without the final mean.

CATCHES: loss, from_scratch
DIAGNOSIS: loss_not_scalar

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    logits = logits.reshape(-1, V)                                         # [N, V]
    target_shape = target.shape
    target = target.reshape(-1)                                            # [N]
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)     # [N, V]
    if pad_id is None:
        keep = torch.ones_like(target, dtype=torch.bool)
    else:
        keep = target != pad_id                                            # [N]
    safe_target = torch.where(keep, target, torch.zeros_like(target))      # pad_id may be out of range
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)     # [N]
    smooth = -log_probs.mean(dim=-1)                                       # [N]
    cost = (1.0 - smoothing) * nll + smoothing * smooth                    # [N]
    cost = torch.where(keep, cost, torch.zeros_like(cost))
    return cost.reshape(target_shape).sum(-1) / keep.reshape(target_shape).sum(-1)
