"""Milestone 5's right answers, as the judge computes them: the batch contract, the loss (with
F.cross_entropy), the Noam schedule, evaluate's answer and the judge's own training steps (reference.TorchModel
and torch.optim, from the same weights and batches as the student's). Beside them, the CATALOGUE entries that
recompute the known mistakes of the loss, of make_batch and of evaluate (each the right computation with one
thing changed, or an unstable way of computing log-probabilities); judge_steps reproduces the known mistakes of
train_step by its switches (deviations.yaml: train_step; STEP_DEVIATIONS below)."""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from autograder.milestones.reference import TorchModel, by_student_name
from autograder.milestones.m5.mistakes import CATALOGUE, MEAN_OF_BATCH_MEANS

# judge_steps replays "scheduler before optimizer" on purpose
warnings.filterwarnings("ignore", message="Detected call of", category=UserWarning)
PAD, BOS, EOS, UNK = 0, 1, 2, 3
V = 12                       # vocabulary of the judge's models
MAX_LEN = 16


# ---- the judge's answers ------------------------------------------------------------------------

def expected_batch(src_ids, tgt_ids, pad_id=PAD, bos_id=BOS, eos_id=EOS, *, shift=True, bos_out=False,
                   left=False, tgt_padding_in_mask=True, block_pad_rows=False, fill=None, mask_key=None,
                   shift_after_padding=False):
    """make_batch's contract (or one deviation from it), as plain tensors. `fill`: the id the sequences are
    padded with, `mask_key`: the id the masks block (both pad_id unless a deviation says otherwise)."""
    fill = pad_id if fill is None else fill
    key = pad_id if mask_key is None else mask_key

    def pad(seqs):
        n = max(len(s) for s in seqs)
        rows = [([fill] * (n - len(s)) + list(s)) if left else (list(s) + [fill] * (n - len(s))) for s in seqs]
        return torch.tensor(rows, dtype=torch.long)
    src = pad(src_ids)
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])
    tgt_out = pad([([bos_id] if bos_out else []) + list(t) + [eos_id] for t in tgt_ids])
    if shift_after_padding:          # <bos> + target + <eos> padded as one sequence, then cut in two
        full = pad([[bos_id] + list(t) + [eos_id] for t in tgt_ids])
        tgt_in, tgt_out = full[:, :-1], full[:, 1:]
    if not shift:
        tgt_out = tgt_in.clone()
    Lt = tgt_in.size(1)
    tgt_mask = torch.ones(Lt, Lt, dtype=torch.bool).tril().expand(len(tgt_ids), Lt, Lt).clone()
    if tgt_padding_in_mask:
        tgt_mask &= (tgt_in != key)[:, None, :]
    if block_pad_rows:
        tgt_mask &= (tgt_in != key)[:, :, None]
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": (src != key)[:, None, :],
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
                  ignore_smoothing=False, pad_counted=None, ignored=None, lse_float32=False):
    Vv = logits.size(-1)
    z = logits.reshape(-1, Vv)
    if lse_float32 and z.dtype != torch.float64:
        return None                              # the same as the right answer in float32: proves nothing
    lp = z - torch.logsumexp(z.float(), -1, keepdim=True).to(z.dtype) if lse_float32 else _lp(z)
    t = target.reshape(-1)
    # ignored: which targets are left out ("zero": those equal to 0 whatever pad_id is; "zero_if_none": 0 when
    # pad_id is None, else pad_id)
    key = 0 if ignored == "zero" or (ignored == "zero_if_none" and pad_id is None) else pad_id
    key = None if ignored == "none_if_zero" and pad_id == 0 else key      # `if pad_id:` is False for 0
    keep = torch.ones_like(t, dtype=torch.bool) if key is None or pad_in_mean else t != key
    counted = keep if pad_counted is None or key is None else torch.ones_like(keep)
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
    if reduce in ("per_sequence", "per_sequence_nan") and target.dim() == 2:
        k = keep.reshape(target.shape).sum(1)
        return (cost.reshape(target.shape).sum(1) / (k if reduce == "per_sequence_nan" else k.clamp(min=1))).mean()
    return cost.sum() / counted.sum()


CATALOGUE.deviations("loss", _loss_variant)


