"""Milestone 5's right answers, as the judge computes them: the batch contract, the loss (with
F.cross_entropy), the Noam schedule and the judge's own training steps (reference.TorchModel and
torch.optim, from the same weights and batches as the student's). Beside them, the CATALOGUE entries that
recompute the known mistakes of the loss and of make_batch (each the right computation with one thing
changed); judge_steps reproduces the known mistakes of train_step by its switches (declared in
mistakes.py: STEP_MISTAKES)."""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from autograder.milestones.reference import TorchModel, by_student_name
from autograder.milestones.m5.mistakes import CATALOGUE

# judge_steps replays "scheduler before optimizer" on purpose
warnings.filterwarnings("ignore", message="Detected call of", category=UserWarning)
PAD, BOS, EOS, UNK = 0, 1, 2, 3
V = 12                       # vocabulary of the judge's models
MAX_LEN = 16


# ---- the judge's answers ------------------------------------------------------------------------

def expected_batch(src_ids, tgt_ids, pad_id=PAD, bos_id=BOS, eos_id=EOS, *, shift=True, bos_out=False,
                   left=False, tgt_padding_in_mask=True, block_pad_rows=False):
    """make_batch's contract (or one deviation from it), as plain tensors."""
    def pad(seqs):
        n = max(len(s) for s in seqs)
        rows = [([pad_id] * (n - len(s)) + list(s)) if left else (list(s) + [pad_id] * (n - len(s))) for s in seqs]
        return torch.tensor(rows, dtype=torch.long)
    src = pad(src_ids)
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])
    tgt_out = pad([([bos_id] if bos_out else []) + list(t) + [eos_id] for t in tgt_ids])
    if not shift:
        tgt_out = tgt_in.clone()
    Lt = tgt_in.size(1)
    tgt_mask = torch.ones(Lt, Lt, dtype=torch.bool).tril().expand(len(tgt_ids), Lt, Lt).clone()
    if tgt_padding_in_mask:
        tgt_mask &= (tgt_in != pad_id)[:, None, :]
    if block_pad_rows:
        tgt_mask &= (tgt_in != pad_id)[:, :, None]
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": (src != pad_id)[:, None, :],
            "tgt_mask": tgt_mask}


def expected_loss(logits, target, smoothing=0.0, pad_id=None):
    Vv = logits.size(-1)
    kwargs = {} if pad_id is None else {"ignore_index": pad_id}
    return F.cross_entropy(logits.reshape(-1, Vv), target.reshape(-1), label_smoothing=smoothing, **kwargs)


