"""Hidden checks for milestone 5: tokenizer, batches, the loss, the Noam schedule, train_step, evaluate.

The judge computes its own answers: the tokenizer and batch contracts directly, the loss with
F.cross_entropy, and every training step with its own model (reference.TorchModel: PyTorch's layers)
and torch.optim.Adam, from the same weights and batch. The student's train_step and evaluate run in
the worker on the course's reference Transformer (milestone 4), built there by judge recipes; only
tensors and numbers come back. CATALOGUE names the known mistakes. The loss and the schedule have
stand-ins, so train_step, evaluate and learning are graded on their own merits when those are wrong.

This module holds the check groups and the helpers that read the worker's replies for them; the judge's
answers are in answers.py, the recipes sent to the worker in recipes.py, the mistakes in mistakes.py,
the stand-ins in stand_ins.py.
"""
from __future__ import annotations

import math
import re

import torch

from autograder.grading import diagnosis
from autograder.grading.checks import (
    TOLERANCES, CheckFailed, Tester, describe, dtype_str, group, shape_str, student_error)
from autograder.milestones.reference import D, TorchModel, model_params, pe_table
from autograder.milestones.m5 import stand_ins as _stand_ins  # noqa: F401  (registers the stand-ins)
from autograder.milestones.m5.answers import (
    BOS, EOS, MAX_LEN, PAD, UNK, V, expected_batch, expected_evaluate, expected_loss, judge_logits, judge_steps, noam,
    STEP_DEVIATIONS)
from autograder.milestones.m5.mistakes import (
    CATALOGUE, ALL_PAD_LOSS_ZERO, ADAM_SETTINGS, BASE_LR, BATCH_DTYPE, BATCH_NOT_DICT, DOES_NOT_LEARN, EVALUATE_IN_TRAIN_MODE,
    EVALUATE_MODE_NOT_RESTORED, EVALUATE_NO_TOKENS, EVALUATE_WITH_GRAD, EVAL_MODE_IN_TRAIN, GRAD_DTYPE_CHANGED,
    GRAPH_CUT, INPUT_MODIFIED, LOSS_NOT_SCALAR, LOSS_RETURNED_AS_TENSOR, NOAM_FACTOR_IGNORED, NOAM_OFF_BY_ONE,
    NOAM_STEP_ZERO, OPTIMIZER_FACTOR_IGNORED, OPTIMIZER_KIND, RETURNS_UNSMOOTHED, SCHEDULER_VALUES,
    DECODE_PAST_EOS, DECODE_STOPS_AT_PAD, TOKENIZER_DECODE, TOKENIZER_ENCODE, TOKENIZER_SPECIALS, TOKENIZER_UNKNOWN_CRASH, TOKENIZER_UNSORTED,
    TOKENIZER_VOCAB_SIZE, TRAIN_MODE_BY_FLAG, WRONG_LOSS_RETURNED)
from autograder.milestones.m5.recipes import (  # noqa: F401  (WORKER_PRELOAD: read here by grade.worker_preload)
    WORKER_PRELOAD, recipe_decode, recipe_evaluate, recipe_learn, recipe_optimizer, recipe_tokenizer, recipe_train)

# A padding id other than the tokenizer's 0, for every function that takes pad_id as an argument (make_batch, the
# loss, train_step, evaluate): code that writes 0 where it means pad_id gives the right answers with pad_id=0 only.
# The inputs with this id hold real tokens 0 as well.
OTHER_PAD = 7


# ---- reading what came back ---------------------------------------------------------------------------

def dropout_ran(record) -> bool:
    """Did a dropout layer drop anything (a model in training mode)? Seen in the ops that ran: PyTorch's
    dropout draws its mask with bernoulli_ (or a fused native_dropout)."""
    return any(record["counts"].get(op, 0) for op in ("aten::native_dropout", "aten::bernoulli_"))


