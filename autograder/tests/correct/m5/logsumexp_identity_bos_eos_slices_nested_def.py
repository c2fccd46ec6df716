"""Correct: the loss never forms log-probabilities: since log p_c = z_c - logsumexp(z), the cost is
logsumexp(z) - (1 - e) * z[target] - e * mean(z), the target logit read with torch.take_along_dim;
padded positions removed by boolean indexing and the result is .mean() of what is left (an empty mean
is NaN, as required). make_batch pads <bos> + target + <eos> once to Lt + 1 and slices it
(tgt_in = [:, :-1] with the <eos> turned back into <pad>, tgt_out = [:, 1:]), masks from the
attention.py helpers combined with torch.logical_and; noam_lr written as
step^-0.5 * min(1, (step / warmup)^1.5); the LambdaLR gets a nested def; train_step zeros with
set_to_none and clips only the parameters that have gradients; evaluate keeps tensor sums under
torch.set_grad_enabled(False) and divides once at the end."""
import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from attention import causal_mask, padding_mask


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        seen = set()
        for text in texts:
            seen.update(text)
        self.vocab = {}
        for ch in sorted(seen):
            self.vocab[ch] = len(self.vocab) + 4
        self.inverse = {i: ch for ch, i in self.vocab.items()}
        self.vocab_size = len(self.vocab) + 4

    def encode(self, text):
        ids = []
        for ch in text:
            ids.append(self.vocab.get(ch, self.unk_id))
        return ids

    def decode(self, ids):
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        text = ""
        for i in ids:
            if i == self.eos_id:
                return text
            if i == self.unk_id:
                text += self.UNK
            elif i in self.inverse:
                text += self.inverse[i]
        return text


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    Ls = max(len(s) for s in src_ids)
    src = torch.tensor([s + [pad_id] * (Ls - len(s)) for s in map(list, src_ids)], dtype=torch.long)
    full_len = max(len(t) for t in tgt_ids) + 2
    full = torch.tensor([[bos_id] + list(t) + [eos_id] + [pad_id] * (full_len - len(t) - 2) for t in tgt_ids],
                        dtype=torch.long)                            # [B, Lt + 1]
    tgt_in = full[:, :-1].masked_fill(full[:, :-1] == eos_id, pad_id)   # targets hold no special tokens
    tgt_out = full[:, 1:].clone()
    Lt = tgt_in.size(1)
    tgt_mask = torch.logical_and(causal_mask(Lt).unsqueeze(0), padding_mask(tgt_in, pad_id))
    return {"src": src, "tgt_in": tgt_in.contiguous(), "tgt_out": tgt_out,
            "src_mask": padding_mask(src, pad_id), "tgt_mask": tgt_mask}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    z = logits.reshape(-1, V)
    t = target.reshape(-1)
    if pad_id is not None:
        real = t != pad_id
        z, t = z[real], t[real]
    z_target = torch.take_along_dim(z, t.unsqueeze(1), dim=1).squeeze(1)
    cost = torch.logsumexp(z, dim=1) - (1 - smoothing) * z_target - smoothing * z.mean(dim=1)
    return cost.mean()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    s = float(max(step, 1))
    return factor * d_model ** -0.5 * s ** -0.5 * min(1.0, (s / warmup_steps) ** 1.5)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(params=model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)

    def lr_at(step):
        return noam_lr(step, d_model, warmup_steps, factor)

    scheduler = LambdaLR(optimizer, lr_lambda=lr_at)
    return optimizer, scheduler


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    src, tgt_in, tgt_out = batch["src"], batch["tgt_in"], batch["tgt_out"]
    logits = model(src, tgt_in, batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(logits, tgt_out, smoothing=smoothing, pad_id=pad_id)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    value = loss.item()
    return value


def evaluate(model, batches, pad_id):
    mode = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64)
    count = torch.zeros((), dtype=torch.long)
    with torch.set_grad_enabled(False):
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
            V = logits.size(-1)
            z = logits.reshape(-1, V)
            t = batch["tgt_out"].reshape(-1)
            real = t != pad_id
            lse = torch.logsumexp(z, dim=1)
            nll = lse - z.gather(1, t.clamp(0, V - 1).unsqueeze(1)).squeeze(1)
            total = total + nll[real].sum().to(torch.float64)
            count = count + real.sum()
    model.train(mode)
    return (total / count).item() if count > 0 else math.nan
