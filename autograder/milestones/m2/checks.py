"""Hidden checks for milestone 2: split/merge heads and MultiHeadAttention.

This folder, one job per file:
- checks.py (here): the check groups, and the Tester-side helpers they use (inputs, calls, comparisons, probes);
- answers.py: the judge's right answers: torch.nn.MultiheadAttention(batch_first=True) loaded with the same
  weights as the student's four projections (in_proj = cat[w_q, w_k, w_v], out_proj = w_o; its boolean masks
  mean the opposite of ours (True = blocked), so it receives ~mask, expanded per head), and CATALOGUE's
  computations of what the known mistakes return;
- mistakes.py: CATALOGUE and the mistakes a check recognises from its own evidence;
- stand_ins.py: judge-written `split_heads` and `merge_heads`, so MultiHeadAttention is graded on its own
  merits when the student's helpers are wrong (imported below, which registers them).
"""
from __future__ import annotations

import functools

import torch

from autograder.grading.checks import CheckFailed, Tester, describe, group, shape_str
from autograder.milestones.reference import merge_from_heads, split_into_heads
from autograder.grading import diagnosis
from autograder.milestones.m2 import stand_ins  # noqa: F401  (registers the stand-ins)
from autograder.milestones.m2.answers import output_from_weights, reference_mha
from autograder.milestones.m2.mistakes import (
    PROJECTIONS, CATALOGUE, NEVER_USED, BIAS_IGNORED, DROPOUT_IN_EVAL, DROPOUT_KEEP_PROBABILITY, DROPOUT_NEVER,
    DROPOUT_NOT_ON_WEIGHTS, DROPOUT_ON_OUTPUT_TOO, ERROR_WITHOUT_NUMBERS, GRAPH_CUT, INPUT_MODIFIED, NO_DIVISIBILITY_CHECK,
    PARAMETER_NAMES, RANDOM_FORWARD, VALID_CONFIG_REJECTED, WEIGHTS_AVERAGED, WEIGHTS_NOT_DETACHED,
    WEIGHTS_NOT_STORED, WRONG_EXCEPTION, WRONG_HEAD_COUNT)

MHA = "MultiHeadAttention"
HELPERS = ("split_merge",)           # what every MultiHeadAttention group depends on


# ---- inputs and probes ------------------------------------------------------------------------

def random_params(t: Tester, d_model: int, bias: bool = True, dtype=torch.float64) -> dict:
    params = {}
    for name in PROJECTIONS:
        params[f"{name}.weight"] = t.randn(d_model, d_model, dtype=dtype, scale=d_model ** -0.5)
        if bias:
            params[f"{name}.bias"] = t.randn(d_model, dtype=dtype, scale=0.1)
    return params


def never_used(t: Tester, d_model, heads, query, key, value, mask, params, bias=True):
    """A probe: a projection whose parameters get no gradient is not part of the output."""
    def probe():
        g = torch.ones(query.shape[:-1] + (d_model,), dtype=query.dtype)
        try:
            reply = run_mha(t, d_model, heads, query, key, value, mask, params=params, bias=bias, backward=[g])
        except CheckFailed:
            return None
        grads = reply.get("param_grads") or {}
        for name in PROJECTIONS:
            g_w = grads.get(f"{name}.weight")
            if f"{name}.weight" in grads and (g_w is None or not torch.is_tensor(g_w) or not g_w.abs().sum() > 0):
                return NEVER_USED[name]
        return None
    return probe


# ---- calls -----------------------------------------------------------------------------------

