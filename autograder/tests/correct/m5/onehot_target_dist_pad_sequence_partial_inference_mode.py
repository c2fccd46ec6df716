"""Correct: the loss builds the smoothed target distribution explicitly, q = (1 - e) * F.one_hot(target)
+ e / V, and costs -(q * log p).sum over the classes, then averages with float weights (1 for real
targets, 0 for pads: sum(w * cost) / sum(w)); padded targets are sent to class 0 before one_hot so an
out-of-range pad_id is safe. The tokenizer keeps an id -> text list holding the specials too; batches
padded with nn.utils.rnn.pad_sequence, masks from tril and a broadcast comparison (no attention.py
helpers); noam_lr via math.sqrt; the LambdaLR gets functools.partial(noam_lr, ...); train_step zeros
with model.zero_grad(); evaluate runs under torch.inference_mode, sums its own per-token NLL
(logsumexp - the target logit) and puts back every submodule's own training flag."""
import functools
import math

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.optim.lr_scheduler import LambdaLR


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = range(4)
        chars = sorted({c for text in texts for c in text})
        self.itos = [self.PAD, self.BOS, self.EOS, self.UNK] + chars
        self.stoi = {c: i for i, c in enumerate(self.itos) if i >= 4}
        self.vocab_size = len(self.itos)

    def encode(self, text):
        return [self.stoi[c] if c in self.stoi else self.unk_id for c in text]

    def decode(self, ids):
        if torch.is_tensor(ids):
            ids = ids.tolist()
        pieces = []
        for i in map(int, ids):
            if i == self.eos_id:
                break
            if i != self.pad_id and i != self.bos_id:
                pieces.append(self.itos[i])           # itos[unk_id] is the text "<unk>"
        return "".join(pieces)


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def padded(seqs):
        return pad_sequence([torch.tensor(s, dtype=torch.long) for s in seqs], batch_first=True,
                            padding_value=pad_id)

    src = padded(src_ids)
    tgt_in = padded([[bos_id, *t] for t in tgt_ids])
    tgt_out = padded([[*t, eos_id] for t in tgt_ids])
    Lt = tgt_in.shape[1]
    causal = torch.ones(Lt, Lt, dtype=torch.bool).tril()                  # [Lt, Lt]
    keys = (tgt_in != pad_id).unsqueeze(1)                                # [B, 1, Lt]
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "src_mask": (src != pad_id).unsqueeze(1), "tgt_mask": causal.unsqueeze(0) & keys}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    t = target.reshape(-1)
    log_p = z - torch.logsumexp(z, dim=1, keepdim=True)                  # [N, V]
    if pad_id is None:
        weight = torch.ones(t.shape, dtype=z.dtype)
    else:
        weight = (t != pad_id).to(z.dtype)
    t_safe = torch.where(weight > 0, t, torch.zeros_like(t))
    q = (1.0 - smoothing) * F.one_hot(t_safe, V).to(z.dtype) + smoothing / V   # [N, V], rows sum to 1
    cost = -(q * log_p).sum(dim=1)                                        # [N]
    return (weight * cost).sum() / weight.sum()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = 1 if step < 1 else step
    return factor / math.sqrt(d_model) * min(1.0 / math.sqrt(step), step * warmup_steps ** -1.5)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    schedule = functools.partial(noam_lr, d_model=d_model, warmup_steps=warmup_steps, factor=factor)
    return optimizer, LambdaLR(optimizer, lr_lambda=schedule)


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    model.zero_grad()
    out = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(out, batch["tgt_out"], smoothing=smoothing, pad_id=pad_id)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return float(loss.detach())


def evaluate(model, batches, pad_id):
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    nll_sum, n_tokens = 0.0, 0
    try:
        with torch.inference_mode():
            for batch in batches:
                logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
                V = logits.shape[-1]
                z = logits.reshape(-1, V)
                t = batch["tgt_out"].reshape(-1)
                real = t != pad_id
                z, t = z[real], t[real]
                nll = torch.logsumexp(z, dim=1) - z.gather(1, t.unsqueeze(1)).squeeze(1)
                nll_sum += nll.sum().item()
                n_tokens += int(real.sum())
    finally:
        for m, was in modes:
            m.training = was
    return nll_sum / n_tokens if n_tokens else float("nan")
