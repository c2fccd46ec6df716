"""Milestone 5: training (Felix's attempt)."""
import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from attention import causal_mask, padding_mask


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id = 0
        self.bos_id = 1
        self.eos_id = 2
        self.unk_id = 3
        vocab = set()
        for t in texts:
            vocab.update(t)
        self.char2id = {}
        self.id2char = {}
        for i, c in enumerate(sorted(vocab)):
            self.char2id[c] = i + 4
            self.id2char[i + 4] = c
        self.vocab_size = len(self.char2id) + 4

    def encode(self, text):
        return [self.char2id.get(c, self.unk_id) for c in text]

    def decode(self, ids):
        s = ""
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            elif i == self.unk_id:
                s += self.UNK
            elif i in self.id2char:
                s += self.id2char[i]
        return s


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    B = len(src_ids)
    Ls = max(len(s) for s in src_ids)
    Lt = max(len(t) for t in tgt_ids) + 1
    src = torch.full((B, Ls), pad_id, dtype=torch.long)
    tgt_in = torch.full((B, Lt), pad_id, dtype=torch.long)
    tgt_out = torch.full((B, Lt), pad_id, dtype=torch.long)
    for b in range(B):
        s, t = src_ids[b], tgt_ids[b]
        src[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        tgt_in[b, :len(t) + 1] = torch.tensor([bos_id] + t, dtype=torch.long)
        tgt_out[b, :len(t) + 1] = torch.tensor(t + [eos_id], dtype=torch.long)
    src_mask = padding_mask(src, pad_id)
    tgt_mask = causal_mask(Lt).unsqueeze(0) & padding_mask(tgt_in, pad_id)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": src_mask, "tgt_mask": tgt_mask}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    x = logits.reshape(-1, V)
    y = target.reshape(-1)
    lp = x - torch.logsumexp(x, dim=1, keepdim=True)
    if pad_id is None:
        mask = torch.ones_like(y, dtype=torch.bool)
    else:
        mask = y != pad_id
    y = torch.where(mask, y, torch.zeros_like(y))
    nll = -lp.gather(1, y.unsqueeze(1)).squeeze(1)
    smooth = -lp.mean(dim=1)
    loss = (1 - smoothing) * nll + smoothing * smooth
    loss = loss * mask
    return loss.sum() / mask.sum()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        step = 1
    return factor * (d_model ** -0.5) * min(step ** -0.5, step * warmup_steps ** -1.5)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    # LambdaLR counts from 0 but the paper counts steps from 1
    scheduler = LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, warmup_steps, factor))
    return optimizer, scheduler


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    out = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(out, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler:
        scheduler.step()
    return loss.item()


def evaluate(model, batches, pad_id):
    mode = model.training
    model.eval()
    total_loss = 0.0
    total_tokens = 0
    with torch.no_grad():
        for batch in batches:
            out = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
            n = (batch["tgt_out"] != pad_id).sum().item()
            total_loss += label_smoothed_cross_entropy(out, batch["tgt_out"], 0.0, pad_id).item() * n
            total_tokens += n
    model.train(mode)
    return total_loss / total_tokens
