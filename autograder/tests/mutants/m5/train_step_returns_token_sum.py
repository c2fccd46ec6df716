"""Mistake: train_step returns the batch's total loss (mean times the number of target tokens), not the mean.

CATCHES: train_step
DIAGNOSIS: wrong_loss_returned

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])   # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    n_tokens = int((batch["tgt_out"] != pad_id).sum())
    return loss.item() * n_tokens                                          # the caller divides by its token count