def flat(params: dict, names, dtype=torch.float64) -> torch.Tensor:
    return torch.cat([params[n].reshape(-1).to(dtype) for n in names])


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
        if isinstance(ids, dict) and "error" in ids:
            _encode_raised(t, texts, text, ids, want, stoi)
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
        if isinstance(have, dict) and "error" in have:
            unk = " The id 3 is unk_id, which has no character: decode writes it as the five characters '<unk>'." \
                if UNK in ids and have["message"] == str(UNK) else ""
            t.fail(f"`CharTokenizer({texts}).decode({ids})` raised {have['error']}: {have['message']}; it should return "
                   f"{want!r}.{unk}", TOKENIZER_DECODE)
        if have != want:
            known = diagnosis.reproducing([(DECODE_PAST_EOS, _decoded(ids, stoi, stop=(), skip=(PAD, BOS, EOS))),
                                 (DECODE_STOPS_AT_PAD, _decoded(ids, stoi, stop=(EOS, PAD), skip=(BOS,)))],
                                lambda theirs: theirs == have)
            t.fail(f"decode({ids}) should be {want!r} (stop at the first <eos>, skip <pad> and <bos>, write <unk> as the "
                   f"five characters '<unk>'), but it is {describe(have)}."
                   + (f" Likely cause: {known.text}" if known else ""), known or TOKENIZER_DECODE)


def _decoded(ids, stoi, stop, skip):
    """What a decode that ends at the ids in `stop` and leaves out those in `skip` returns."""
    itos = {i: c for c, i in stoi.items()}
    out = []
    for i in ids:
        if i in stop:
            break
        if i not in skip:
            out.append("<unk>" if i == UNK else itos.get(i, ""))
    return "".join(out)


def _encode_raised(t: Tester, texts, text, error, want, stoi):
    """encode raised a lookup error on `text`: say at which call, and why when the error names the first character
    of `text` that is not in the vocabulary (a lookup with no fallback for unknown characters)."""
    call = f"`CharTokenizer({texts}).encode({text!r})`"
    unknown = next((c for c in text if c not in stoi), None)
    head = f"{call} raised {error['error']}: {error['message']}; it should return {want}."
    if unknown is not None and repr(unknown) in error["message"]:
        t.fail(f"{head} {unknown!r} is not one of the characters of the texts the tokenizer was built from, and an "
               f"unknown character gives unk_id = 3 (the docstring: \"an unknown character gives unk_id\"). Likely "
               f"cause: {TOKENIZER_UNKNOWN_CRASH.text}", TOKENIZER_UNKNOWN_CRASH)
    t.fail(head, TOKENIZER_ENCODE)


def _batch_cases(t: Tester):
    """(src_ids, tgt_ids, pad_id): the tokenizer's pad id 0, then another one with real tokens 0."""
    return [([[5, 6, 7], [8], [9, 10]], [[11], [4, 5, 6, 7], []], PAD),
            ([[4, 4]], [[5, 6]], PAD),
            ([[6], [7, 8, 9, 10, 11]], [[4, 5], [6]], PAD),
            ([[0, 5, 6], [8], [9, 0]], [[4], [0, 11, 6], [10, 10]], OTHER_PAD)]


@group("m5", "batches", provides=("make_batch",))
def batches(t: Tester):
    for src_ids, tgt_ids, pad_id in _batch_cases(t):
        reply = t.call("make_batch", src_ids, tgt_ids, pad_id, BOS, EOS, return_args=True)
        got = reply["value"]
        got = got.get("__dict__") if isinstance(got, dict) and "__dict__" in got else got
        what = f"`make_batch({src_ids}, {tgt_ids}, pad_id={pad_id}, bos_id=1, eos_id=2)`"
        if not isinstance(got, dict):
            t.fail(f"{what} should return a dict with src, tgt_in, tgt_out, src_mask, tgt_mask; it returned "
                   f"{describe(got)}.", BATCH_NOT_DICT)
        want = expected_batch(src_ids, tgt_ids, pad_id)
        for key, value in want.items():
            have = got.get(key)
            label = f"{what}[{key!r}]"
            # A known mistake may change the shape too (<bos> in tgt_out adds a column): look it up first.
            cause = None if _same(have, value) else diagnosis.alone(
                m for m, v in CATALOGUE.tried("batch", src_ids, tgt_ids, pad_id) if _same(have, v[key]))
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


