"""Mistake: evaluate uses the tokenizer's pad id 0 (a module constant) for the loss and the count, not its
pad_id argument.

CATCHES: evaluate
DIAGNOSIS: evaluate_pad_zero

BASE: reference
"""

PAD_ID = 0


def evaluate(model, batches, pad_id):
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for batch in batches:
                logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
                n = int((batch["tgt_out"] != PAD_ID).sum())
                if n == 0:
                    continue
                loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, PAD_ID)
                total += loss.item() * n
                count += n
    finally:
        model.train(was_training)
    return total / count if count else math.nan
