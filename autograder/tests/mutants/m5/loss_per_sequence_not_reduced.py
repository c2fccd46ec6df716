"""Mistake: the loss keeps the [B, Lt] shape and returns one mean per sequence, without the final mean.

CATCHES: loss, from_scratch
DIAGNOSIS: loss_not_scalar

BASE: reference
"""


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    """Cross-entropy with label smoothing, averaged over the non-padding targets.

    With log-probabilities lp = log softmax(logits) over the V classes, each position costs

        (1 - smoothing) * (-lp[target])  +  smoothing * mean over all V classes of (-lp[c])

    (the smoothing mass is spread over all V classes, the correct one included), and the result is
    the mean of that cost over the positions whose target is not pad_id.

    Args:
        logits: [..., V] float32 or float64 (any number of leading dimensions, e.g. [B, Lt, V]).
        target: [...] int64 class ids, the leading shape of logits.
        smoothing: label smoothing epsilon, 0 <= smoothing < 1 (0.1 in the paper).
        pad_id: positions whose target equals pad_id are ignored; None = ignore nothing.

    Returns:
        A scalar tensor (0-dim) in the dtype of logits, differentiable. It equals
        F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=pad_id,
        label_smoothing=smoothing), and like it is NaN when every target is pad_id.

    Numerically stable: logits around 1e4 give finite values (use torch.logsumexp, or subtract the
    row maximum before exp). Write it from scratch: no cross_entropy, nll_loss, log_softmax, softmax
    or kl_div of torch (torch.*, F.* or tensor methods). torch.logsumexp and F.one_hot are allowed.
    The inputs are not modified.
    """
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
