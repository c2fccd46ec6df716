"""Mistake: evaluate always puts the model back in train mode, even when it was in eval mode.

CATCHES: evaluate
DIAGNOSIS: evaluate_mode_not_restored

BASE: reference
"""


def evaluate(model, batches, pad_id):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
            n = int((batch["tgt_out"] != pad_id).sum())
            if n == 0:
                continue
            loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id)
            total += loss.item() * n
            count += n
    model.train()
    return total / count if count else math.nan
