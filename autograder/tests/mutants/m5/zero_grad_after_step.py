"""Mistake: train_step zeroes the gradients after optimizer.step() ("clean up for the next step") instead of
first, so the first step adds whatever gradients the model already held.

CATCHES: train_step
DIAGNOSIS: zero_grad_after_step

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])   # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()
    return loss.item()