def run_mha(t: Tester, d_model, heads, query, key, value, mask=None, *, params=None, train=False,
            dropout=0.0, bias=True, calls=1, backward=None, record=False):
    """Build and call the student's module. With `params`, an error it raises is matched against the
    catalogue (the same inputs through each known mistake) to name its likely cause."""
    kwargs = {"dropout": dropout, "bias": bias}
    args = [query, key, value] + ([mask] if mask is not None else [])
    crash = None
    if params is not None:
        def crash(reply):
            return CATALOGUE.raising("mha", reply.get("type"), reply.get("message"), params, heads, query, key,
                                     value, mask)
    # Each call its own seed: dropout left on in eval mode then shows as two different outputs.
    return t.module(MHA, (d_model, heads), kwargs, calls=[{"args": args, "seed": i} for i in range(calls)],
                    params=params, train=train, attrs=("attn_weights",), backward=backward, record=record,
                    dtype="float64" if query.dtype == torch.float64 else None, crash=crash)


def mask_cases(t: Tester, B, Lq, Lk):
    lengths = [Lk - i % (Lk - 1) for i in range(B)]
    pad = torch.arange(Lk)[None, :] < torch.tensor(lengths)[:, None]          # [B, Lk]
    cases = [(None, "no mask"), (pad[:, None, :], f"a padding mask [{B}, 1, {Lk}]")]
    if Lq == Lk:
        causal = torch.ones(Lq, Lk, dtype=torch.bool).tril()
        cases += [(causal, f"a causal mask [{Lq}, {Lk}]"),
                  (pad[:, None, :] & causal, f"a combined padding and causal mask [{B}, {Lq}, {Lk}]")]
    return cases


def describe_call(d_model, heads, query, key, label):
    return (f"MultiHeadAttention(d_model={d_model}, num_heads={heads}) on query {shape_str(query.shape)}, "
            f"key/value {shape_str(key.shape)} with {label}")


def check_parity(t: Tester, d_model, heads, query, key, value, mask, label, bias=True):
    params = random_params(t, d_model, bias, dtype=query.dtype)
    tried = functools.cache(lambda: CATALOGUE.tried("mha", params, heads, query, key, value, mask))
    what = describe_call(d_model, heads, query, key, label)
    reply = run_mha(t, d_model, heads, query, key, value, mask, params=params, bias=bias)
    want, want_w, _ = reference_mha(params, d_model, heads, query, key, value, mask)
    got = reply["outputs"][0]
    t.expect_tensor(got, f"The output of {what}", shape=want.shape)
    probes = [never_used(t, d_model, heads, query, key, value, mask, params, bias)]
    kept = {n: v for n, v in reply["params"].items() if not bias and n.endswith(".bias") and torch.is_tensor(v)}
    known = lambda: [(m, v[0]) for m, v in tried()] + ([(BIAS_IGNORED, BIAS_IGNORED(  # noqa: E731
        reference_mha, params, kept, d_model, heads, query, key, value, mask)[0])] if kept else [])
    t.expect_close(got, want, f"The output of {what}", known, probes=probes)
    return reply, want_w, what, tried


def stored_weights(t: Tester, got, want_w, what):
    """`self.attn_weights` must be the per-head weights [B, H, Lq, Lk]."""
    if got is None:
        t.fail("`self.attn_weights` is None after a forward pass: store the per-head weights "
               "[B, H, Lq, Lk] (detached) in forward.", WEIGHTS_NOT_STORED)
    B, H, Lq, Lk = want_w.shape
    if isinstance(got, torch.Tensor) and got.dim() == 4 and tuple(got.shape) != tuple(want_w.shape) \
            and (got.shape[0], got.shape[2], got.shape[3]) == (B, Lq, Lk):
        t.fail(f"`self.attn_weights` after {what} has {got.shape[1]} heads, but num_heads is {H}: the heads are "
               f"split into the wrong number of pieces (split_heads takes num_heads, and d_k = d_model // "
               f"num_heads).", WRONG_HEAD_COUNT)
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (B, Lq, Lk):
        averaged = t.close(got, WEIGHTS_AVERAGED(want_w))
        t.fail(f"`self.attn_weights` after {what} has shape {shape_str(got.shape)}"
               + (": they are the weights averaged over the heads. " if averaged else ", not one map per head. ")
               + f"Keep every head: [B, H, Lq, Lk] = {shape_str(want_w.shape)}.", WEIGHTS_AVERAGED if averaged else None)
    return t.expect_tensor(got, f"`self.attn_weights` after {what}", shape=want_w.shape)


