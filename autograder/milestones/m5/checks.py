"""Hidden checks for milestone 5: tokenizer, batches, the loss, the Noam schedule, train_step, evaluate.

The judge computes its own answers: the tokenizer and batch contracts directly, the loss with
F.cross_entropy, and every training step with its own model (reference.TorchModel: PyTorch's layers)
and torch.optim.Adam, from the same weights and batch. The student's train_step and evaluate run in
the worker on the course's reference Transformer (milestone 4), built there by judge recipes; only
tensors and numbers come back. CATALOGUE names the known mistakes. The loss and the schedule have
stand-ins, so train_step, evaluate and learning are graded on their own merits when those are wrong.
"""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from autograder.grading.checks import CheckFailed, Tester, describe, group, shape_str, stand_ins
from autograder.milestones.reference import D, TorchModel, by_student_name, model_params, pe_table
from autograder.milestones.m5.mistakes import (
    CATALOGUE, ADAM_SETTINGS, BASE_LR, BATCH_DTYPE, BATCH_NOT_DICT, DOES_NOT_LEARN, EVALUATE_IN_TRAIN_MODE,
    EVALUATE_MODE_NOT_RESTORED, EVALUATE_WITH_GRAD, EVAL_MODE_IN_TRAIN, GRAPH_CUT, INPUT_MODIFIED,
    LOSS_NOT_SCALAR, LOSS_RETURNED_AS_TENSOR, MEAN_OF_BATCH_MEANS, NOAM_FACTOR_IGNORED, NOAM_OFF_BY_ONE,
    NOAM_STEP_ZERO, OPTIMIZER_KIND, SCHEDULER_VALUES, TOKENIZER_DECODE, TOKENIZER_ENCODE, TOKENIZER_SPECIALS,
    TOKENIZER_UNSORTED, TOKENIZER_VOCAB_SIZE, WRONG_LOSS_RETURNED)

# A first optimizer step imports torch's compiler (dynamo), which the fork server skips unless asked: these
# checks step optimizers in the worker.
WORKER_PRELOAD = ("torch._dynamo",)
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


# ---- stand-ins ----------------------------------------------------------------------------------

def _stand_in_loss(logits, target, smoothing=0.0, pad_id=None):
    Vv = logits.size(-1)
    lp = logits.reshape(-1, Vv) - torch.logsumexp(logits.reshape(-1, Vv), -1, keepdim=True)
    t = target.reshape(-1)
    keep = torch.ones_like(t, dtype=torch.bool) if pad_id is None else t != pad_id
    cost = (1 - smoothing) * -lp.gather(1, torch.where(keep, t, 0)[:, None])[:, 0] + smoothing * (-lp).mean(1)
    return torch.where(keep, cost, torch.zeros_like(cost)).sum() / keep.sum()


def _stand_in_noam(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def _stand_in_make_optimizer(model, d_model, warmup_steps, factor=1.0):
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    step = lambda s: factor * d_model ** -0.5 * min(max(s, 1) ** -0.5, max(s, 1) * warmup_steps ** -1.5)  # noqa
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, step)


stand_ins("m5", label_smoothed_cross_entropy=_stand_in_loss, noam_lr=_stand_in_noam,
          make_optimizer=_stand_in_make_optimizer)


# ---- recipes: run in the worker, beside the student's code (only their source is sent) -----------

def recipe_tokenizer(texts, probes):
    import training
    tok = training.CharTokenizer(texts)
    out = {name: getattr(tok, name, None) for name in ("pad_id", "bos_id", "eos_id", "unk_id", "vocab_size")}
    out["encoded"] = [tok.encode(p) for p in probes]
    return out


def recipe_decode(texts, id_lists):
    import training
    tok = training.CharTokenizer(texts)
    return [tok.decode(ids) for ids in id_lists]


def recipe_optimizer(d_model, warmup, factor, steps):
    import torch
    import training
    model = torch.nn.Linear(3, 2)
    opt, sched = training.make_optimizer(model, d_model, warmup, factor)
    group = opt.param_groups[0]
    out = {"type": type(opt).__name__, "betas": list(group.get("betas", ())), "eps": group.get("eps"),
           "base_lr": group.get("initial_lr", group.get("lr")), "same_params": len(group["params"]) == 2,
           "scheduler": type(sched).__name__, "lrs": [group["lr"]]}
    for _ in range(steps):
        opt.step()
        sched.step()
        out["lrs"].append(group["lr"])
    return out