def _cost_mean(lp, target, smoothing, pad_id, masking="where"):
    """The right cost and mean, from log-probabilities `lp` [N, V] however they were computed; `masking`: how the
    padded positions are left out, "where" (torch.where or boolean indexing: an inf or NaN there is dropped) or
    "multiply" (cost * keep: an inf there gives NaN)."""
    Vv = lp.size(-1)
    t = target.reshape(-1)
    keep = torch.ones_like(t, dtype=torch.bool) if pad_id is None else t != pad_id
    cost = (1 - smoothing) * -lp.gather(1, t.clamp(0, Vv - 1)[:, None])[:, 0] + smoothing * (-lp).mean(1)
    cost = cost * keep if masking == "multiply" else torch.where(keep, cost, torch.zeros_like(cost))
    return cost.sum() / keep.sum()


# Unstable log-probabilities: each is right on moderate logits and gives inf or NaN on some large ones. The
# loss check's inputs separate them (logits around 1000 close together: only exp(x) overflows; rows far apart:
# only one global maximum fails; one row spread over 1e4 below a maximum of 0: only the probabilities
# underflow). Each is registered with both ways of leaving out the padded positions, which give inf or NaN.
def _ratio_log(e):
    return torch.log(e / e.sum(1, keepdim=True))


def _raw_log_probs(z, form):
    return _ratio_log(torch.exp(z)) if form == "ratio" else z - torch.log(torch.exp(z).sum(1, keepdim=True))


def _global_max_log_probs(z, form):
    return _raw_log_probs(z - z.max(), form)


def _log_of_softmax(z, form):
    return _ratio_log(torch.exp(z - z.amax(1, keepdim=True)))


def _unstable(log_probs, form, masking):
    def loss(logits, target, smoothing=0.0, pad_id=None):
        z = logits.reshape(-1, logits.size(-1))
        return _cost_mean(log_probs(z, form), target, smoothing, pad_id, masking)
    return loss


_UNSTABLE = (
    ("loss_overflow", "log(softmax) is computed from exp(x) of the raw logits, which overflows (exp(x) = inf above "
     "about 709 in float64, 88 in float32): use logits - torch.logsumexp(logits, -1, keepdim=True).",
     _raw_log_probs, ("ratio", "difference")),
    ("global_max_shift", "one maximum of the whole tensor is subtracted from every row, so a row whose logits are all "
     "far below it gives exp(...) = 0 and log(0) = -inf: subtract each row's own maximum (amax over the classes, "
     "keepdim=True), or use torch.logsumexp(logits, -1, keepdim=True).", _global_max_log_probs, ("ratio", "difference")),
    ("log_of_softmax_underflow", "the log-probabilities are log(softmax(x)): the softmax is stable, but the "
     "probability of a logit far below its row's maximum (more than about 745 below in float64, 104 in float32) "
     "underflows to 0 and log(0) = -inf. Compute them without forming the probabilities: logits - "
     "torch.logsumexp(logits, -1, keepdim=True).", _log_of_softmax, ("ratio",)))
for _id, _text, _log_probs, _forms in _UNSTABLE:
    for _form in _forms:
        for _masking in ("where", "multiply"):
            CATALOGUE.mistake(_id, _text, kind="loss", reproduce=_unstable(_log_probs, _form, _masking))


# The padded targets used as class indices as they are: right whenever pad_id is a class, but a pad_id outside
# 0..V-1 (-100, F.cross_entropy's default ignore_index, or V) is an out-of-range index, and PyTorch raises. Each way
# of picking the target's log-probability raises its own error (gather and scatter name the dimension of the
# classes, flattened or not; indexing an identity matrix names dimension 0; one_hot says "Class values"): the
# student's error, the same type and words on the same arguments, is reproduced by one of them (kind
# "loss_errors": tried on a crash only, never for values, where it gives the right answer).
def _index_leading(lp, z, target):
    grids = [torch.arange(n).view(*[-1 if i == d else 1 for i in range(target.dim())])
             for d, n in enumerate(target.shape)]
    return lp[(*grids, target)]


