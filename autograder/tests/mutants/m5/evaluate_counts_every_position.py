"""Mistake: evaluate weighs each batch's mean by every position of tgt_out (numel), padded ones included.

CATCHES: evaluate
DIAGNOSIS: evaluate_counts_pads

BASE: reference
"""


def evaluate(model, batches, pad_id):
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for batch in batches:
                logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
                n = batch["tgt_out"].numel()
                loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id)
                total += loss.item() * n
                count += n
    finally:
        model.train(was_training)
    return total / count if count else math.nan