def recipe_train(params, table, vocab, layers, batches, steps, optimizer, smoothing, clip_norm, warmup,
                 stale_grads=False, dropout=0.0, start_eval=True):
    """The student's train_step on the reference Transformer with the judge's weights."""
    import torch
    import training
    from model import Transformer
    model = Transformer(vocab, vocab, d_model=8, num_heads=2, num_layers=layers, d_ff=16, dropout=dropout,
                        max_len=table.size(0)).double()
    with torch.no_grad():
        own = dict(model.named_parameters())
        for k, v in params.items():
            own[k].copy_(v)
        model.pos_encoding.pe.copy_(table)
    if optimizer == "sgd":
        opt, sched = torch.optim.SGD(model.parameters(), lr=0.1), None
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.05 * min(max(s, 1) ** -0.5, max(s, 1) * warmup ** -1.5))
    if stale_grads:
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)
    if start_eval:
        model.eval()
    returned, snapshots = [], []
    for i in range(steps):
        value = training.train_step(model, batches[i % len(batches)], opt, 0, sched, smoothing, clip_norm)
        returned.append(value if isinstance(value, float) else
                        {"type": type(value).__name__, "requires_grad": bool(getattr(value, "requires_grad", False))})
        snapshots.append({k: v.detach().clone() for k, v in model.named_parameters()})
    return {"returned": returned, "params": snapshots, "training": model.training,
            "lr": opt.param_groups[0]["lr"]}


def recipe_evaluate(params, table, vocab, batches, dropout, mode):
    import torch
    import training
    from model import Transformer
    model = Transformer(vocab, vocab, d_model=8, num_heads=2, num_layers=1, d_ff=16, dropout=dropout,
                        max_len=table.size(0)).double()
    with torch.no_grad():
        own = dict(model.named_parameters())
        for k, v in params.items():
            own[k].copy_(v)
        model.pos_encoding.pe.copy_(table)
    model.train(mode == "train")
    value = training.evaluate(model, batches, 0)
    # Whether it ran with dropout on or built autograd graphs is read from the grader's ledger (dropout
    # ops, ops that recorded a gradient), never from a hook the student's code could see or skip.
    return {"value": value if isinstance(value, float) else {"type": type(value).__name__},
            "modes_after": [m.training for m in model.modules()]}


def dropout_ran(record) -> bool:
    """Did a dropout layer drop anything (a model in training mode)? Seen in the ops that ran: PyTorch's
    dropout draws its mask with bernoulli_ (or a fused native_dropout)."""
    return any(record["counts"].get(op, 0) for op in ("aten::native_dropout", "aten::bernoulli_"))


def recipe_learn(batch, vocab, steps, seed, table):
    """Train a fresh model with the student's optimizer and train_step; only the weights come back (the
    judge measures the loss itself, with its own model: evaluate and train_step's returns are not trusted)."""
    import torch
    import training
    from model import Transformer
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=8, num_heads=2, num_layers=1, d_ff=16, dropout=0.0,
                        max_len=table.size(0))
    with torch.no_grad():
        model.pos_encoding.pe.copy_(table)
    first = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt, sched = training.make_optimizer(model, 8, 8, 1.0)
    for _ in range(steps):
        training.train_step(model, batch, opt, 0, sched)
    return {"first": first, "final": {k: v.detach().clone() for k, v in model.named_parameters()}}


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


def flat(params: dict, names) -> torch.Tensor:
    return torch.cat([params[n].reshape(-1).to(torch.float64) for n in names])


STEP_MISTAKES = {
    "no_zero_grad": ("the gradients are never zeroed, so they pile up across steps: call optimizer.zero_grad() "
                     "at the start of train_step.", {"skip_zero": True}),
    "zero_grad_after_backward": ("the gradients are zeroed after backward(), so the optimizer steps on zeros: zero "
                                 "them before the forward pass.", {"zero_late": True}),
    "scheduler_before_optimizer": ("scheduler.step() runs before optimizer.step(), so every step uses the next "
                                   "step's learning rate: step the optimizer first.", {"sched_first": True}),
    "loss_on_tgt_in": ("the loss compares the logits with tgt_in; the targets are tgt_out (the next tokens).",
                       {"loss_on_tgt_in": True}),
    "clip_after_step": ("the gradients are clipped after optimizer.step(), when they no longer matter: clip between "
                        "backward() and optimizer.step().", {"clip_late": True}),
}
STEP_DEVIATIONS = [(CATALOGUE.mistake(k, text), dev) for k, (text, dev) in STEP_MISTAKES.items()]