_PICKED_RAW = {
    "gather": lambda lp, z, t: z.gather(1, t[:, None])[:, 0],
    "gather_leading": lambda lp, z, t: lp.gather(-1, t.unsqueeze(-1))[..., 0],
    "index": lambda lp, z, t: z[torch.arange(t.numel()), t],
    "index_leading": _index_leading,
    "one_hot": lambda lp, z, t: (F.one_hot(t, z.size(-1)).to(z.dtype) * z).sum(-1),
    "scatter": lambda lp, z, t: (torch.zeros_like(z).scatter(1, t[:, None], 1.0) * z).sum(1),
    "scatter_leading": lambda lp, z, t: (torch.zeros_like(lp).scatter(-1, t.unsqueeze(-1), 1.0) * lp).sum(-1),
    "identity_rows": lambda lp, z, t: (torch.eye(z.size(-1), dtype=z.dtype)[t] * z).sum(-1),
}


def _pad_target_as_index(form):
    """The right loss, except that the target's log-probability is picked with the raw target (`form`: how);
    "_leading" forms pick before flattening (the target keeps its shape)."""
    def loss(logits, target, smoothing=0.0, pad_id=None):
        lp = _lp(logits)                                               # [..., V]
        z, t = lp.reshape(-1, lp.size(-1)), target.reshape(-1)
        picked = _PICKED_RAW[form](lp, z, target if form.endswith("_leading") else t).reshape(-1)
        keep = torch.ones_like(t, dtype=torch.bool) if pad_id is None else t != pad_id
        cost = -(1 - smoothing) * picked - smoothing * z.mean(1)
        return torch.where(keep, cost, torch.zeros_like(cost)).sum() / keep.sum()
    return loss


PAD_TARGET_AS_INDEX_TEXT = (
    "the padded targets are used as class indices as they are (gather, indexing, one_hot or scatter with the raw "
    "target), which fails when pad_id is not a class: give the padded positions a safe index first, e.g. "
    "torch.where(keep, target, 0) or target.masked_fill(~keep, 0), then pick the log-probabilities (the cost of "
    "those positions is left out anyway).")
for _form in _PICKED_RAW:
    CATALOGUE.mistake("pad_target_as_index", PAD_TARGET_AS_INDEX_TEXT, kind="loss_errors",
                      reproduce=_pad_target_as_index(_form))


CATALOGUE.deviations("batch", expected_batch)


def masks_keyed_on(batch, key):
    """The batch's masks rebuilt to block the tokens equal to `key` (what code that builds its own masks with a
    fixed id computes)."""
    Lt = batch["tgt_in"].size(1)
    causal = torch.ones(Lt, Lt, dtype=torch.bool).tril()
    return (batch["src"] != key)[:, None, :], causal & (batch["tgt_in"] != key)[:, None, :]


def judge_logits(model, batches):
    """[{"logits", "tgt_out", "zero_masks"}] of the judge's `model` for each batch (no gradients); "zero_masks":
    the logits with masks that block the tokens 0 instead of the padding."""
    out = []
    with torch.no_grad():
        for b in batches:
            logits = model(b["src"], b["tgt_in"], b["src_mask"], b["tgt_mask"])
            zero = model(b["src"], b["tgt_in"], *masks_keyed_on(b, 0))
            out.append({"logits": logits, "tgt_out": b["tgt_out"], "zero_masks": zero})
    return out


def expected_evaluate(per_batch, pad_id, *, count="pad_id", loss_pad="pad_id", mean_of_means=False,
                      masks="batch", empty_adds_nan=False):
    """evaluate's answer from the judge's logits of each batch (judge_logits), or one deviation: count: which
    targets are counted ("pad_id": those != pad_id; 0: those != 0; "all": every position); loss_pad: the padding
    id the loss is given ("pad_id", 0 or None); mean_of_means: the mean of the per-batch losses; masks: "batch"
    (the batch's own) or "zero" (masks rebuilt to block the tokens 0); empty_adds_nan: a batch without a counted
    target is not skipped, its loss (NaN: 0 / 0) times 0 is added."""
    total, tokens, means = 0.0, 0, []
    for judged in per_batch:
        logits, target = judged["logits" if masks == "batch" else "zero_masks"], judged["tgt_out"]
        n = target.numel() if count == "all" else int((target != (pad_id if count == "pad_id" else count)).sum())
        if n == 0 and not empty_adds_nan:
            continue
        loss = expected_loss(logits, target, 0.0, pad_id if loss_pad == "pad_id" else loss_pad).item()
        total, tokens = total + loss * n, tokens + n
        means.append(loss)
    if mean_of_means:
        return sum(means) / len(means) if means else math.nan
    return total / tokens if tokens else math.nan