def _loss_cases(t: Tester):
    """(logits, smoothing, pad_id, label). Moderate logits first (float64, float32, pad_id None, 0 and another id),
    then large ones, each breaking one unstable way of computing log-probabilities only: around 1000 and close
    together (exp(x) overflows), rows thousands apart (one global maximum fails), a row spread over 1e4 below a
    maximum of 0 (the small probabilities underflow), and logits around 1e4 (all of them)."""
    cases = []
    for smoothing in (0.0, 0.1):
        for pad_id in (None, PAD):
            cases.append((t.randn(3, 5, V) * 3, smoothing, pad_id, "float64"))
    cases.append((t.randn(4, V, dtype=torch.float32) * 3, 0.1, PAD, "float32 [4, V]"))
    # Run first (the inputs stay as drawn): a pad id other than 0 handled right rules out, below, the mistakes
    # that would have got it wrong (e.g. padding averaged in for every pad id, against pad_id 0 alone).
    cases.insert(0, (t.randn(3, 5, V) * 3, 0.1, OTHER_PAD, f"float64, pad_id={OTHER_PAD}"))
    cases.append((t.randn(3, 5, V, dtype=torch.float32) * 3, 0.0, OTHER_PAD, f"float32, pad_id={OTHER_PAD}"))
    cases.append((t.randn(3, 5, V, dtype=torch.float32) * 3, 0.1, None, "float32"))
    cases.append((t.randn(2, 3, V) * 3 + 1000, 0.1, PAD, "logits around 1000, close together in each row"))
    rows = torch.tensor([[0.0, -3000.0, 2000.0], [-5000.0, 1000.0, -1500.0]], dtype=torch.float64)[..., None]
    cases.append((t.randn(2, 3, V) * 3 + rows, 0.1, PAD, "rows thousands apart, each row's logits close together"))
    spread = t.randn(2, 3, V) * 1e4
    cases.append((spread - spread.amax(-1, keepdim=True), 0.1, PAD,
                  "each row's largest logit 0, the others spread over about 1e4 below it"))
    cases.append((t.randn(2, 3, V) * 1e4, 0.1, PAD, "logits around 1e4"))
    cases.append((t.randn(2, 3, V, dtype=torch.float32) * 1e4, 0.0, PAD, "float32 logits around 1e4"))
    return cases


def _loose_close(a, b) -> bool:
    return (isinstance(a, torch.Tensor) and tuple(a.shape) == tuple(b.shape)
            and torch.allclose(a.detach().to(torch.float64), b.detach().to(torch.float64), rtol=1e-5, atol=1e-6,
                               equal_nan=True))


def _consistent(pairs, passed):
    """The (mistake, value) pairs whose mistake also gives the right value on every input the student's code got
    right before (`passed`: (args, right value)): a mistake that would have failed one of those is not theirs."""
    out = []
    for mistake, value in pairs:
        for args, right in passed:
            try:
                theirs = mistake(*args)
            except Exception:          # the mistake cannot happen with these arguments: no evidence either way
                continue
            if theirs is not None and not _loose_close(theirs, right):
                break
        else:
            out.append((mistake, value))
    return out


def _outside_pad_cases(t: Tester):
    """(logits, smoothing, pad_id, label) with a pad_id that is not a class (outside 0..V-1): the loss equals
    F.cross_entropy(..., ignore_index=pad_id) (the docstring), which takes any ignore_index. Drawn after the other
    cases, so theirs stay as they were."""
    return [(t.randn(3, 5, V) * 3, 0.1, -100, "float64, pad_id=-100: F.cross_entropy's default ignore_index"),
            (t.randn(3, 5, V, dtype=torch.float32) * 3, 0.0, V, f"float32, pad_id={V} = V, one past the last class")]


@group("m5", "loss", provides=("label_smoothed_cross_entropy",))
def loss(t: Tester):
    passed = []
    for case in _loss_cases(t):
        _loss_case(t, *case, passed)
    for case in _outside_pad_cases(t):
        _loss_case(t, *case, passed)
    # Every target pad_id: nothing to average, and like F.cross_entropy the loss is NaN (the docstring).
    logits = t.randn(2, 3, V)
    target = torch.full((2, 3), PAD, dtype=torch.long)
    what = f"`label_smoothed_cross_entropy(logits [2, 3, {V}], target, smoothing=0.1, pad_id={PAD})` with every target pad_id"
    got = t.expect_tensor(t.call("label_smoothed_cross_entropy", logits, target, smoothing=0.1, pad_id=PAD)["value"], what)
    if got.numel() == 1 and not math.isnan(got.item()):
        t.fail(f"{what} is {got.item():.6g}; it should be NaN, as F.cross_entropy gives when every target is ignored "
               f"(the docstring)." + (f" Likely cause: {ALL_PAD_LOSS_ZERO.text}" if got.item() == 0 else ""),
               ALL_PAD_LOSS_ZERO if got.item() == 0 else None)


