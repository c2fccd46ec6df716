"""Mistake: the loss averages each sequence over its own non-pad positions, then the sequences; a sequence
that is all padding gives 0 / 0 = NaN.

CATCHES: loss
DIAGNOSIS: mean_of_sequence_means

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)     # [..., V]
    if pad_id is None:
        keep = torch.ones_like(target, dtype=torch.bool)
    else:
        keep = target != pad_id
    safe_target = torch.where(keep, target, torch.zeros_like(target))
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)     # [...]
    smooth = -log_probs.mean(dim=-1)
    cost = ((1.0 - smoothing) * nll + smoothing * smooth) * keep
    if cost.dim() < 2:
        return cost.sum() / keep.sum()
    per_sequence = cost.sum(-1) / keep.sum(-1)                             # [B]
    return per_sequence.mean()