# ---- groups ------------------------------------------------------------------------------

@group("m2", "shapes", depends=HELPERS)
def shapes(t: Tester):
    for B, Lq, Lk, d_model, heads in ((3, 5, 5, 8, 2), (2, 4, 6, 8, 4), (3, 1, 7, 12, 3), (2, 3, 3, 8, 8),
                                      (2, 5, 4, 6, 1)):
        q, k, v = t.randn(B, Lq, d_model), t.randn(B, Lk, d_model), t.randn(B, Lk, d_model)
        params = random_params(t, d_model)
        reply = run_mha(t, d_model, heads, q, k, v, params=params)
        what = describe_call(d_model, heads, q, k, "no mask")
        want, want_w, _ = reference_mha(params, d_model, heads, q, k, v)
        stored_weights(t, reply["attrs"][0]["attn_weights"], want_w, what)      # the head layout first
        t.expect_close(t.expect_tensor(reply["outputs"][0], f"The output of {what}", shape=want.shape), want,
                       f"The output of {what}", lambda: [(m, val[0]) for m, val in
                                                         CATALOGUE.tried("mha", params, heads, q, k, v)],
                       probes=[never_used(t, d_model, heads, q, k, v, None, params)])
    # Inputs must come back as they went in (a mask.unsqueeze_ would change the caller's mask).
    q, kv = t.randn(3, 4, 8), t.randn(3, 6, 8)
    for mask, label in ((torch.ones(3, 1, 6, dtype=torch.bool), "padding mask [3, 1, 6]"),
                        (torch.ones(3, 4, 6, dtype=torch.bool), "mask [3, 4, 6]")):
        try:
            reply = run_mha(t, 8, 2, q, kv, kv, mask)
        except CheckFailed:
            continue   # a forward that cannot take this mask loses its points in parity, not here
        for name, before, after in zip(("query", "key", "value", "mask"), (q, kv, kv, mask),
                                       reply["args_after"][0]):
            if not (isinstance(after, torch.Tensor) and after.shape == before.shape and torch.equal(after, before)):
                t.fail(f"`MultiHeadAttention.forward` changed its `{name}` argument in place (a {label} "
                       f"came back as {describe(after)}). Leave inputs as they are: use mask.unsqueeze(-3), "
                       f"not mask.unsqueeze_(-3).", INPUT_MODIFIED)