# ---- groups -------------------------------------------------------------------------------------------

@group("m5", "tokenizer")
def tokenizer(t: Tester):
    texts = ["hello world", "dates 2021-03-03", "zebra!"]
    chars = sorted(set("".join(texts)))
    stoi = {c: i + 4 for i, c in enumerate(chars)}
    probes = ["hello", "2021 z?", "", "~x!"]
    got = t.run(recipe_tokenizer, texts, probes, what="`CharTokenizer`")["value"]
    for name, want in (("pad_id", 0), ("bos_id", 1), ("eos_id", 2), ("unk_id", 3), ("vocab_size", 4 + len(chars))):
        if got.get(name) != want:
            t.fail(f"CharTokenizer({texts}).{name} should be {want}, but it is {describe(got.get(name))}. Ids 0-3 are "
                   f"<pad>, <bos>, <eos>, <unk>; then one id per distinct character, in sorted order.",
                   TOKENIZER_SPECIALS if name != "vocab_size" else TOKENIZER_VOCAB_SIZE)
    for text, ids in zip(probes, got["encoded"]):
        want = [stoi.get(c, UNK) for c in text]
        if list(ids) != want:
            insertion = {c: i + 4 for i, c in enumerate(dict.fromkeys("".join(texts)))}
            if list(ids) == [insertion.get(c, UNK) for c in text]:
                t.fail(f"encode({text!r}) gives {ids}: the characters are numbered in the order they first appear; "
                       f"number them in sorted order (sorted(set(...))), so the vocabulary does not depend on the "
                       f"order of the texts.", TOKENIZER_UNSORTED)
            t.fail(f"CharTokenizer({texts}).encode({text!r}) should be {want} (an unknown character gives unk_id = 3), "
                   f"but it is {ids}.", TOKENIZER_ENCODE)
    cases = [[stoi["h"], stoi["e"], EOS, stoi["l"]], [BOS, stoi["z"], PAD, stoi["!"], EOS], [UNK, stoi["a"]],
             [PAD, PAD], [BOS, EOS, stoi["d"]]]
    wants = ["he", "z!", "<unk>a", "", ""]
    got = t.run(recipe_decode, texts, cases, what="`CharTokenizer.decode`")["value"]
    for ids, want, have in zip(cases, wants, got):
        if have != want:
            t.fail(f"decode({ids}) should be {want!r} (stop at the first <eos>, skip <pad> and <bos>, write <unk> as the "
                   f"five characters '<unk>'), but it is {describe(have)}.", TOKENIZER_DECODE)


def _batch_cases(t: Tester):
    return [([[5, 6, 7], [8], [9, 10]], [[11], [4, 5, 6, 7], []]),
            ([[4, 4]], [[5, 6]]),
            ([[6], [7, 8, 9, 10, 11]], [[4, 5], [6]])]


@group("m5", "batches", provides=("make_batch",))
def batches(t: Tester):
    for src_ids, tgt_ids in _batch_cases(t):
        reply = t.call("make_batch", src_ids, tgt_ids, PAD, BOS, EOS, return_args=True)
        got = reply["value"]
        got = got.get("__dict__") if isinstance(got, dict) and "__dict__" in got else got
        what = f"`make_batch({src_ids}, {tgt_ids}, pad_id=0, bos_id=1, eos_id=2)`"
        if not isinstance(got, dict):
            t.fail(f"{what} should return a dict with src, tgt_in, tgt_out, src_mask, tgt_mask; it returned "
                   f"{describe(got)}.", BATCH_NOT_DICT)
        want = expected_batch(src_ids, tgt_ids)
        for key, value in want.items():
            have = got.get(key)
            label = f"{what}[{key!r}]"
            # A known mistake may change the shape too (<bos> in tgt_out adds a column): look it up first.
            cause = None if _same(have, value) else next(
                (m for m, v in CATALOGUE.tried("batch", src_ids, tgt_ids) if _same(have, v[key])), None)
            text = f" Likely cause: {cause.text}" if cause else ""
            if cause and have.shape != value.shape:
                t.fail(f"{label} should have shape {shape_str(value.shape)}, but it has shape "
                       f"{shape_str(have.shape)}.{text}", cause)
            have = t.expect_tensor(have, label, shape=value.shape)
            if have.dtype != value.dtype:
                t.fail(f"{label} has dtype {str(have.dtype).replace('torch.', '')}; it should be "
                       f"{str(value.dtype).replace('torch.', '')} ({'masks are bool' if value.dtype == torch.bool else 'ids are int64'}).",
                       BATCH_DTYPE)
            if not torch.equal(have, value):
                t.fail(f"{label} {_first_difference(have, value)}{text}", cause)
        if reply["args_after"][:2] != [src_ids, tgt_ids]:
            t.fail(f"{what} changed the lists it was given: build new lists, do not append to the caller's.",
                   INPUT_MODIFIED)


