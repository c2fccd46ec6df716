"""Mistake: train_step clips right after zero_grad, before backward(), when there is nothing to clip yet.

CATCHES: train_step
DIAGNOSIS: step_not_clipped

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])   # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()