def noam(step, d_model, warmup, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


# ---- the catalogue ------------------------------------------------------------------------------

def _lp(logits):
    return logits - torch.logsumexp(logits, -1, keepdim=True)


def _loss_variant(logits, target, smoothing=0.0, pad_id=None, *, spread="V", pad_in_mean=False, reduce="mean",
                  ignore_smoothing=False, pad_counted=None):
    Vv = logits.size(-1)
    lp, t = _lp(logits.reshape(-1, Vv)), target.reshape(-1)
    keep = torch.ones_like(t, dtype=torch.bool) if pad_id is None or pad_in_mean else t != pad_id
    counted = keep if pad_counted is None or pad_id is None else torch.ones_like(keep)
    e = 0.0 if ignore_smoothing else smoothing
    nll = -lp.gather(1, t.clamp(0, Vv - 1)[:, None])[:, 0]
    if spread == "V-1" or (spread == "V-2" and pad_id is not None):
        others = (-lp).sum(1) - nll
        if spread == "V-2":                      # the Annotated Transformer's: no mass on <pad> either
            others = others - (-lp[:, pad_id])
        cost = (1 - e) * nll + e * others / (Vv - 1 if spread == "V-1" else Vv - 2)
    else:
        cost = (1 - e) * nll + e * (-lp).mean(1)
    cost = torch.where(keep, cost, torch.zeros_like(cost))
    if reduce == "sum":
        return cost.sum()
    if reduce == "per_sequence" and target.dim() == 2:
        k = keep.reshape(target.shape)
        return (cost.reshape(target.shape).sum(1) / k.sum(1).clamp(min=1)).mean()
    return cost.sum() / counted.sum()


CATALOGUE.deviations("loss", _loss_variant, (
        ("pad_in_mean", "padded positions count in the mean (their cost is left out of the sum but not of the "
         "count): divide by the number of non-pad positions.", {"pad_counted": True}),
        ("smoothing_over_v_minus_1", "the smoothing mass is spread over the V - 1 wrong classes; in this course (as "
         "in F.cross_entropy's label_smoothing) it is spread over all V classes, the right one included: "
         "(1 - e) * nll + e * mean over all classes of -log p.", {"spread": "V-1"}),
        ("smoothing_without_pad_column", "the smoothing mass is spread over the V - 2 classes that are neither the "
         "right one nor <pad> (the Annotated Transformer's recipe); in this course (as in F.cross_entropy's "
         "label_smoothing) it is spread over all V classes, <pad> and the right one included: (1 - e) * nll + e * "
         "mean over all classes of -log p.", {"spread": "V-2"}),
        ("pad_in_mean", "padded positions count in the mean; average only over the positions whose target is not "
         "pad_id (sum of their costs / their number).", {"pad_in_mean": True}),
        ("loss_summed", "the cost is summed over positions; it is the mean over the non-pad positions.",
         {"reduce": "sum"}),
        ("mean_of_sequence_means", "the mean is taken per sequence, then over sequences; it is one mean over all "
         "non-pad positions (sequences with more tokens weigh more).", {"reduce": "per_sequence"}),
        ("smoothing_ignored", "the `smoothing` argument has no effect: cost = (1 - e) * nll + e * mean over the "
         "classes of -log p.", {"ignore_smoothing": True})))


@CATALOGUE.entry("loss", "loss_overflow", "log(softmax) computed as log(exp(x) / sum exp(x)) overflows for large "
                 "logits: use logits - torch.logsumexp(logits, -1, keepdim=True).")
def _naive_loss(logits, target, smoothing=0.0, pad_id=None):
    Vv = logits.size(-1)
    e = torch.exp(logits.reshape(-1, Vv))
    lp = torch.log(e / e.sum(1, keepdim=True))
    t = target.reshape(-1)
    keep = torch.ones_like(t, dtype=torch.bool) if pad_id is None else t != pad_id
    cost = (1 - smoothing) * -lp.gather(1, t.clamp(0, Vv - 1)[:, None])[:, 0] + smoothing * (-lp).mean(1)
    return torch.where(keep, cost, torch.zeros_like(cost)).sum() / keep.sum()


CATALOGUE.deviations("batch", expected_batch, (
        ("targets_not_shifted", "tgt_out is the same sequence as tgt_in: the decoder must predict the NEXT token, so "
         "tgt_in = <bos> + target and tgt_out = target + <eos> (teacher forcing with a shift).", {"shift": False}),
        ("bos_in_tgt_out", "tgt_out starts with <bos>; it is target + <eos> (the prediction at position t is the "
         "token at t + 1 of tgt_in).", {"bos_out": True}),
        ("left_padding", "the sequences are padded on the left; pad on the right (the positions then line up with "
         "the sinusoidal table and the causal mask).", {"left": True}),
        ("tgt_mask_without_padding", "tgt_mask is causal only: padded target keys must be blocked too, "
         "tgt_mask[b, i, j] = (j <= i) and tgt_in[b, j] != pad_id.", {"tgt_padding_in_mask": False}),
        ("pad_rows_blocked", "padded query rows are blocked too; only padded keys (columns) are: "
         "tgt_mask[b, i, j] = (j <= i) and tgt_in[b, j] != pad_id.", {"block_pad_rows": True})))


# ---- the judge's training steps ---------------------------------------------------------------------

def judge_steps(p, batches, steps, optimizer="adam", smoothing=0.0, clip_norm=None, warmup=4, *, skip_zero=False,
                zero_late=False, clip_late=False, sched_first=False, loss_on_tgt_in=False, stale=False):
    """Parameters (student names) after each of `steps` steps of the judge's own train_step, or of a known
    mistake (skip_zero: gradients never zeroed; zero_late: zeroed after backward; clip_late: clipped after
    the step; sched_first: scheduler stepped before the optimizer; loss_on_tgt_in: no shift)."""
    model = TorchModel(p, 1, False, "relu", torch.float64, MAX_LEN)
    params = list(model.parameters())
    if optimizer == "sgd":
        opt, sched = torch.optim.SGD(params, lr=0.1), None
    else:
        opt = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.05 * min(max(s, 1) ** -0.5, max(s, 1) * warmup ** -1.5))
    if stale:
        for q in params:
            q.grad = torch.full_like(q, 0.5)
    out, losses = [], []
    for i in range(steps):
        b = batches[i % len(batches)]
        if not skip_zero and not zero_late:
            opt.zero_grad()
        logits = model(b["src"], b["tgt_in"], b["src_mask"], b["tgt_mask"])
        loss = expected_loss(logits, b["tgt_in"] if loss_on_tgt_in else b["tgt_out"], smoothing, PAD)
        loss.backward()
        if zero_late:
            opt.zero_grad()
        if clip_norm is not None and not clip_late:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        if sched_first and sched is not None:
            sched.step()
        opt.step()
        if clip_norm is not None and clip_late:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        if sched is not None and not sched_first:
            sched.step()
        losses.append(loss.item())
        out.append(by_student_name(model, p, lambda t: t.detach().clone()))
    return out, losses