def _same(a, b) -> bool:
    """Same shape, dtype and values (torch.equal alone ignores the dtype)."""
    return isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _first_difference(have, want) -> str:
    """'should be [...], but it is [...].' for a small tensor; for a larger one (a [B, Lt, Lt] mask), the
    first entry that differs, with that row of both."""
    if want.numel() <= 16:
        return f"should be {want.tolist()}, but it is {have.tolist()}."
    idx = [int(i) for i in torch.nonzero(have != want)[0]]
    row = tuple(idx[:-1])
    return (f"differs first at {idx}: it is {have[tuple(idx)].item()}, it should be {want[tuple(idx)].item()}. "
            f"Row {list(row)} should be {want[row].tolist()}, but it is {have[row].tolist()}.")


@group("m5", "loss", provides=("label_smoothed_cross_entropy",))
def loss(t: Tester):
    cases = []
    for smoothing in (0.0, 0.1):
        for pad_id in (None, PAD):
            cases.append((t.randn(3, 5, V) * 3, smoothing, pad_id, "float64"))
    cases.append((t.randn(4, V, dtype=torch.float32) * 3, 0.1, PAD, "float32 [4, V]"))
    cases.append((t.randn(2, 3, V) * 1e4, 0.1, PAD, "logits around 1e4"))
    cases.append((t.randn(2, 3, V, dtype=torch.float32) * 1e4, 0.0, PAD, "float32 logits around 1e4"))
    for logits, smoothing, pad_id, label in cases:
        target = t.randint(1, V, logits.shape[:-1])
        if pad_id is not None and logits.dim() == 3:
            target[0, 3:] = pad_id
            target[1, :] = pad_id         # a row that is all padding (the batch still has real targets)
        g = t.randn(()) .abs() + 0.5
        what = (f"`label_smoothed_cross_entropy(logits {shape_str(logits.shape)}, target, smoothing={smoothing}, "
                f"pad_id={pad_id})` ({label})")
        reply = t.call("label_smoothed_cross_entropy", logits, target, smoothing=smoothing, pad_id=pad_id,
                       grad_args=[0], backward=[g])
        got = reply["value"]
        if isinstance(got, (int, float)):
            t.fail(f"{what} returns a Python number ({got!r}); it must return a scalar tensor that stays in the "
                   f"autograd graph (no .item() or float()), or training gets no gradient.", GRAPH_CUT.saying('the loss must stay a tensor in the autograd graph (no .item() or float()).'))
        got = t.expect_tensor(got, what)
        if got.dim() != 0:
            t.fail(f"{what} should return a scalar (0-dim) tensor, but it has shape {shape_str(got.shape)}: take the "
                   f"mean over the non-pad positions.", LOSS_NOT_SCALAR)
        if not torch.isfinite(got):
            t.fail(f"{what} is {got.item()}. Likely cause: {_naive_loss.text}", _naive_loss)
        leaf = logits.clone().requires_grad_(True)
        want = expected_loss(leaf, target, smoothing, pad_id)
        want.backward(g)
        t.expect_close(got, want.detach(), f"The value of {what}",
                       lambda: CATALOGUE.tried("loss", logits, target, smoothing, pad_id))
        if reply.get("grads") is None or reply["grads"][0] is None:
            t.fail(f"No gradient reached the logits through {what}: {reply.get('grad_problem') or 'compute it with torch operations'} "
                   f"(a Python float or .item() cuts the graph).", GRAPH_CUT)
        t.expect_close(reply["grads"][0], leaf.grad, f"The gradient of {what} with respect to the logits")


