"""Mistake: train_step builds its own masks with the tokenizer's pad id 0 instead of using the batch's.

CATCHES: train_step
DIAGNOSIS: train_step_masks_key_on_zero

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    src, tgt_in = batch["src"], batch["tgt_in"]
    src_mask = padding_mask(src, 0)                                        # <pad> is 0
    tgt_mask = causal_mask(tgt_in.size(1)) & padding_mask(tgt_in, 0)
    logits = model(src, tgt_in, src_mask, tgt_mask)                        # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()