CATALOGUE.deviations("evaluate", expected_evaluate)


# ---- the judge's training steps ---------------------------------------------------------------------

def judge_steps(p, batches, steps, optimizer="adam", smoothing=0.0, clip_norm=None, warmup=4, *, pad_id=PAD,
                dtype=torch.float64, skip_zero=False, zero_late=False, zero_after_step=False, clip="norm",
                sched_first=False, loss_on_tgt_in=False, loss_pad="pad_id", loss_smoothing=None, stale=False,
                masks="batch"):
    """Parameters (student names) after each of `steps` steps of the judge's own train_step, or of a known
    mistake, and the losses returned; the last snapshot also holds the gradients left after the last step,
    under "grad:" + name (None counts as zeros). Switches: skip_zero: gradients never zeroed; zero_late: zeroed
    after backward; zero_after_step: zeroed after the step instead of first; clip: "norm" (clip_grad_norm_
    between backward and step), "after_step", "none", "value" (clip_grad_value_), "per_tensor" (each gradient
    to norm clip_norm on its own); sched_first: scheduler stepped before the optimizer; loss_on_tgt_in: no
    shift; loss_pad: the padding id the loss is given ("pad_id", 0 or None); loss_smoothing: the smoothing the
    loss is given (None: `smoothing`); masks: "batch" (the batch's own) or "zero" (masks rebuilt to block the
    tokens 0). Also returns the losses stepped on and, of the same logits, the plain
    cross-entropy (no smoothing) of each step."""
    model = TorchModel({k: v.to(dtype) for k, v in p.items()}, 1, False, "relu", dtype, MAX_LEN)
    params = list(model.parameters())
    if optimizer == "sgd":
        opt, sched = torch.optim.SGD(params, lr=0.1), None
    else:
        opt = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.05 * min(max(s, 1) ** -0.5, max(s, 1) * warmup ** -1.5))
    if stale:
        for q in params:
            q.grad = torch.full_like(q, 0.5)
    ignore = pad_id if loss_pad == "pad_id" else loss_pad
    e = smoothing if loss_smoothing is None else loss_smoothing
    out, losses, plain = [], [], []
    for i in range(steps):
        b = batches[i % len(batches)]
        if not (skip_zero or zero_late or zero_after_step):
            opt.zero_grad()
        src_mask, tgt_mask = (b["src_mask"], b["tgt_mask"]) if masks == "batch" else masks_keyed_on(b, 0)
        logits = model(b["src"], b["tgt_in"], src_mask, tgt_mask)
        target = b["tgt_in"] if loss_on_tgt_in else b["tgt_out"]
        loss = expected_loss(logits, target, e, ignore)
        loss.backward()
        if zero_late:
            opt.zero_grad()
        if clip_norm is not None:
            if clip == "norm":
                torch.nn.utils.clip_grad_norm_(params, clip_norm)
            elif clip == "value":
                torch.nn.utils.clip_grad_value_(params, clip_norm)
            elif clip == "per_tensor":         # the student's tensors: w_q, w_k, w_v are views of one in_proj
                for g in by_student_name(model, p).values():
                    g.mul_((clip_norm / (g.norm() + 1e-6)).clamp(max=1.0))
        if sched_first and sched is not None:
            sched.step()
        opt.step()
        if clip_norm is not None and clip == "after_step":
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        if sched is not None and not sched_first:
            sched.step()
        if zero_after_step:
            opt.zero_grad()
        with torch.no_grad():
            plain.append(expected_loss(logits, b["tgt_out"], 0.0, pad_id).item())
        losses.append(loss.item())
        out.append(by_student_name(model, p, lambda t: t.detach().clone()))
    if out:
        grads = by_student_name(model, p, lambda t: torch.zeros_like(t) if t.grad is None else t.grad.detach().clone())
        out[-1].update({"grad:" + k: v for k, v in grads.items()})
    return out, losses, plain


# train_step's known mistakes: judge_steps with the switches of deviations.yaml (the check replays them).
STEP_DEVIATIONS = [(CATALOGUE.mistake(r.id, r.text), r.switches) for r in CATALOGUE.table("train_step", judge_steps)]
