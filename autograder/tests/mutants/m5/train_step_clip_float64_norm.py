"""Mistake: train_step clips by hand with the total norm in a float64 buffer of shape [1]; multiplying a
float32 gradient by it gives a float64 tensor, which PyTorch refuses as the gradient of a float32 parameter.
Right on float64 models only.

CATCHES: train_step
DIAGNOSIS: grad_dtype_changed

BASE: reference
"""


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])   # [B, Lt, V]
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        total = torch.zeros(1, dtype=torch.float64)                        # accumulate in double precision
        for p in model.parameters():
            if p.grad is not None:
                total += p.grad.pow(2).sum()
        scale = (clip_norm / (total.sqrt() + 1e-6)).clamp(max=1.0)
        for p in model.parameters():
            if p.grad is not None:
                p.grad = p.grad * scale
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()