@group("m5", "schedule", provides=("noam_lr", "make_optimizer"))
def schedule(t: Tester):
    for step, d_model, warmup, factor in ((0, 512, 4000, 1.0), (1, 512, 4000, 1.0), (10, 512, 4000, 1.0),
                                          (4000, 512, 4000, 1.0), (4001, 512, 4000, 1.0), (100000, 512, 4000, 1.0),
                                          (30, 64, 20, 2.0)):
        what = f"`noam_lr({step}, {d_model}, {warmup}, factor={factor})`"
        try:
            reply = t.call("noam_lr", step, d_model, warmup, factor=factor)
        except CheckFailed as e:
            if step == 0 and ("ZeroDivisionError" in str(e) or "negative power" in str(e)):
                t.fail(f"{e} Likely cause: step 0 must count as step 1 (0^-0.5 divides by zero): step = max(step, 1).",
                       NOAM_STEP_ZERO)
            raise
        got, want = reply["value"], noam(step, d_model, warmup, factor)
        if not isinstance(got, (int, float)) and not (torch.is_tensor(got) and got.numel() == 1):
            t.fail(f"{what} should return a number, but it returned {describe(got)}.")
        got = float(got)
        if not math.isclose(got, want, rel_tol=1e-9):
            cause = None
            if math.isclose(got, noam(step + 1, d_model, warmup, factor), rel_tol=1e-9):
                cause = NOAM_OFF_BY_ONE
            elif math.isclose(got, noam(step, d_model, warmup), rel_tol=1e-9):
                cause = NOAM_FACTOR_IGNORED
            text = f" Likely cause: {cause.text}" if cause else ""
            t.fail(f"{what} should be {want:.10g}, but it is {got:.10g}.{text}", cause)
    info = t.run(recipe_optimizer, 64, 10, 1.0, 12, what="`make_optimizer`")["value"]
    if info["type"] != "Adam":
        t.fail(f"make_optimizer should build torch.optim.Adam, but built {info['type']}.", OPTIMIZER_KIND)
    if [round(b, 6) for b in info["betas"]] != [0.9, 0.98] or not math.isclose(info["eps"] or 0, 1e-9):
        t.fail(f"make_optimizer's Adam should have the paper's betas (0.9, 0.98) and eps 1e-9; it has betas "
               f"{info['betas']} and eps {info['eps']}.", ADAM_SETTINGS)
    if not info["same_params"]:
        t.fail("make_optimizer's optimizer should hold the model's parameters (model.parameters()).")
    if info["base_lr"] is None or not math.isclose(info["base_lr"], 1.0):
        t.fail(f"make_optimizer's Adam should have base lr 1.0 (the LambdaLR multiplies it by noam_lr); it has "
               f"{info['base_lr']}.", BASE_LR)
    want = [noam(s, 64, 10) for s in range(13)]
    if not all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(info["lrs"], want)):
        shifted = [noam(s + 1, 64, 10) for s in range(13)]
        off = all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(info["lrs"], shifted))
        t.fail(f"After s scheduler steps the learning rate should be noam_lr(s, 64, 10): {[f'{x:.4g}' for x in want[:5]]}"
               f"...; make_optimizer's gives {[f'{x:.4g}' for x in info['lrs'][:5]]}..." +
               (" Likely cause: the schedule is one step ahead." if off else ""),
               NOAM_OFF_BY_ONE if off else SCHEDULER_VALUES)


def _train_inputs(t: Tester):
    p = model_params(t, V, V, 1, False)
    table = pe_table(MAX_LEN, D)
    pairs = [([[5, 6, 7], [8, 9]], [[7, 6, 5], [9]]), ([[4, 10, 11, 5]], [[5, 11, 10, 4]])]
    batches_ = [expected_batch(s, tg) for s, tg in pairs]
    return p, table, batches_


def _compare_steps(t: Tester, got, p, batches_, what, names, **kw):
    want, _ = judge_steps(p, batches_, len(got["params"]), **kw)
    for i in sorted({0, len(want) - 1}):
        mistakes = lambda i=i: [(mistake, flat(judge_steps(p, batches_, i + 1, **{**kw, **dev})[0][i], names))
                                for mistake, dev in STEP_DEVIATIONS]
        t.expect_close(flat(got["params"][i], names), flat(want[i], names),
                       f"The parameters after {i + 1} call(s) of {what}", mistakes, atol=1e-8)


