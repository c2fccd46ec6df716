"""Correct: the loss keeps the leading dimensions (no flatten): log Z = m + log sum exp(z - m) with the
row maximum m detached, target logits read with gather on the last dim, the smoothing term from
logits.mean(-1) - log Z, padded costs zeroed with masked_fill and divided by the number of real
targets. make_batch derives tgt_out from tgt_in with torch.roll(-1) (the wrapped <bos> column reset to
<pad>) and writes <eos> at each row's length with scatter; tgt_mask by torch.tril over the batched
[B, Lt, Lt] key-padding mask. The tokenizer decodes with an index-based while loop. The learning-rate
scale factor * d_model^-0.5 is computed once in make_optimizer's lambda; train_step passes
norm_type=2.0 explicitly to clip_grad_norm_; evaluate is decorated with @torch.no_grad()."""
import math

import torch
from torch.optim.lr_scheduler import LambdaLR


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        specials = [self.PAD, self.BOS, self.EOS, self.UNK]
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (specials.index(s) for s in specials)
        distinct = set()
        for text in texts:
            distinct |= set(text)
        self.to_id = {ch: len(specials) + k for k, ch in enumerate(sorted(distinct))}
        self.to_char = dict((i, ch) for ch, i in self.to_id.items())
        self.vocab_size = len(specials) + len(self.to_id)

    def encode(self, text):
        return [self.to_id.get(ch, self.unk_id) for ch in text]

    def decode(self, ids):
        ids = list(ids.tolist()) if isinstance(ids, torch.Tensor) else list(ids)
        out, k = [], 0
        while k < len(ids) and ids[k] != self.eos_id:
            i = ids[k]
            if i == self.unk_id:
                out.append(self.UNK)
            elif i not in (self.pad_id, self.bos_id):
                out.append(self.to_char[i])
            k += 1
        return "".join(out)


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def right_pad(rows, width):
        return torch.tensor([list(r) + [pad_id] * (width - len(r)) for r in rows], dtype=torch.int64)

    src = right_pad(src_ids, max(len(s) for s in src_ids))
    lengths = torch.tensor([len(t) for t in tgt_ids], dtype=torch.int64)
    Lt = int(lengths.max()) + 1
    tgt_in = right_pad([[bos_id] + list(t) for t in tgt_ids], Lt)
    tgt_out = torch.roll(tgt_in, shifts=-1, dims=1)
    tgt_out[:, -1] = pad_id                                   # the <bos> that wrapped around
    tgt_out = tgt_out.scatter(1, lengths.unsqueeze(1), eos_id)
    B = tgt_in.size(0)
    tgt_mask = torch.tril((tgt_in != pad_id).unsqueeze(1).expand(B, Lt, Lt))
    return {"src": src, "src_mask": (src != pad_id).unsqueeze(-2), "tgt_in": tgt_in, "tgt_out": tgt_out,
            "tgt_mask": tgt_mask}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    m = logits.detach().amax(dim=-1, keepdim=True)
    log_z = (m + torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True))).squeeze(-1)   # [...]
    if pad_id is None:
        real = torch.ones(target.shape, dtype=torch.bool)
    else:
        real = target != pad_id
    index = target.masked_fill(~real, 0).unsqueeze(-1)
    lp_target = logits.gather(-1, index).squeeze(-1) - log_z
    lp_mean = logits.mean(dim=-1) - log_z
    cost = -((1 - smoothing) * lp_target + smoothing * lp_mean)
    return cost.masked_fill(~real, 0.0).sum() / real.sum()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        step = 1
    warm = step / warmup_steps ** 1.5
    decay = 1 / step ** 0.5
    return factor * d_model ** -0.5 * (warm if warm < decay else decay)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scale = factor * d_model ** -0.5
    scheduler = LambdaLR(optimizer, lambda s: scale * min(max(s, 1) ** -0.5, max(s, 1) * warmup_steps ** -1.5))
    return optimizer, scheduler


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    inputs = (batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(model(*inputs), batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip_norm, norm_type=2.0)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


@torch.no_grad()
def evaluate(model, batches, pad_id):
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
        n = (batch["tgt_out"] != pad_id).sum().item()
        if n > 0:
            total += n * label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id).item()
            count += n
    model.train(mode=was_training)
    return total / count if count > 0 else math.nan
