"""Mistake: evaluate leaves the model in eval mode.

CATCHES: evaluate
DIAGNOSIS: evaluate_mode_not_restored

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
                n = int((batch["tgt_out"] != pad_id).sum())
                if n == 0:
                    continue
                loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id)
                total += loss.item() * n
                count += n
    finally:
        pass
    return total / count if count else math.nan