@group("m5", "train_step", depends=("loss", "schedule"))
def train_step(t: Tester):
    p, table, batches_ = _train_inputs(t)
    names = sorted(p)
    what = "`train_step(model, batch, optimizer, pad_id=0, scheduler)` (Adam, warm-up schedule, float64)"
    got = t.run(recipe_train, p, table, V, 1, batches_, 3, "adam", 0.0, None, 4, what=what)["value"]
    for r in got["returned"]:
        if not isinstance(r, float):
            holds = isinstance(r, dict) and r.get("requires_grad")
            t.fail(f"{what} should return the loss as a Python float (loss.item()), but it returned a "
                   f"{r.get('type') if isinstance(r, dict) else type(r).__name__}" +
                   (" that still holds the autograd graph" if holds else "") + ".", LOSS_RETURNED_AS_TENSOR)
    _compare_steps(t, got, p, batches_, what, names)
    _, losses = judge_steps(p, batches_, 3)
    for i, (a, b) in enumerate(zip(got["returned"], losses)):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            n = int((batches_[i % len(batches_)]["tgt_out"] != PAD).sum())
            total = (f" That is the loss times the batch's {n} non-pad target tokens (a total): return the mean."
                     if math.isclose(a, b * n, rel_tol=1e-9) else "")
            t.fail(f"Call {i + 1} of {what} returned {a:.10g}; the loss of that batch before the update is "
                   f"{b:.10g}.{total}", WRONG_LOSS_RETURNED)
    if not got["training"]:
        t.fail(f"After {what} the model is in eval mode: train_step must call model.train() (dropout is part of "
               f"training).", EVAL_MODE_IN_TRAIN)
    stale = t.run(recipe_train, p, table, V, 1, batches_, 2, "adam", 0.1, None, 4, stale_grads=True,
                  what=f"{what} with gradients left from before")["value"]
    _compare_steps(t, stale, p, batches_, "`train_step` (smoothing 0.1) on a model holding old gradients", names,
                   smoothing=0.1, stale=True)
    clipped = t.run(recipe_train, p, table, V, 1, batches_, 2, "sgd", 0.0, 0.05, 4,
                    what="`train_step(..., clip_norm=0.05)` with plain SGD")["value"]
    _compare_steps(t, clipped, p, batches_, "`train_step(..., clip_norm=0.05)` with SGD (lr 0.1)", names,
                   optimizer="sgd", clip_norm=0.05)
    drop = t.run(recipe_train, p, table, V, 1, batches_, 1, "adam", 0.0, None, 4, dropout=0.5, what=what)["value"]
    nodrop = t.run(recipe_train, p, table, V, 1, batches_, 1, "adam", 0.0, None, 4, dropout=0.0, what=what)["value"]
    if math.isclose(drop["returned"][0], nodrop["returned"][0], rel_tol=1e-12):
        t.fail(f"{what} on a model with dropout=0.5 gives the same loss as without dropout: the step runs in eval "
               f"mode. Call model.train() first.", EVAL_MODE_IN_TRAIN)


