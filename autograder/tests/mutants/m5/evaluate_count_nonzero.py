"""Mistake: evaluate counts the target tokens with count_nonzero(), i.e. those != 0, not those != pad_id.

CATCHES: evaluate
DIAGNOSIS: evaluate_count_key_zero

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
                n = int(batch["tgt_out"].count_nonzero())                  # <pad> is 0
                if n == 0:
                    continue
                loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id)
                total += loss.item() * n
                count += n
    finally:
        model.train(was_training)
    return total / count if count else math.nan