def _loss_case(t: Tester, logits, smoothing, pad_id, label, passed):
    """One input of the loss: value, gradient, inputs left as they were, dtype. `passed`: (args, right value) of
    the inputs the student's loss got right so far (this one is added when it is right)."""
    target = t.randint(1 if pad_id == PAD else 0, V, logits.shape[:-1])
    if pad_id != PAD:
        target.view(-1)[0] = 0        # a real target 0: with pad_id None or another id, it counts
    all_pad = pad_id is not None and logits.dim() == 3
    if all_pad:
        target[0, 3:] = pad_id
        target[1, :] = pad_id         # a row that is all padding (the batch still has real targets)
    g = t.randn(()) .abs() + 0.5
    what = (f"`label_smoothed_cross_entropy(logits {shape_str(logits.shape)}, target, smoothing={smoothing}, "
            f"pad_id={pad_id})` ({label})")
    outside = pad_id is not None and not 0 <= pad_id < V
    reply = t.call("label_smoothed_cross_entropy", logits, target, smoothing=smoothing, pad_id=pad_id,
                   grad_args=[0], backward=[g], return_args=True, allow_error=outside)
    if not reply.get("ok", True):
        _outside_pad_raised(t, reply, what, (logits, target, smoothing, pad_id), passed)
    got = reply["value"]
    if isinstance(got, (int, float)):
        t.fail(f"{what} returns a Python number ({got!r}); it must return a scalar tensor that stays in the "
               f"autograd graph (no .item() or float()), or training gets no gradient.", GRAPH_CUT.saying('the loss must stay a tensor in the autograd graph (no .item() or float()).'))
    got = t.expect_tensor(got, what)
    if got.dim() != 0:
        t.fail(f"{what} should return a scalar (0-dim) tensor, but it has shape {shape_str(got.shape)}: take the "
               f"mean over the non-pad positions.", LOSS_NOT_SCALAR)
    leaf = logits.clone().requires_grad_(True)
    want = expected_loss(leaf, target, smoothing, pad_id)
    want.backward(g)
    args = (logits, target, smoothing, pad_id)
    mistakes = lambda args=args: _consistent(CATALOGUE.tried("loss", *args), passed)     # noqa: E731
    if not bool(torch.isfinite(got)):
        _not_finite(t, got, want.detach(), what, mistakes,
                    f"{label}; row 1 of the targets is all pad_id, the other rows have real targets" if all_pad
                    else label)
    t.expect_close(got, want.detach(), f"The value of {what}", mistakes)
    passed.append((args, want.detach()))
    if reply.get("grads") is None or reply["grads"][0] is None:
        t.fail(f"No gradient reached the logits through {what}: {reply.get('grad_problem') or 'compute it with torch operations'} "
               f"(a Python float or .item() cuts the graph).", GRAPH_CUT)
    t.expect_close(reply["grads"][0], leaf.grad, f"The gradient of {what} with respect to the logits")
    _inputs_unchanged(t, reply.get("args_after") or [], (logits, target), pad_id, what)
    if got.dtype != logits.dtype:
        t.fail(f"{what} returns a {dtype_str(got.dtype)} tensor for {dtype_str(logits.dtype)} logits; the loss is in "
               f"the dtype of logits (create any new tensor with dtype=logits.dtype).",
               diagnosis.DTYPE_LOWERED if logits.dtype == torch.float64 else diagnosis.DTYPE_CHANGED)


