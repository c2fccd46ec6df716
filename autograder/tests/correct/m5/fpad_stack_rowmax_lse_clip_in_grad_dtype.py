"""Correct, written for another pad id than 0 and for float32 models: make_batch pads each sequence with
F.pad(value=pad_id) and stacks them, masks with .ne(pad_id) and a tril of ones; the loss subtracts each row's
own max, takes log(sum(exp)) of the shifted row, leaves the padded positions out with masked_fill and counts
the rest, every new tensor in the logits' dtype; the LambdaLR gets `factor` through a default argument;
train_step clips by hand (total norm accumulated in float64, the scale cast to each gradient's dtype before
multiplying in place) and passes pad_id by keyword; evaluate counts with .ne(pad_id) under
torch.set_grad_enabled(False) and switches every submodule with model.eval().

BASE: reference
"""
import torch.nn.functional as F


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def stack(rows):
        width = max(len(r) for r in rows)
        return torch.stack([F.pad(torch.tensor(r, dtype=torch.long), (0, width - len(r)), value=pad_id)
                            for r in rows])

    src = stack([list(s) for s in src_ids])
    tgt_in = stack([[bos_id, *t] for t in tgt_ids])
    tgt_out = stack([[*t, eos_id] for t in tgt_ids])
    Lt = tgt_in.size(1)
    lower = torch.ones(Lt, Lt).tril().bool()
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": src.ne(pad_id)[:, None, :],
            "tgt_mask": lower[None] & tgt_in.ne(pad_id)[:, None, :]}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    t = target.reshape(-1)
    shifted = z - z.max(dim=1, keepdim=True).values
    log_p = shifted - shifted.exp().sum(dim=1, keepdim=True).log()
    padded = torch.zeros_like(t, dtype=torch.bool) if pad_id is None else t.eq(pad_id)
    picked = log_p.gather(1, t.masked_fill(padded, 0)[:, None]).squeeze(1)
    cost = -(1 - smoothing) * picked - smoothing * log_p.sum(dim=1) / V
    cost = cost.masked_fill(padded, 0.0)
    return cost.sum() / (~padded).sum().to(cost.dtype)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    return optimizer, LambdaLR(optimizer, lambda s, f=factor: noam_lr(s, d_model, warmup_steps, factor=f))


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing=smoothing, pad_id=pad_id)
    loss.backward()
    if clip_norm is not None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        total = torch.zeros((), dtype=torch.float64)
        for g in grads:
            total = total + g.double().pow(2).sum()
        scale = (clip_norm / (total.sqrt() + 1e-6)).clamp(max=1.0)
        with torch.no_grad():
            for g in grads:
                g.mul_(scale.to(g.dtype))
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def evaluate(model, batches, pad_id):
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    with torch.set_grad_enabled(False):
        for batch in batches:
            n = int(batch["tgt_out"].ne(pad_id).sum())
            if n:
                logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
                total += n * float(label_smoothed_cross_entropy(logits, batch["tgt_out"], pad_id=pad_id))
                tokens += n
    model.train(was_training)
    return total / tokens if tokens else math.nan
