"""Mistake: train_step gives the loss the tokenizer's pad id 0, not its pad_id argument.

CATCHES: train_step
DIAGNOSIS: train_step_pad_zero

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])   # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id=0)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()
