"""Milestone 5: training (Elif's attempt)."""
import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from attention import causal_mask, padding_mask


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        chars = sorted(set("".join(texts)))
        self.stoi = {c: i + 4 for i, c in enumerate(chars)}
        self.itos = {i: c for c, i in self.stoi.items()}
        self.vocab_size = 4 + len(chars)

    def encode(self, text):
        return [self.stoi.get(c, self.unk_id) for c in text]

    def decode(self, ids):
        if torch.is_tensor(ids):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if i == self.pad_id or i == self.bos_id:
                continue
            if i == self.unk_id:
                out.append(self.UNK)
            else:
                out.append(self.itos[i])
        return "".join(out)


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def pad(seqs):
        n = max(len(s) for s in seqs)
        return torch.tensor([list(s) + [pad_id] * (n - len(s)) for s in seqs], dtype=torch.long)

    src = pad(src_ids)
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])
    tgt_out = pad([list(t) + [eos_id] for t in tgt_ids])
    tgt_mask = causal_mask(tgt_in.size(1)) & padding_mask(tgt_in, pad_id)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "src_mask": padding_mask(src, pad_id), "tgt_mask": tgt_mask}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    # like the Annotated Transformer: build the smoothed target distribution, then -sum(q * log p)
    V = logits.size(-1)
    logits = logits.reshape(-1, V)
    target = target.reshape(-1)
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    true_dist = torch.zeros_like(log_probs)
    if pad_id is None:
        true_dist.fill_(smoothing / (V - 1))          # the right class is not one of the "others"
    else:
        true_dist.fill_(smoothing / (V - 2))          # neither the right class nor <pad> get smoothing
        true_dist[:, pad_id] = 0
    safe = target.clone()
    if pad_id is not None:
        safe[target == pad_id] = 0
    true_dist.scatter_(1, safe.unsqueeze(1), 1.0 - smoothing)
    cost = -(true_dist * log_probs).sum(dim=-1)
    if pad_id is None:
        return cost.mean()
    keep = target != pad_id
    return cost[keep].sum() / keep.sum()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps, factor))
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
    losses = []
    with torch.no_grad():
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
            losses.append(label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id).item())
    model.train(was_training)
    return sum(losses) / len(losses)
