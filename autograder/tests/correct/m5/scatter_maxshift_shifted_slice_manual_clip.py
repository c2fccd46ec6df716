"""Correct: log-probabilities by hand with the row maximum subtracted (z - m - log sum exp(z - m)); the
smoothed target distribution written with scatter into a tensor filled with e / V; padded positions
dropped by boolean indexing before the sum (sum over kept / their count). make_batch fills
torch.full pad tensors row by row, derives tgt_out from tgt_in by a left shift (slice) and writes
<eos> at each row's length with advanced indexing; tgt_mask from arange comparisons against the row
lengths. The tokenizer numbers characters with zip(range) and decodes with itertools.takewhile.
noam_lr with an if/else on the warm-up; the LambdaLR gets a callable object; train_step zeros with
set_to_none=False and clips by hand exactly as clip_grad_norm_ does (norm of the per-tensor norms,
max_norm / (total + 1e-6), clamped to 1); evaluate sums loss * count with the module's own loss."""
import itertools
import math

import torch
from torch.optim.lr_scheduler import LambdaLR


class CharTokenizer:
    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id = 0
        self.bos_id = 1
        self.eos_id = 2
        self.unk_id = 3
        alphabet = sorted(set().union(*(set(t) for t in texts)))
        self.char_to_id = dict(zip(alphabet, range(4, 4 + len(alphabet))))
        self.id_to_char = {v: k for k, v in self.char_to_id.items()}
        self.id_to_char[self.unk_id] = self.UNK
        self.vocab_size = len(alphabet) + 4

    def encode(self, text):
        return list(map(lambda c: self.char_to_id.get(c, self.unk_id), text))

    def decode(self, ids):
        ids = [int(i) for i in ids]
        kept = itertools.takewhile(lambda i: i != self.eos_id, ids)
        return "".join(self.id_to_char[i] for i in kept if i not in (self.pad_id, self.bos_id))


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    B = len(src_ids)
    Ls = max(map(len, src_ids))
    lengths = torch.tensor([len(t) for t in tgt_ids], dtype=torch.long)
    Lt = int(lengths.max()) + 1
    src = torch.full((B, Ls), pad_id, dtype=torch.long)
    tgt_in = torch.full((B, Lt), pad_id, dtype=torch.long)
    tgt_in[:, 0] = bos_id
    for b in range(B):
        src[b, :len(src_ids[b])] = torch.tensor(src_ids[b], dtype=torch.long)
        tgt_in[b, 1:1 + len(tgt_ids[b])] = torch.tensor(tgt_ids[b], dtype=torch.long)
    tgt_out = torch.full((B, Lt), pad_id, dtype=torch.long)
    tgt_out[:, :-1] = tgt_in[:, 1:]                          # the targets move one step to the left
    tgt_out[torch.arange(B), lengths] = eos_id               # ... and end with <eos>
    pos = torch.arange(Lt)
    causal = pos[None, :] <= pos[:, None]                    # [Lt, Lt]: key j <= query i
    real_key = pos[None, :] < (lengths + 1)[:, None]         # [B, Lt]: <bos> + the target
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "src_mask": (src != pad_id)[:, None, :],
            "tgt_mask": causal[None, :, :] & real_key[:, None, :]}


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    z = logits.reshape(-1, V)
    t = target.reshape(-1)
    keep = torch.ones_like(t, dtype=torch.bool) if pad_id is None else t.ne(pad_id)
    z, t = z[keep], t[keep]                                  # only the real targets
    m = z.amax(dim=1, keepdim=True)
    log_p = (z - m) - torch.log(torch.exp(z - m).sum(dim=1, keepdim=True))
    q = torch.full_like(log_p, smoothing / V).scatter(1, t[:, None], 1.0 - smoothing + smoothing / V)
    return -(q * log_p).sum() / keep.sum()


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = max(1, step)
    if step < warmup_steps:
        rate = step * warmup_steps ** -1.5
    else:
        rate = step ** -0.5
    return factor * rate / math.sqrt(d_model)


class _NoamFactor:
    def __init__(self, d_model, warmup_steps, factor):
        self.d_model, self.warmup_steps, self.factor = d_model, warmup_steps, factor

    def __call__(self, step):
        return noam_lr(step, self.d_model, self.warmup_steps, self.factor)


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    opt = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9, lr=1.0)
    return opt, LambdaLR(opt, _NoamFactor(d_model, warmup_steps, factor))


def _clip(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with torch.no_grad():
        for g in grads:
            g.mul_(scale.to(g.dtype))


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train(True)
    optimizer.zero_grad(set_to_none=False)
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    loss.backward()
    if clip_norm is not None:
        _clip(list(model.parameters()), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def evaluate(model, batches, pad_id):
    training = model.training
    model.train(False)
    weighted, tokens = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            count = int(batch["tgt_out"].ne(pad_id).sum())
            if count:
                logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
                weighted += count * label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id).item()
                tokens += count
    model.train(training)
    return weighted / tokens if tokens else math.nan
