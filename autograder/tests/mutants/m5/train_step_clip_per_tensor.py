"""Mistake: train_step clips by hand, each parameter's gradient to norm clip_norm on its own.

CATCHES: train_step
DIAGNOSIS: clip_per_tensor

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])   # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is None:
                    continue
                norm = p.grad.norm()
                if norm > clip_norm:
                    p.grad.mul_(clip_norm / (norm + 1e-6))
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()
