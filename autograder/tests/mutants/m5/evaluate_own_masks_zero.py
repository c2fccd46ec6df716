"""Mistake: evaluate builds its own masks from the tokens' truth values (padding is 0) instead of using the
batch's masks.

CATCHES: evaluate
DIAGNOSIS: evaluate_masks_key_on_zero

BASE: reference
"""


def evaluate(model, batches, pad_id):
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for batch in batches:
                src, tgt_in = batch["src"], batch["tgt_in"]
                src_mask = src.bool().unsqueeze(1)
                tgt_mask = causal_mask(tgt_in.size(1)) & tgt_in.bool().unsqueeze(1)
                logits = model(src, tgt_in, src_mask, tgt_mask)
                n = int((batch["tgt_out"] != pad_id).sum())
                if n == 0:
                    continue
                loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id)
                total += loss.item() * n
                count += n
    finally:
        model.train(was_training)
    return total / count if count else math.nan
