"""Mistake: the loss leaves out the targets equal to 0 (target.bool()) whatever pad_id is, and with
pad_id=None too.

CATCHES: loss
DIAGNOSIS: loss_ignores_zero

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    logits = logits.reshape(-1, V)                                         # [N, V]
    target = target.reshape(-1)                                            # [N]
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)     # [N, V]
    keep = target.bool()                                                   # <pad> is id 0
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)          # [N]
    smooth = -log_probs.mean(dim=-1)                                       # [N]
    cost = (1.0 - smoothing) * nll + smoothing * smooth                    # [N]
    return cost[keep].sum() / keep.sum()
