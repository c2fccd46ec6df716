"""Mistake: train_step steps on the smoothed loss but returns the plain cross-entropy ("the real loss").

CATCHES: train_step
DIAGNOSIS: returns_unsmoothed_loss

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])   # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    with torch.no_grad():                     # report the cross-entropy itself, not the smoothed objective
        reported = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id).item()
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return reported
