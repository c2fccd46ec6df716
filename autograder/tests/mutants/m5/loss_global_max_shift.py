"""Mistake: the loss subtracts one maximum of the whole tensor (logits.max()) before exp, not each row's.

CATCHES: loss
DIAGNOSIS: global_max_shift

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    logits = logits.reshape(-1, V)                                         # [N, V]
    target = target.reshape(-1)                                            # [N]
    shifted = logits - logits.max()                                        # for stability
    log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()    # [N, V]
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