def _outside_pad_raised(t: Tester, reply, what, args, passed):
    """The loss raised on a pad_id that is not a class: say which argument held which value and the rule that allows
    it. A known mistake is named when its own computation raises the same error on these arguments (same type and
    words), gives the right value on every input the student's loss got right before, and no other one does."""
    if reply.get("kind") != "exception":
        raise CheckFailed(student_error(reply, what))
    logits, target, smoothing, pad_id = args
    n = int((target == pad_id).sum())
    Vv = logits.size(-1)
    error_type, message = reply.get("type"), reply.get("message")
    head = f"{what} raised {error_type}: {message}"
    named = (", and it is the index the error names"
             if re.search(rf"\b(index|id=)\s*{re.escape(str(pad_id))}(?!\d)", message or "") else "")
    cause = diagnosis.alone(m for kind in ("loss", "loss_errors") for m in CATALOGUE.entries.get(kind, [])
                            if _raises(m, args, error_type, message) and _right_on(m, passed))
    text = (f"{head}\nHere `target` holds pad_id = {pad_id} at its {n} padded positions; {pad_id} is not a class "
            f"(logits [..., {Vv}]: classes 0..{Vv - 1}){named}. pad_id need not be a class: the loss equals "
            f"F.cross_entropy(..., ignore_index=pad_id, ...) (the docstring), which takes any ignore_index (-100 is "
            f"its default).")
    if cause is not None:
        text += f" Likely cause: {cause.text}"
    else:
        text += (" A padded target must never serve as an index (gather, indexing, one_hot, scatter): give those "
                 "positions a safe index first, e.g. torch.where(keep, target, 0); their cost is left out anyway.")
    tb = reply.get("traceback") or ""
    t.fail(text + (f"\n{tb}" if tb else ""), cause)


def _raises(mistake, args, error_type, message) -> bool:
    """Does the mistake's own computation raise the student's error (same type, same words) on `args`?"""
    try:
        mistake(*args)
    except Exception as e:
        return diagnosis.same_error(e, error_type, message)
    return False


def _right_on(mistake, passed) -> bool:
    """Does the mistake's own computation give the right value on every input the student's loss got right
    (`passed`)? One that raises or differs there is not the student's."""
    for args, right in passed:
        try:
            if not _loose_close(mistake(*args), right):
                return False
        except Exception:
            return False
    return True


def _inputs_unchanged(t: Tester, after, before, pad_id, what):
    """The loss's arguments (logits, target) came back as they were given (the docstring: the inputs are not
    modified)."""
    for name, given, back in zip(("logits", "target"), before, after):
        if isinstance(back, torch.Tensor) and back.shape == given.shape and torch.equal(back.detach(), given):
            continue
        how = ""
        if name == "target" and isinstance(back, torch.Tensor) and back.shape == given.shape:
            changed = given != back
            if bool((given[changed] == pad_id).all()):
                now = sorted(set(back[changed].tolist()))
                how = f": its entries equal to pad_id = {pad_id} came back as {', '.join(map(str, now))}"
        t.fail(f"{what} changed its input `{name}` in place{how}. Inputs must not be modified: use out-of-place "
               f"operations (torch.where(keep, target, 0) for a safe index, not target[...] = 0, which also writes "
               f"through a view such as target.reshape(-1) or target.view(-1); clone first if you must write).",
               INPUT_MODIFIED)


def _not_finite(t: Tester, got, want, what, mistakes, holds):
    """The loss is inf or NaN where the right value is finite: the mistake whose own computation gives the same
    inf or NaN here (and the right values where the student's were right), else what this input holds."""
    value = got.item()
    shown = "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    head = f"{what} is {shown}, where the right value is {want.item():.6g}."
    cause = t.explain(got, want, mistakes)
    if cause is not None:
        t.fail(f"{head} Likely cause: {cause.text}", cause)
    t.fail(f"{head} This input: {holds}. Some step of your computation is not finite on it (exp overflows to inf "
           f"above about 709 in float64 and 88 in float32, underflows to 0 below about -745 and -104; log(0) = -inf; "
           f"0 / 0, inf - inf and 0 * inf give NaN), though every value the right computation needs is finite.")


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
    for d_model, warmup, factor, steps in ((64, 10, 1.0, 12), (32, 5, 2.0, 8)):
        _check_optimizer(t, d_model, warmup, factor, steps)


