"""Mistake: the loss gathers the log-probability of every target as it is, padded positions included, and
leaves the padded positions out afterwards: right whenever pad_id is a class (0 or 7), but a pad_id outside
0..V-1 (-100, F.cross_entropy's default ignore_index, or V) is an out-of-range index and gather raises.
(Written by a newcomer who solved m5 blind: it scored 20/20 and passed every public test.)

CATCHES: loss
DIAGNOSIS: pad_target_as_index
BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    logits = logits.reshape(-1, V)                                  # [N, V]
    target = target.reshape(-1)                                     # [N]
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    # -log p(target) at every position; the padded ones are dropped below, so their value does not matter
    nll = -log_probs.gather(1, target.unsqueeze(1)).squeeze(1)      # [N]
    smooth = -log_probs.mean(dim=-1)                                # [N]
    cost = (1 - smoothing) * nll + smoothing * smooth
    if pad_id is None:
        return cost.mean()
    real = target != pad_id
    return cost[real].sum() / real.sum()
