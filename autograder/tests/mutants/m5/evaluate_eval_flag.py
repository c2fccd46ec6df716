"""Mistake: evaluate sets model.training = False (and back) instead of calling model.eval(): the submodules,
dropout included, stay in training mode.

CATCHES: evaluate
DIAGNOSIS: evaluate_in_train_mode

BASE: reference
"""


def evaluate(model, batches, pad_id):
    was_training = model.training
    model.training = False
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
        model.training = was_training
    return total / count if count else math.nan