def _check_optimizer(t: Tester, d_model, warmup, factor, steps):
    call = f"make_optimizer(model, d_model={d_model}, warmup_steps={warmup}, factor={factor})"
    info = t.run(recipe_optimizer, d_model, warmup, factor, steps, what="`make_optimizer`")["value"]
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
    want = [noam(s, d_model, warmup, factor) for s in range(steps + 1)]
    if not all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(info["lrs"], want)):
        def same(lrs):
            return lrs != want and all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(info["lrs"], lrs))
        cause = diagnosis.reproducing(
            [(NOAM_OFF_BY_ONE, [noam(s + 1, d_model, warmup, factor) for s in range(steps + 1)]),
             (OPTIMIZER_FACTOR_IGNORED, [noam(s, d_model, warmup) for s in range(steps + 1)])], same)
        t.fail(f"After s scheduler steps of {call} the learning rate should be noam_lr(s, {d_model}, {warmup}, "
               f"factor={factor}): {[f'{x:.4g}' for x in want[:5]]}...; make_optimizer's gives "
               f"{[f'{x:.4g}' for x in info['lrs'][:5]]}..." + (f" Likely cause: {cause.text}" if cause else ""),
               cause or SCHEDULER_VALUES)


def _train_inputs(t: Tester):
    p = model_params(t, V, V, 1, False)
    table = pe_table(MAX_LEN, D)
    pairs = [([[5, 6, 7], [8, 9]], [[7, 6, 5], [9]]), ([[4, 10, 11, 5]], [[5, 11, 10, 4]])]
    batches_ = [expected_batch(s, tg) for s, tg in pairs]
    return p, table, batches_


def _other_pad_batches():
    """Batches padded with OTHER_PAD, holding real tokens 0 (sources and targets)."""
    pairs = [([[5, 0, 6], [8, 9]], [[6, 0, 5], [9]]), ([[4, 10, 11, 5]], [[5, 11, 0, 4]])]
    return [expected_batch(s, tg, OTHER_PAD) for s, tg in pairs]


def _compare_steps(t: Tester, got, p, batches_, what, names, **kw):
    """The parameters after the first and the last call against the judge's own steps. A known mistake is named
    when its own steps give the student's parameters after every compared call and the gradients left after the
    last one (clipping after the step and not clipping move the parameters alike; only the gradients left
    differ). Returns the judge's losses: (stepped on, plain cross-entropy) of each call."""
    steps = len(got["params"])
    dtype = kw.get("dtype", torch.float64)
    atol, rtol = (1e-8, TOLERANCES[torch.float64][1]) if dtype == torch.float64 else TOLERANCES[dtype]
    want, losses, plain = judge_steps(p, batches_, steps, **kw)
    compared = sorted({0, steps - 1})
    grads = ["grad:" + n for n in names]

    def trajectory(snapshots):
        parts = [flat(snapshots[i], names, dtype) for i in compared]
        if all(g in snapshots[-1] for g in grads):
            parts.append(flat(snapshots[-1], grads, dtype))
        return torch.cat(parts)

    theirs, found = trajectory(got["params"]), {}

    def fitting():
        """(mistake, its snapshots) of every known mistake whose whole trajectory is the student's."""
        if "pairs" not in found:
            right = trajectory(want)
            found["pairs"] = []
            for mistake, dev in STEP_DEVIATIONS:
                snapshots = judge_steps(p, batches_, steps, **{**kw, **dev})[0]
                if diagnosis.matches(theirs, trajectory(snapshots), right, atol, rtol):
                    found["pairs"].append((mistake, snapshots))
        return found["pairs"]

    for i in compared:
        t.expect_close(flat(got["params"][i], names, dtype), flat(want[i], names, dtype),
                       f"The parameters after {i + 1} call(s) of {what}",
                       lambda i=i: [(m, flat(snapshots[i], names, dtype)) for m, snapshots in fitting()],
                       atol=atol)
    return losses, plain


def _check_float_returned(t: Tester, got, what):
    for r in got["returned"]:
        if not isinstance(r, float):
            holds = isinstance(r, dict) and r.get("requires_grad")
            t.fail(f"{what} should return the loss as a Python float (loss.item()), but it returned a "
                   f"{r.get('type') if isinstance(r, dict) else type(r).__name__}" +
                   (" that still holds the autograd graph" if holds else "") + ".", LOSS_RETURNED_AS_TENSOR)