@group("m2", "split_merge", provides=("split_heads", "merge_heads"))
def split_merge(t: Tester):
    B, L, H, d_k = 3, 5, 2, 4
    x = t.randn(B, L, H * d_k)
    want = x.reshape(B, L, H, d_k).transpose(1, 2)
    got = t.call("split_heads", x, H)["value"]
    split_failure = None
    try:
        t.expect_close(got, want, f"`split_heads(x, num_heads={H})` for x {shape_str(x.shape)}", [
            (CATALOGUE.mistakes()["split_plain_view"], split_into_heads(x, H, "plain_view")),
            (CATALOGUE.mistakes()["split_interleaved"], split_into_heads(x, H, "interleaved"))])
    except CheckFailed as failure:
        split_failure = failure          # merge_heads is judged too, so the report names both when both are wrong
    y = t.randn(B, H, L, d_k)
    want = y.transpose(1, 2).reshape(B, L, H * d_k)
    got = t.call("merge_heads", y)["value"]
    try:
        t.expect_close(got, want, f"`merge_heads(x)` for x {shape_str(y.shape)}", [
            (CATALOGUE.mistakes()["merge_no_transpose"], merge_from_heads(y, "no_transpose"))])
    except CheckFailed as failure:
        if split_failure is None:
            raise
        both = CheckFailed(f"{split_failure}\nmerge_heads is wrong too: {failure}", split_failure.mistake)
        both.failed_on = split_failure.failed_on
        raise both
    if split_failure is not None:
        raise split_failure
    x = t.randn(2, 6, 12)
    for heads in (1, 3, 4):
        back = t.call("merge_heads", t.expect_tensor(t.call("split_heads", x, heads)["value"],
                                                     f"`split_heads(x, {heads})`", shape=(2, heads, 6, 12 // heads)))
        t.expect_close(back["value"], x, f"`merge_heads(split_heads(x, {heads}))` for x [2, 6, 12]")


@group("m2", "parity", depends=HELPERS)
def parity(t: Tester):
    B, H, d_model = 3, 2, 8
    L = 5
    q = t.randn(B, L, d_model)
    for mask, label in mask_cases(t, B, L, L):
        check_parity(t, d_model, H, q, q, q, mask, f"{label} (self-attention, float64)")
    q, kv = t.randn(B, 4, d_model), t.randn(B, 6, d_model)
    v = t.randn(B, 6, d_model)
    for mask, label in mask_cases(t, B, 4, 6):
        check_parity(t, d_model, H, q, kv, v, mask, f"{label} (cross-attention, key != value, float64)")
    check_parity(t, d_model, 4, q, kv, v, None, "no bias (float64)", bias=False)
    q32, k32 = t.randn(B, L, d_model, dtype=torch.float32), t.randn(B, 6, d_model, dtype=torch.float32)
    pad = torch.ones(B, 1, 6, dtype=torch.bool)
    pad[0, :, 4:] = False
    check_parity(t, d_model, H, q32, k32, k32, pad, "a padding mask (float32)")


@group("m2", "head_weights", depends=HELPERS)
def head_weights(t: Tester):
    B, H, d_model, Lq, Lk = 3, 2, 8, 4, 6
    q, k, v = t.randn(B, Lq, d_model), t.randn(B, Lk, d_model), t.randn(B, Lk, d_model)
    pad = torch.ones(B, 1, Lk, dtype=torch.bool)
    pad[1, :, 3:] = False
    params = random_params(t, d_model)
    what = describe_call(d_model, H, q, k, "a padding mask")
    reply = run_mha(t, d_model, H, q, k, v, pad, params=params)
    _, want_w, _ = reference_mha(params, d_model, H, q, k, v, pad)
    got = stored_weights(t, reply["attrs"][0]["attn_weights"], want_w, what)
    # Only the weights are judged here (a mistake in the values or in w_o cannot change them).
    t.expect_close(got, want_w, f"`self.attn_weights` after {what}",
                   lambda: [(m, val[1]) for m, val in CATALOGUE.tried("mha", params, H, q, k, v, pad)])
    g = t.randn(B, Lq, d_model)
    reply = run_mha(t, d_model, H, q, k, v, pad, backward=[g])
    if reply["attrs_require_grad"][0].get("attn_weights"):
        t.fail("`self.attn_weights` is still attached to the autograd graph (requires_grad=True): store "
               "weights.detach(), or every forward pass keeps its whole graph alive on the module.",
               WEIGHTS_NOT_DETACHED)


def plausibly_dropped(kept: torch.Tensor, p: float) -> bool:
    """Could dropout with probability `p` have kept exactly `kept`? p = 0 keeps every entry, p = 1 none; otherwise
    the share dropped must be near p (6 standard deviations for the ~150 weights of these checks, >= 0.2)."""
    dropped = 1 - kept.double().mean().item()
    if p in (0.0, 1.0):
        return dropped == p
    return abs(dropped - p) <= 0.2


def check_training_dropout(t: Tester, reply, p, params, heads, value, want, want_w, what):
    """Training mode with dropout `p`: `self.attn_weights` are the eval weights with some dropped (a plausible
    share for p) and the rest scaled by 1/(1 - p); the output is w_o(merge_heads(weights @ v)) computed with
    those very weights. The judge cannot replay the student's random draws, so the entries the student's dropout
    kept (its non-zero entries) are taken as given, and the mistakes are computed from them too."""
    out = t.expect_tensor(reply["outputs"][0], f"The output of {what} in training mode", shape=want.shape)
    w = reply["attrs"][0]["attn_weights"]
    if not (isinstance(w, torch.Tensor) and tuple(w.shape) == tuple(want_w.shape)):
        return                                   # head_weights judges what is stored
    w = w.to(want_w.dtype)
    kept = w != 0
    right = want_w * kept / (1 - p)
    if not (plausibly_dropped(kept, p) and t.close(w, right)):
        dropped = 1 - kept.double().mean().item()
        ratio = (w[kept] / want_w[kept]) if kept.any() else None
        if ratio is None:
            scaled = ""
        elif torch.allclose(ratio, ratio.mean().expand_as(ratio), rtol=1e-6, atol=0):
            scaled = f" and scales the weights it keeps by {ratio.mean().item():.6g}"
        else:
            scaled = " and the weights it keeps are not the eval weights times one factor"
        rule = (f"dropout=0.0 drops none" if p == 0 else f"dropout with p={p:g} drops each weight with "
                f"probability {p:g} and scales the others by 1/(1 - p) = {1 / (1 - p):.6g}")
        message = (f"In training mode, {what} drops {dropped:.0%} of the attention weights in `self.attn_weights`"
                   f"{scaled}; {rule}")
        # dropout_p = 1 - p: a plausible share for 1 - p dropped, the rest scaled by 1/p
        cause = diagnosis.reproducing([(DROPOUT_KEEP_PROBABILITY, DROPOUT_KEEP_PROBABILITY(want_w, kept, p))],
                                      lambda v: plausibly_dropped(kept, 1 - p) and t.close(w, v))
        t.fail(f"{message}." + (f" Likely cause: {cause.text}" if cause else ""), cause)
    # The output is computed with the weights stored: the docstring's "the weights that the output was computed
    # with (after dropout)". A second dropout, on the output, zeroes some of its entries and scales the others.
    right_out = output_from_weights(params, heads, value, w)
    t.expect_close(out, right_out, f"The output of {what} in training mode, against w_o(merge_heads(weights @ v)) "
                   f"computed with the weights it stored in `self.attn_weights` (dropout acts on the attention "
                   f"weights only)", [(DROPOUT_ON_OUTPUT_TOO, DROPOUT_ON_OUTPUT_TOO(right_out, out != 0, p))])


@group("m2", "dropout", depends=HELPERS)
def dropout(t: Tester):
    B, H, d_model, L = 2, 2, 8, 6
    q = t.randn(B, L, d_model)
    params = random_params(t, d_model)
    want, want_w, _ = reference_mha(params, d_model, H, q, q, q)
    what = "MultiHeadAttention(d_model=8, num_heads=2, dropout=0.5)"
    tried = lambda: [(m, val[0]) for m, val in CATALOGUE.tried("mha", params, H, q, q, q)]  # noqa: E731
    plain = run_mha(t, d_model, H, q, q, q, params=params, dropout=0.0, calls=2)["outputs"]
    if all(isinstance(o, torch.Tensor) for o in plain) and not torch.equal(*plain):
        t.fail("MultiHeadAttention(dropout=0.0) gives different outputs for the same input in eval mode, so "
               "something random happens in forward besides dropout (a layer or tensor created inside forward?): "
               "create every layer in __init__.", RANDOM_FORWARD)
    ev = run_mha(t, d_model, H, q, q, q, params=params, dropout=0.5, calls=2)
    a, b = ev["outputs"]
    t.expect_tensor(a, f"The output of {what} in eval mode", shape=want.shape)
    if not torch.equal(a, b):
        t.fail(f"{what} gives different outputs for the same input in eval mode: dropout must only act in "
               f"training mode (pass dropout_p=self.dropout if self.training else 0.0).", DROPOUT_IN_EVAL)
    t.expect_close(a, want, f"The output of {what} in eval mode (dropout must be off)", tried)
    tr = run_mha(t, d_model, H, q, q, q, params=params, dropout=0.5, train=True)
    out = t.expect_tensor(tr["outputs"][0], f"The output of {what} in training mode", shape=want.shape)
    if torch.allclose(out, want, atol=1e-9):
        t.fail(f"{what} in training mode gives exactly the eval result: attention dropout with p=0.5 should "
               f"change the output while training (pass dropout_p to scaled_dot_product_attention).",
               DROPOUT_NEVER)
    # Dropout belongs on the attention weights (the paper's "attention dropout"): with no mask, only
    # dropout can make a weight exactly 0, and the weights kept are those attention used.
    w = tr["attrs"][0]["attn_weights"]     # its shape and storage are head_weights' business
    if isinstance(w, torch.Tensor) and not (w == 0).any():
        zeros = (out == 0).double().mean().item()
        where = (f"{zeros:.0%} of the output's entries are exactly 0, so dropout acts on the output: apply it to the "
                 f"attention weights instead (dropout_p of scaled_dot_product_attention)" if abs(zeros - 0.5) < 0.15
                 else "the output still changes, so dropout acts somewhere else than on the weights stored: store the "
                      "weights the output is computed with, after dropout (the ones scaled_dot_product_attention "
                      "returns with dropout_p), and apply dropout there only")
        t.fail(f"In training mode, {what} should drop attention weights (about half of them become 0), but "
               f"`self.attn_weights` has no zeros; {where}.", DROPOUT_NOT_ON_WEIGHTS)
    check_training_dropout(t, tr, 0.5, params, H, q, want, want_w, what)
    # At p = 0.5, dropping with probability p or 1 - p looks the same: a rate that tells them apart.
    tr = run_mha(t, d_model, H, q, q, q, params=params, dropout=0.2, train=True)
    check_training_dropout(t, tr, 0.2, params, H, q, want, want_w, what.replace("0.5", "0.2"))
    tr0 = run_mha(t, d_model, H, q, q, q, params=params, dropout=0.0, train=True)
    check_training_dropout(t, tr0, 0.0, params, H, q, want, want_w, what.replace("0.5", "0.0"))
    t.expect_close(tr0["outputs"][0], want, "The output of MultiHeadAttention(dropout=0.0) in training mode", tried)


@group("m2", "gradients", depends=HELPERS)
def gradients(t: Tester):
    B, H, d_model, Lq, Lk = 3, 2, 8, 4, 5
    q, k, v = t.randn(B, Lq, d_model), t.randn(B, Lk, d_model), t.randn(B, Lk, d_model)
    params = random_params(t, d_model)
    g = t.randn(B, Lq, d_model)
    reply = run_mha(t, d_model, H, q, k, v, params=params, backward=[g])
    grads = reply.get("param_grads")
    if grads is None:
        t.fail(f"No gradient reached the projections: {reply.get('grad_problem')}.", GRAPH_CUT)
    _, _, want = reference_mha(params, d_model, H, q, k, v, grad_output=g)
    t.expect_close(reply["outputs"][0], reference_mha(params, d_model, H, q, k, v)[0],
                   f"The output of {describe_call(d_model, H, q, k, 'no mask')}",
                   lambda: [(m, val[0]) for m, val in CATALOGUE.tried("mha", params, H, q, k, v)],
                   probes=[never_used(t, d_model, H, q, k, v, None, params)])
    inputs = dict(zip(("query", "key", "value"), reply.get("input_grads") or [None] * 3))
    if all(g_ is None for g_ in inputs.values()):
        t.fail("No gradient reaches the query, key or value inputs of forward: the computation is cut from them "
               "(torch.no_grad(), .detach(), .data or .numpy() on the way).", GRAPH_CUT)
    for name in ("query", "key", "value"):
        w = want.pop(name)
        if inputs[name] is None:
            t.fail(f"No gradient reached the `{name}` input of forward (cross-attention, key != value): "
                   f"do not .detach() it or compute with it outside autograd.", GRAPH_CUT)
        t.expect_close(inputs[name], w, f"The gradient with respect to the `{name}` input")
    t.expect_grads(grads, want, "every projection (w_q, w_k, w_v, w_o) must be used in forward, on the right input "
                                "(w_q on query, w_k on key, w_v on value).", GRAPH_CUT)


def every_op(record: dict) -> int:
    """All operations a measured call ran, views, slices and indexing included (`op_count` leaves those out): a
    loop over the heads may do nothing but slice, and then only they grow with num_heads."""
    return sum(record["counts"].values())


HEADS_ADVICE = ("Split the heads with one reshape and transpose and merge them with one transpose and reshape: no "
                "Python loop over the heads, not even one that only slices or indexes.")


@group("m2", "vectorization", depends=HELPERS, style=True, observes=True)
def vectorization(t: Tester):
    # Every mask form the docstring allows: a loop may hide behind one of them only (e.g. per item for 3-D masks).
    masks = {"a padding mask [B, 1, L]": lambda B, L: torch.ones(B, 1, L, dtype=torch.bool),
             "a per-item mask [B, L, L]": lambda B, L: torch.ones(B, L, L, dtype=torch.bool).tril(),
             "a causal mask [L, L]": lambda B, L: torch.ones(L, L, dtype=torch.bool).tril(),
             "no mask": lambda B, L: None}

    def count(form, B, H, L, d_model=8):
        q = t.randn(B, L, d_model)
        mask = masks[form](B, L)
        params = random_params(t, d_model)
        reply = run_mha(t, d_model, H, q, q, q, mask, params=params, record=True)
        t.works(reply["outputs"][0], reference_mha(params, d_model, H, q, q, q, mask)[0], f"`{MHA}`")
        return reply["record"]

    b, h, n = t.grown(2, 9, 25), t.grown(2, 5, 13), t.grown(3, 9, 25)       # beyond any small padded count
    grew = f"the number of heads grew from 2 to {h}"
    # The student's own helpers (when split_merge failed, forward runs with the course's stand-ins: nothing to judge).
    if "split_heads" not in t.patches and "merge_heads" not in t.patches:
        x, y = t.randn(2, 3, 8), t.randn(2, 3, 2 * h)
        counts = {}
        for label, arg, heads in (("base", x, 2), (grew, y, h)):
            reply = t.call("split_heads", arg, heads, record=True)
            t.works(reply["value"], split_into_heads(arg, heads), "`split_heads`")
            counts[label] = every_op(reply["record"])
        t.expect_constant_ops(counts, "base size (x [2, 3, 8], num_heads=2)", "split_heads", HEADS_ADVICE)
        counts = {}
        for label, arg in (("base", t.randn(2, 2, 3, 4)), (grew, t.randn(2, h, 3, 2))):
            reply = t.call("merge_heads", arg, record=True)
            t.works(reply["value"], merge_from_heads(arg), "`merge_heads`")
            counts[label] = every_op(reply["record"])
        t.expect_constant_ops(counts, "base size (x [2, 2, 3, 4])", "merge_heads", HEADS_ADVICE)
    for form in masks:
        base, batch = count(form, 2, 2, 3), count(form, b, 2, 3)
        heads, length = count(form, 2, h, 3, d_model=2 * h), count(form, 2, 2, n)
        func = f"MultiHeadAttention.forward (with {form})"
        t.expect_constant_ops({"base": base["op_count"], f"the batch grew from 2 to {b}": batch["op_count"],
                               grew: heads["op_count"], f"the sequence length grew from 3 to {n}": length["op_count"]},
                              "base size", func, "Split the heads into a [B, H, L, d_k] tensor and call attention "
                              "once for all of them.", limit=70)
        # As the heads grow, views and slices count too: a loop over the heads in forward may only slice.
        t.expect_constant_ops({"base": every_op(base), grew: every_op(heads)}, "base size (counting views and "
                              "slices too)", func, HEADS_ADVICE)


@group("m2", "from_scratch", depends=HELPERS, style=True, observes=True)
def from_scratch(t: Tester):
    q = t.randn(2, 3, 8)
    params = random_params(t, 8)
    reply = run_mha(t, 8, 2, q, q, q, params=params, record=True)
    t.works(reply["outputs"][0], reference_mha(params, 8, 2, q, q, q)[0], f"`{MHA}`")
    record = dict(reply["record"])
    record["functions"] = record["functions"] + reply.get("submodules", [])
    t.expect_allowed(record, MHA)


@group("m2", "init_errors", depends=HELPERS, style=True)
def init_errors(t: Tester):
    for d_model, heads in ((8, 2), (12, 3), (6, 1)):
        reply = t.module(MHA, (d_model, heads), allow_error=True)
        if reply.get("kind") == "constructor" and reply.get("type") == "ValueError":
            t.fail(f"MultiHeadAttention(d_model={d_model}, num_heads={heads}) raised ValueError: "
                   f"{reply.get('message')}, but {d_model} is divisible by {heads}: raise only when "
                   f"d_model % num_heads != 0.", VALID_CONFIG_REJECTED)
        if reply.get("kind") == "constructor":
            t.fail(f"Creating MultiHeadAttention(d_model={d_model}, num_heads={heads}) raised {reply.get('type')}: "
                   f"{reply.get('message')}" + (f" Likely cause: {m.text}" if (m := diagnosis.error_cause(
                       reply.get("message"))) else ""), m)
    for d_model, heads in ((10, 3), (8, 3)):
        reply = t.module(MHA, (d_model, heads), allow_error=True)
        if reply.get("ok"):
            t.fail(f"MultiHeadAttention(d_model={d_model}, num_heads={heads}) should raise ValueError "
                   f"(d_model is not divisible by num_heads), but it was created without complaint.",
                   NO_DIVISIBILITY_CHECK)
        if reply.get("kind") == "not_implemented":
            t.fail("`MultiHeadAttention.__init__` is not implemented yet (it raises NotImplementedError).")
        if reply.get("type") != "ValueError":
            t.fail(f"MultiHeadAttention(d_model={d_model}, num_heads={heads}) should raise ValueError, "
                   f"but it raised {reply.get('type')}: {reply.get('message')}", WRONG_EXCEPTION)
        if str(d_model) not in str(reply.get("message")) or str(heads) not in str(reply.get("message")):
            t.fail(f"The ValueError of MultiHeadAttention(d_model={d_model}, num_heads={heads}) should give both "
                   f"numbers, so the caller sees what to change; it says: {reply.get('message')!r}.",
                   ERROR_WITHOUT_NUMBERS)
    for bias in (True, False):
        reply = t.module(MHA, (8, 2), {"bias": bias})
        names = {f"{p}.weight" for p in PROJECTIONS} | ({f"{p}.bias" for p in PROJECTIONS} if bias else set())
        got = set(reply["params"])
        missing = names - got
        extra_bias = {n for n in got - names if not bias and n.startswith("w_") and n.endswith(".bias")}
        if missing or extra_bias:
            t.fail(f"MultiHeadAttention(8, 2, bias={bias}) should have the parameters "
                   f"{', '.join(sorted(names))}; it has {', '.join(sorted(got)) or 'none'}. Use four "
                   f"nn.Linear(d_model, d_model, bias=bias) named w_q, w_k, w_v, w_o.",
                   BIAS_IGNORED if extra_bias else PARAMETER_NAMES)
        for name in sorted(names):
            value = reply["params"][name]
            want = (8, 8) if name.endswith("weight") else (8,)
            t.expect_tensor(value, f"Parameter `{name}`", shape=want)
    # Points for the constructor's rules only when the module itself works.
    q = t.randn(2, 3, 8)
    params = random_params(t, 8)
    reply = run_mha(t, 8, 2, q, q, q, params=params)
    t.works(reply["outputs"][0], reference_mha(params, 8, 2, q, q, q)[0], f"`{MHA}`")
