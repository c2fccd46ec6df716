"""Mistake: evaluate runs under torch.no_grad() but never calls model.eval() (dropout stays on).

CATCHES: evaluate
DIAGNOSIS: evaluate_in_train_mode

BASE: reference
"""


def evaluate(model, batches, pad_id):
    """The plain (unsmoothed) cross-entropy per non-pad target token, over all `batches`.

    Args:
        model: the Transformer.
        batches: an iterable of dicts from make_batch.
        pad_id: targets equal to pad_id are not counted.

    Returns:
        a Python float: (sum over every batch and every non-pad target token of -log p(target))
        divided by the number of such tokens. (Not the mean of per-batch means: batches with more
        tokens weigh more.)

    Runs in eval mode (no dropout) without gradients (torch.no_grad()), and leaves the model in
    the mode it was in (train or eval) when called.
    """
    was_training = model.training
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for batch in batches:
                logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
                n = int((batch["tgt_out"] != pad_id).sum())
                if n == 0:
                    continue
                loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id)
                total += loss.item() * n
                count += n
    finally:
        model.train(was_training)
    return total / count if count else math.nan