def _check_returned(t: Tester, got, batches_, what, judged, smoothing=0.0):
    """train_step returns the loss it stepped on (smoothed, before the update). `judged`: the judge's losses
    (stepped on, plain) from _compare_steps."""
    losses, plain = judged
    for i, (a, b) in enumerate(zip(got["returned"], losses)):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            n = int((batches_[i % len(batches_)]["tgt_out"] != PAD).sum())
            if math.isclose(a, plain[i], rel_tol=1e-9) and not math.isclose(b, plain[i], rel_tol=1e-9):
                t.fail(f"Call {i + 1} of {what} returned {a:.10g}, the cross-entropy of that batch without smoothing; "
                       f"the loss it stepped on (smoothing {smoothing}, before the update) is {b:.10g}. "
                       f"Likely cause: {RETURNS_UNSMOOTHED.text}", RETURNS_UNSMOOTHED)
            total = (f" That is the loss times the batch's {n} non-pad target tokens (a total): return the mean."
                     if math.isclose(a, b * n, rel_tol=1e-9) else "")
            t.fail(f"Call {i + 1} of {what} returned {a:.10g}; the loss of that batch before the update is "
                   f"{b:.10g}.{total}", WRONG_LOSS_RETURNED)


def _grad_dtype(reply):
    """A float32 run whose train_step gave a parameter a gradient of another dtype: PyTorch's own message."""
    message = reply.get("message") or ""
    known = ("assigned grad has data of a different type", "assign a gradient with dtype")
    return GRAD_DTYPE_CHANGED if any(k in message for k in known) else None


@group("m5", "train_step", depends=("loss", "schedule"))
def train_step(t: Tester):
    p, table, batches_ = _train_inputs(t)
    names = sorted(p)
    what = "`train_step(model, batch, optimizer, pad_id=0, scheduler)` (Adam, warm-up schedule, float64)"
    got = t.run(recipe_train, p, table, V, 1, batches_, 3, "adam", 0.0, None, 4, what=what)["value"]
    _check_float_returned(t, got, what)
    _check_returned(t, got, batches_, what, _compare_steps(t, got, p, batches_, what, names))
    if not got["training"]:
        t.fail(f"After {what} the model is in eval mode: train_step must call model.train() (dropout is part of "
               f"training).", EVAL_MODE_IN_TRAIN)
    if not all(got["modes"]):
        t.fail(f"After {what} the model's own flag says train mode but {got['modes'].count(False)} of its submodules "
               f"are in eval mode (the model was in eval mode before the call). Likely cause: "
               f"{TRAIN_MODE_BY_FLAG.text}", TRAIN_MODE_BY_FLAG)
    what = "`train_step(..., smoothing=0.1)` on a model holding old gradients (Adam, float64)"
    stale = t.run(recipe_train, p, table, V, 1, batches_, 2, "adam", 0.1, None, 4, stale_grads=True, what=what)["value"]
    _check_float_returned(t, stale, what)
    judged = _compare_steps(t, stale, p, batches_, what, names, smoothing=0.1, stale=True)
    _check_returned(t, stale, batches_, what, judged, smoothing=0.1)
    clipped = t.run(recipe_train, p, table, V, 1, batches_, 2, "sgd", 0.0, 0.05, 4,
                    what="`train_step(..., clip_norm=0.05)` with plain SGD")["value"]
    _compare_steps(t, clipped, p, batches_, "`train_step(..., clip_norm=0.05)` with SGD (lr 0.1)", names,
                   optimizer="sgd", clip_norm=0.05)
    what = (f"`train_step(model, batch, optimizer, pad_id={OTHER_PAD}, smoothing=0.1, clip_norm=0.05)` with SGD "
            f"(lr 0.1) on a float32 model, batches padded with {OTHER_PAD} (and holding real tokens 0)")
    other = _other_pad_batches()
    single = t.run(recipe_train, p, table, V, 1, other, 2, "sgd", 0.1, 0.05, 4, pad_id=OTHER_PAD, dtype="float32",
                   what=what, crash=_grad_dtype)["value"]
    _compare_steps(t, single, p, other, what, names, optimizer="sgd", smoothing=0.1, clip_norm=0.05,
                   pad_id=OTHER_PAD, dtype=torch.float32)
    what = "`train_step(model, batch, optimizer, pad_id=0, scheduler)` (Adam, warm-up schedule, float64)"
    drop = t.run(recipe_train, p, table, V, 1, batches_, 1, "adam", 0.0, None, 4, dropout=0.5, what=what)["value"]
    nodrop = t.run(recipe_train, p, table, V, 1, batches_, 1, "adam", 0.0, None, 4, dropout=0.0, what=what)["value"]
    if math.isclose(drop["returned"][0], nodrop["returned"][0], rel_tol=1e-12):
        t.fail(f"{what} on a model with dropout=0.5 gives the same loss as without dropout: the step runs in eval "
               f"mode. Call model.train() first.", EVAL_MODE_IN_TRAIN)


