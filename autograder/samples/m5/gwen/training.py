"""Milestone 5: training (Gwen's attempt)."""
import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from attention import causal_mask, padding_mask


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        chars = sorted(set(c for t in texts for c in t))
        self.stoi = {c: i for i, c in enumerate(chars, start=4)}
        self.itos = {i: c for c, i in self.stoi.items()}
        self.vocab_size = len(chars) + 4

    def encode(self, text):
        return [self.stoi.get(c, self.unk_id) for c in text]

    def decode(self, ids):
        if torch.is_tensor(ids):
            ids = ids.tolist()
        specials = {self.pad_id, self.bos_id, self.eos_id}   # not part of the text
        return "".join(self.UNK if i == self.unk_id else self.itos[i] for i in ids if i not in specials)


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def pad(seqs):
        longest = max(len(s) for s in seqs)
        return torch.tensor([s + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)

    src = pad([list(s) for s in src_ids])
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])
    tgt_out = pad([list(t) + [eos_id] for t in tgt_ids])
    B, Lt = tgt_in.shape
    # the decoder must not look ahead
    tgt_mask = causal_mask(Lt).unsqueeze(0).expand(B, Lt, Lt)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "src_mask": padding_mask(src, pad_id), "tgt_mask": tgt_mask}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    logits = logits.reshape(-1, V)
    target = target.reshape(-1)
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    if pad_id is None:
        keep = torch.ones_like(target, dtype=torch.bool)
    else:
        keep = target != pad_id
    idx = torch.where(keep, target, torch.zeros_like(target))
    nll = -log_probs.gather(1, idx[:, None])[:, 0]
    smooth = -log_probs.mean(dim=-1)
    cost = (1 - smoothing) * nll + smoothing * smooth
    cost = torch.where(keep, cost, torch.zeros_like(cost))
    return cost.sum() / keep.sum()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda s: noam_lr(s, d_model, warmup_steps, factor))
    return optimizer, scheduler


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def evaluate(model, batches, pad_id):
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
            n = int((batch["tgt_out"] != pad_id).sum())
            total += label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id).item() * n
            count += n
    model.train(was_training)
    return total / count
