"""Mistake: the loss makes a "safe index" with target.clamp(min=0), thinking of F.cross_entropy's ignore_index
-100: a negative pad_id works, but a pad_id past the last class (V) is still an out-of-range index and gather
raises. No known mistake's own computation raises there and also works with -100, so no cause is named: the
message says which argument holds which value and the rule.

CATCHES: loss
DIAGNOSIS: none
BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    t = target.reshape(-1)
    log_p = z - torch.logsumexp(z, dim=-1, keepdim=True)
    # padding is usually -100 (F.cross_entropy's ignore_index): clamp so gather gets a valid index
    nll = -log_p.gather(-1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    cost = (1 - smoothing) * nll - smoothing * log_p.mean(dim=-1)
    if pad_id is not None:
        real = (t != pad_id).to(cost.dtype)
        return (cost * real).sum() / real.sum()
    return cost.mean()