@group("m5", "evaluate", depends=("loss",))
def evaluate(t: Tester):
    p, table, batches_ = _train_inputs(t)
    other = _other_pad_batches()
    # A batch whose targets are all pad_id (no token to count): it adds nothing beside another batch, and alone it
    # gives float('nan') (the docstring), never a ZeroDivisionError.
    empty = dict(batches_[0], tgt_out=torch.full_like(batches_[0]["tgt_out"], PAD))
    runs = [("train", PAD, batches_, ""), ("eval", PAD, batches_, ""),
            ("train", OTHER_PAD, other, f", batches padded with {OTHER_PAD} (and holding real tokens 0)"),
            ("eval", PAD, [batches_[1], empty], ", the second batch's tgt_out all pad_id (no token to count)"),
            ("eval", PAD, [empty], ", one batch whose tgt_out is all pad_id (no token to count anywhere)")]
    judge = TorchModel(p, 1, False, "relu", torch.float64, MAX_LEN).eval()
    passed = []          # (per_batch, pad_id, right value) of the runs whose value was right
    for mode, pad_id, batches_of_run, holding in runs:
        per_batch = judge_logits(judge, batches_of_run)
        want = expected_evaluate(per_batch, pad_id)
        what = f"`evaluate(model, batches, pad_id={pad_id})` on a model in {mode} mode with dropout=0.5{holding}"
        reply = t.run(recipe_evaluate, p, table, V, batches_of_run, 0.5, mode, pad_id, what=what,
                      crash=lambda r, w=want: EVALUATE_NO_TOKENS if math.isnan(w) and r.get("type") ==
                      "ZeroDivisionError" else None)
        got = {**reply["value"], "train_during": dropout_ran(reply["record"]),
               "grad_enabled": reply["record"]["grad_ops"] > 0}
        value = got["value"]
        if not isinstance(value, float):
            t.fail(f"{what} should return a Python float, but it returned {describe(value)}.", LOSS_RETURNED_AS_TENSOR)
        if got["train_during"]:
            t.fail(f"{what}: the model ran in training mode (dropout on); evaluate switches to model.eval().",
                   EVALUATE_IN_TRAIN_MODE)
        if not _same_float(value, want):
            # a known mistake names the cause when its own computation gives this value, and gave the right one on
            # every earlier run (one that would have failed there is not theirs)
            tried = [(m, v) for m, v in CATALOGUE.tried("evaluate", per_batch, pad_id)
                     if all(_same_float(m(pb, pid), right) for pb, pid, right in passed)]
            cause = diagnosis.reproducing(tried, lambda v: _same_float(value, v) and not _same_float(v, want))
            text = f" Likely cause: {cause.text}" if cause else ""
            if math.isnan(want):
                t.fail(f"{what} should be float('nan'): no batch has a non-pad target token, and then evaluate "
                       f"returns NaN (the docstring); it returned {value:.10g}.{text}", cause)
            t.fail(f"{what} should be {want:.10g} (plain cross-entropy per non-pad target token), but it is "
                   f"{value:.10g}.{text}", cause)
        passed.append((per_batch, pad_id, want))
        if got["grad_enabled"]:
            t.fail(f"{what}: the forward passes ran with gradients enabled; wrap them in torch.no_grad().",
                   EVALUATE_WITH_GRAD)
        if any(after != (mode == "train") for after in got["modes_after"]):
            now = "train" if got["modes_after"][0] else "eval"
            some = "" if len(set(got["modes_after"])) == 1 else " (some of its submodules are not)"
            t.fail(f"{what}: afterwards the model is in {now} mode{some}, but it was in {mode} mode when evaluate was "
                   f"called; evaluate must put back the mode it found (was_training = model.training first, "
                   f"model.train(was_training) at the end: it sets every submodule).", EVALUATE_MODE_NOT_RESTORED)


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


def _same_float(a, b) -> bool:
    """Equal to 1e-9 (relative), NaN equal to NaN."""
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9)


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
