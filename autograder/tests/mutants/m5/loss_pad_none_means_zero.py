"""Mistake: pad_id=None is taken to mean the tokenizer's <pad>, 0, so targets 0 are left out when nothing
should be.

CATCHES: loss
DIAGNOSIS: loss_ignores_zero

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    if pad_id is None:
        pad_id = 0                                                         # the default padding id
    V = logits.size(-1)
    logits = logits.reshape(-1, V)                                         # [N, V]
    target = target.reshape(-1)                                            # [N]
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)     # [N, V]
    keep = target != pad_id                                                # [N]
    safe_target = torch.where(keep, target, torch.zeros_like(target))
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)     # [N]
    smooth = -log_probs.mean(dim=-1)                                       # [N]
    cost = (1.0 - smoothing) * nll + smoothing * smooth                    # [N]
    cost = torch.where(keep, cost, torch.zeros_like(cost))
    return cost.sum() / keep.sum()
