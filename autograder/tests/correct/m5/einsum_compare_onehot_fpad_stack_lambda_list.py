"""Correct: the one-hot rows come from a comparison with torch.arange(V) (no F.one_hot, so a pad_id
outside 0..V-1 just gives an empty row), the smoothed distribution is mixed with torch.lerp towards
the uniform 1 / V, and both the per-position cost and the pad-weighted average are torch.einsum
contractions; logits flattened with flatten(0, -2). make_batch pads each row with F.pad and stacks
them; masks by unsqueeze/expand and the & operator. The tokenizer uses str.join over sorted(set(...))
and a list for id -> text. noam_lr with math.pow; LambdaLR given a one-element list of lambdas;
train_step sets every .grad to None by hand and calls the optimizer from the loss' value kept first;
evaluate collects per-batch sums and counts and divides their totals."""
import math

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        self.chars = sorted(set("".join(list(texts))))
        self.lookup = {c: 4 + k for k, c in enumerate(self.chars)}
        self.vocab_size = 4 + len(self.chars)

    def encode(self, text):
        unk = self.unk_id
        return [self.lookup.get(c, unk) for c in text]

    def decode(self, ids):
        seq = [int(x) for x in (ids.tolist() if torch.is_tensor(ids) else ids)]
        if self.eos_id in seq:
            seq = seq[:seq.index(self.eos_id)]
        words = {self.unk_id: self.UNK}
        return "".join(words.get(i) or self.chars[i - 4] for i in seq if i not in (self.pad_id, self.bos_id))


def _pad_rows(rows, pad_id):
    width = max(len(r) for r in rows)
    return torch.stack([F.pad(torch.as_tensor(r, dtype=torch.long), (0, width - len(r)), value=pad_id)
                        for r in rows])


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    src = _pad_rows(src_ids, pad_id)
    tgt_in = _pad_rows([[bos_id] + list(t) for t in tgt_ids], pad_id)
    tgt_out = _pad_rows([list(t) + [eos_id] for t in tgt_ids], pad_id)
    B, Lt = tgt_in.shape
    lower = torch.tril(torch.ones(Lt, Lt)).bool().unsqueeze(0).expand(B, Lt, Lt)
    visible_keys = tgt_in.ne(pad_id).unsqueeze(1).expand(B, Lt, Lt)
    return dict(src=src, tgt_in=tgt_in, tgt_out=tgt_out, src_mask=src.ne(pad_id).unsqueeze(1),
                tgt_mask=lower & visible_keys)


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.shape[-1]
    z = logits.flatten(0, -2)                                             # [N, V]
    t = target.flatten()                                                  # [N]
    log_p = z - torch.logsumexp(z, -1, keepdim=True)
    hot = (t.unsqueeze(1) == torch.arange(V)).to(z.dtype)                 # [N, V]
    q = torch.lerp(hot, torch.full_like(hot, 1.0 / V), smoothing)         # (1 - e) * hot + e / V
    cost = -torch.einsum("nv,nv->n", q, log_p)                            # [N]
    w = torch.ones_like(cost) if pad_id is None else (t != pad_id).to(cost.dtype)
    return torch.einsum("n,n->", w, cost) / w.sum()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    n = max(step, 1)
    return factor * math.pow(d_model, -0.5) * min(math.pow(n, -0.5), n * math.pow(warmup_steps, -1.5))


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    adam = torch.optim.Adam(model.parameters(), 1.0, (0.9, 0.98), 1e-9)
    return adam, LambdaLR(adam, [lambda s: noam_lr(s, d_model, warmup_steps, factor)])


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    for p in model.parameters():
        p.grad = None
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    value = loss.item()
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler:
        scheduler.step()
    return value


def evaluate(model, batches, pad_id):
    previous = model.training
    model.eval()
    sums, counts = [], []
    with torch.no_grad():
        for b in batches:
            logits = model(b["src"], b["tgt_in"], b["src_mask"], b["tgt_mask"])
            real = b["tgt_out"] != pad_id
            n = int(real.sum())
            if n == 0:
                continue
            sums.append(label_smoothed_cross_entropy(logits, b["tgt_out"], 0.0, pad_id).double() * n)
            counts.append(n)
    model.train(previous)
    if not counts:
        return math.nan
    return (torch.stack(sums).sum() / sum(counts)).item()