@group("m5", "evaluate", depends=("loss",))
def evaluate(t: Tester):
    p, table, batches_ = _train_inputs(t)
    judge = TorchModel(p, 1, False, "relu", torch.float64, MAX_LEN).eval()
    total = count = 0
    per_batch = []
    with torch.no_grad():
        for b in batches_:
            logits = judge(b["src"], b["tgt_in"], b["src_mask"], b["tgt_mask"])
            n = int((b["tgt_out"] != PAD).sum())
            loss_ = expected_loss(logits, b["tgt_out"], 0.0, PAD).item()
            total, count = total + loss_ * n, count + n
            per_batch.append(loss_)
    want = total / count
    for mode in ("train", "eval"):
        what = f"`evaluate(model, batches, pad_id=0)` on a model in {mode} mode with dropout=0.5"
        reply = t.run(recipe_evaluate, p, table, V, batches_, 0.5, mode, what=what)
        got = {**reply["value"], "train_during": dropout_ran(reply["record"]),
               "grad_enabled": reply["record"]["grad_ops"] > 0}
        value = got["value"]
        if not isinstance(value, float):
            t.fail(f"{what} should return a Python float, but it returned {describe(value)}.", LOSS_RETURNED_AS_TENSOR)
        if got["train_during"]:
            t.fail(f"{what}: the model ran in training mode (dropout on); evaluate switches to model.eval().",
                   EVALUATE_IN_TRAIN_MODE)
        if not math.isclose(value, want, rel_tol=1e-9):
            cause = None
            if math.isclose(value, sum(per_batch) / len(per_batch), rel_tol=1e-9):
                cause = MEAN_OF_BATCH_MEANS
            text = f" Likely cause: {cause.text}" if cause else ""
            t.fail(f"{what} should be {want:.10g} (plain cross-entropy per non-pad target token), but it is "
                   f"{value:.10g}.{text}", cause)
        if got["grad_enabled"]:
            t.fail(f"{what}: the forward passes ran with gradients enabled; wrap them in torch.no_grad().",
                   EVALUATE_WITH_GRAD)
        if any(after != (mode == "train") for after in got["modes_after"]):
            now = "train" if got["modes_after"][0] else "eval"
            some = "" if len(set(got["modes_after"])) == 1 else " (some of its submodules are not)"
            t.fail(f"{what}: afterwards the model is in {now} mode{some}; evaluate must put back the mode it found "
                   f"(model.train(was_training) sets every submodule).", EVALUATE_MODE_NOT_RESTORED)


# The student's own train_step, by the contract (no stand-in): a wrong train_step that also stops
# learning loses these points too, and the message says where the cause was found.
@group("m5", "learning", depends=("loss", "schedule", "batches", "train_step"))
def learning(t: Tester):
    src = [[4 + (7 * i + 3 * j) % 8 for j in range(5)] for i in range(8)]
    batch = expected_batch(src, src)
    got = t.run(recipe_learn, batch, V, 150, 0, pe_table(MAX_LEN, D).float(),
                what="150 steps of `train_step` with `make_optimizer`")["value"]
    first, final = (judge_loss(got[k], batch) for k in ("first", "final"))
    if not final < 0.5:
        opt = "the correct make_optimizer" if "make_optimizer" in t.patches else "your make_optimizer"
        above = (" Your train_step failed above: fix that first, the same mistake can stop learning."
                 if "train_step" in t.failed_above else "")
        t.fail(f"A Transformer(d_model=8, 1 layer) trained with your train_step and {opt} for 150 steps on one "
               f"batch of 8 copy examples should overfit it (the course's code reaches a loss below 0.01; the limit "
               f"is 0.5), but the grader measures its loss going from {first:.3f} to {final:.3f}.{above}",
               DOES_NOT_LEARN)


def judge_loss(params, batch) -> float:
    """Cross-entropy of the batch under the judge's own Transformer holding `params` (eval mode)."""
    if not isinstance(params, dict) or any(not isinstance(v, torch.Tensor) for v in params.values()):
        raise CheckFailed("The model's parameters could not be read back after training.")
    try:
        model = TorchModel({k: v.float() for k, v in params.items()}, 1, False, "relu", torch.float32, MAX_LEN).eval()
        with torch.no_grad():
            logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
            return float(expected_loss(logits, batch["tgt_out"], 0.0, PAD))
    except (KeyError, RuntimeError) as e:
        raise CheckFailed(f"After training, the model's parameters no longer have their shapes ({e}).") from None


@group("m5", "from_scratch", style=True, observes=True)      # judges the student's own loss: never a stand-in
def from_scratch(t: Tester):
    counts = {}
    b, n = t.grown(2, 9, 25), t.grown(3, 9, 25)                 # beyond any small padded count
    for label, shape in (("base", (2, 3, V)), (f"the batch grew from 2 to {b}", (b, 3, V)),
                         (f"the length grew from 3 to {n}", (2, n, V))):
        logits, target = t.randn(*shape), t.randint(1, V, shape[:-1])
        reply = t.call("label_smoothed_cross_entropy", logits, target, smoothing=0.1, pad_id=PAD, record=True)
        t.works(reply["value"], expected_loss(logits, target, 0.1, PAD), "`label_smoothed_cross_entropy`")
        t.expect_allowed(reply["record"], "label_smoothed_cross_entropy")
        counts[label] = reply["record"]["op_count"]
    t.expect_constant_ops(counts, "base size", "label_smoothed_cross_entropy",
                          "Flatten to [N, V] and compute every position at once.", limit=50)
