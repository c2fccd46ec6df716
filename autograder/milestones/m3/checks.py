"""Hidden checks for milestone 3: LayerNorm, FeedForward, EncoderLayer, DecoderLayer (post-LN and pre-LN).

This folder, one job per file:
- checks.py (here): the check groups, and the Tester-side helpers they use (calls, comparisons, probes);
- answers.py: the judge's right answers: PyTorch's own modules (nn.LayerNorm, nn.TransformerEncoderLayer/
  DecoderLayer, batch_first=True) loaded with the same, random weights: every norm too, so that a swapped or
  skipped sub-layer cannot hide; and CATALOGUE, a small functional re-implementation of the layers with one
  known mistake switched on at a time;
- mistakes.py: CATALOGUE and the mistakes a check recognises from its own evidence;
- stand_ins.py: judge-written LayerNorm and FeedForward, so the layers are graded on their own merits when
  the student's parts are wrong (MultiHeadAttention is milestone 2's reference; imported below, which
  registers them);
- recipes.py: code run beside the student's (the parameters their layers' forward declares).
"""
from __future__ import annotations

import contextlib
import functools
import weakref

import torch
import torch.nn.functional as F

from autograder.grading.checks import TOLERANCES, ChargedAbove, CheckFailed, NotJudged, Tester, group, shape_str
from autograder.grading.diagnosis import Mistake, matches, reproducing, same_error
from autograder.milestones.reference import HEADS, feed_forward_fn, layer_fn, layer_params, ragged_masks, sub_params
from autograder.milestones.m3 import stand_ins  # noqa: F401  (registers the stand-ins)
from autograder.milestones.m3.answers import STRICT_ONLY, expected_layer, through_norms
from autograder.milestones.m3.recipes import recipe_signature
from autograder.milestones.m3.mistakes import (
    CATALOGUE, NEVER_USED, ACTIVATION_CASE, ACTIVATION_ERROR_MESSAGE, ACTIVATION_NOT_CHECKED,
    ATTENTION_DROPOUT_MISSING, BATCH_MIXING, DROPOUT_IN_EVAL, DROPOUT_ON_RESIDUAL_SUM, FFN_DROPOUT_BEFORE_ACTIVATION,
    FFN_DROPOUT_MISPLACED, FFN_DROPOUT_NOT_PASSED, FFN_DROPOUT_RATE_IGNORED, FFN_NO_DROPOUT, GRAPH_CUT, INPUT_MODIFIED, LAYER_NORM_INIT,
    LOOKS_AHEAD, NO_RESIDUAL_DROPOUT, NORM_FIRST_ATTRIBUTE, PADDING_NOT_IGNORED, PARAMETER_NAMES, SHARED_SUBMODULE,
    SIGNATURE_CHANGED, SUBMODULE_KINDS)

PARTS = ("layer_norm", "feed_forward")        # what every layer group depends on


# ---- probes: evidence read from the student's answer -----------------------------------------

def never_used(grads: dict | None, names=("self_attn", "cross_attn", "feed_forward", "norm1", "norm2", "norm3")):
    """A structural finding: a submodule whose parameters get no gradient is not part of the output."""
    if not grads:
        return None
    for name in names:
        mine = [g for k, g in grads.items() if k.startswith(name + ".")]
        if mine and all(g is None or not torch.is_tensor(g) or not g.abs().sum() > 0 for g in mine):
            return NEVER_USED[name]
    return None


def inputs_kept(t: Tester, reply, cls: str, names, values, what: str):
    """Fail when a call of `cls` changed one of its tensor arguments in place (the worker sends the arguments
    back as they are after the first call)."""
    after = (reply.get("args_after") or [[]])[0]
    for name, before, back in zip(names, values, after):
        if isinstance(before, torch.Tensor) and not (isinstance(back, torch.Tensor) and back.shape == before.shape
                                                     and torch.equal(back, before)):
            t.fail(f"`{cls}.forward` changed its argument `{name}` in place ({what}): the caller's tensor came back "
                   f"different. Leave inputs as they are: write x = x + ..., not x += ... (no in-place operation "
                   f"such as +=, -=, add_ or masked_fill_ on an argument).", INPUT_MODIFIED)


# ---- the layers' forward signatures -----------------------------------------------------------

# The stub's parameters of each layer's forward (after self), in the order the grader passes them (by position, as
# milestone 4's Encoder and Decoder do).
ARGS = {"encoder": ("x", "src_mask"), "decoder": ("x", "memory", "src_mask", "tgt_mask")}
CLASSES = {"encoder": "EncoderLayer", "decoder": "DecoderLayer"}
# Other names students give these parameters (PyTorch's layers', tutorials'): what the body means by each.
ALIASES = {
    "encoder": {"src": "x", "mask": "src_mask", "source_mask": "src_mask", "attn_mask": "src_mask",
                "padding_mask": "src_mask"},
    "decoder": {"tgt": "x", "trg": "x", "y": "x", "enc_output": "memory", "encoder_output": "memory",
                "enc_out": "memory", "encoder_out": "memory", "mem": "memory", "memory_mask": "src_mask",
                "source_mask": "src_mask", "cross_mask": "src_mask", "trg_mask": "tgt_mask", "target_mask": "tgt_mask",
                "self_mask": "tgt_mask"},
}
SAID = {"x": "the layer's input x", "memory": "memory", "src_mask": "the source mask (src_mask)",
        "tgt_mask": "the target mask (tgt_mask)"}
_SIGNATURES: "weakref.WeakKeyDictionary[Tester, dict]" = weakref.WeakKeyDictionary()


def signature_finding(t: Tester, kind: str) -> tuple[str, Mistake | None] | None:
    """How the student's layer forward's parameters differ from the stub's, read in the worker (once per group, and
    only after a failure): (the sentence that says it, and the mistake with its own computation, the judge's layer
    given the arguments as the body receives them, when the meaning of every parameter is known), or None when the
    grader's positional call gives each parameter what its name says (a renamed parameter is the student's own)."""
    cache = _SIGNATURES.setdefault(t, {})
    if kind not in cache:
        cls = CLASSES[kind]
        try:
            params = t.run(recipe_signature, cls, "forward", what=f"`{cls}.forward`'s parameters")["value"]
        except CheckFailed:
            params = None
        cache[kind] = _finding(kind, params) if params else None
    return cache[kind]


def _finding(kind: str, params) -> tuple[str, Mistake | None] | None:
    stub, cls = ARGS[kind], CLASSES[kind]
    if params[0][1] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"):
        params = params[1:]                                          # self
    if any(k == "VAR_POSITIONAL" for _, k, _ in params):
        return None                                                  # *args: what each one gets is not declared
    names = [n for n, k, _ in params if k in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
    required = [n for n, k, d in params if k in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD") and d is None]
    meaning = [n if n in stub else ALIASES[kind].get(n) for n in names]
    if meaning[:len(stub)] == list(stub) and len(required) <= len(stub):
        return None
    declared = "(" + ", ".join(["self", *(n if d is None else f"{n}={d}" for n, _, d in params)]) + ")"
    stub_text = "(self, " + ", ".join(n if i == 0 or n == "memory" else f"{n}=None" for i, n in enumerate(stub)) + ")"
    head = (f"`{cls}.forward` is declared {declared}, but the stub declares {stub_text}: the grader (like milestone "
            f"4's {cls.replace('Layer', '')}) passes the arguments by position, in the stub's order, so ")
    keep = f". Keep the stub's signature: def forward{stub_text}."
    if len(required) > len(stub):
        return head + f"your forward needs {len(required)} arguments and gets {len(stub)}" + keep, None
    if len(names) < len(stub):
        return head + f"it is given {len(stub)} arguments ({', '.join(stub)}) where yours takes {len(names)}" + keep, None
    wrong = [(n, stub[i]) for i, n in enumerate(names[:len(stub)]) if meaning[i] != stub[i]]
    said = " and ".join(f"your `{n}` receives {SAID[v]}" for n, v in wrong)
    text = head + said + keep
    if None in meaning[:len(stub)] or sorted(meaning[:len(stub)]) != sorted(stub):
        return text, None                       # what the body means by a parameter is not known: no computation

    def computation(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None):
        given = dict(zip(stub, (x, memory, src_mask, tgt_mask) if kind == "decoder" else (x, src_mask)))
        body = {meaning[i]: given[name] for i, name in enumerate(stub)}
        return layer_fn(p, norm_first, activation, body["x"], body.get("memory"), body.get("src_mask"),
                        body.get("tgt_mask"))
    return text, Mistake(SIGNATURE_CHANGED.id, text, computation)


@contextlib.contextmanager
def signature_said(t: Tester, kind: str):
    """A layer failure also says how the layer's forward is declared, when that differs from the stub's and the
    failure did not already name it (a fact about the file, not a guess: the parameters receive the arguments by
    position)."""
    try:
        yield
    except (NotJudged, ChargedAbove):
        raise
    except CheckFailed as e:
        if e.mistake is not None and e.mistake.id == SIGNATURE_CHANGED.id:
            raise
        found = signature_finding(t, kind)
        if found is None:
            raise
        raise CheckFailed(f"{e}\n{found[0]}", e.mistake) from None


def _same(a, b) -> bool:
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and torch.allclose(a.to(torch.float64), b.to(torch.float64), atol=1e-12, rtol=1e-10))


def strict_tried(kind: str, actual, want, *inputs, **kwargs) -> list:
    """CATALOGUE.tried(kind, ...) without the entries of STRICT_ONLY that do not give `actual` to full accuracy."""
    atol, rtol = TOLERANCES.get(want.dtype, TOLERANCES[torch.float32])
    return [(m, v) for m, v in CATALOGUE.tried(kind, *inputs, **kwargs)
            if m.id not in STRICT_ONLY or isinstance(actual, torch.Tensor)
            and matches(actual, v, want, atol, rtol, loose=False)]


def layer_tried(t: Tester, kind: str, actual, want, *inputs) -> list:
    """The catalogue's (mistake, value) pairs of `kind` on `inputs`, for t.expect_close: an entry of STRICT_ONLY only
    when it gives `actual` to full accuracy; and, when the student's forward receives its arguments in another
    order than the stub's, that signature's computation in place of every entry computing the same values (the
    file says where the difference comes from)."""
    pairs = strict_tried(kind, actual, want, *inputs)
    found = signature_finding(t, kind)
    if found is not None and found[1] is not None:
        try:
            own = found[1](*inputs)
        except Exception:
            own = None
        if own is not None:
            pairs = [(m, v) for m, v in pairs if not _same(v, own)] + [(found[1], own)]
    return pairs


# ---- running the student's layers ---------------------------------------------------------------


def run_layer(t: Tester, p, d, d_ff, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None, *,
              dropout=0.0, train=False, calls=1, backward=None, record=False, attrs=()):
    decoder = memory is not None
    cls = "DecoderLayer" if decoder else "EncoderLayer"
    args = [x, memory, src_mask, tgt_mask] if decoder else [x, src_mask]
    kind = "decoder" if decoder else "encoder"

    def crash(reply):
        return explain_crash(t, reply, p, d, d_ff, norm_first, activation, x, memory, src_mask, tgt_mask) \
            if p is not None else None
    return t.module(cls, (d, HEADS, d_ff), {"dropout": dropout, "activation": activation, "norm_first": norm_first},
                    calls=[{"args": args, "seed": i} for i in range(calls)], params=p, train=train,
                    backward=backward, record=record, attrs=attrs,
                    dtype="float64" if x.dtype == torch.float64 else None, crash=crash)


def explain_crash(t: Tester, reply, p, d, d_ff, norm_first, activation, x, memory, src_mask, tgt_mask):
    """The known mistake whose computation raises the student's error on the same inputs (Catalogue.raising).
    When several do (a source mask of length Ls meeting Lt keys raises the same words whether the masks are
    swapped, the keys come from the decoder or the queries from memory), the student's layer runs once more
    on a source as long as the target, where none of them raises, and the one whose values it gives is named."""
    kind = "decoder" if memory is not None else "encoder"
    inputs = (p, norm_first, activation, x, memory, src_mask, tgt_mask)
    found = signature_finding(t, kind)
    signature = found[1] if found is not None else None
    raisers = {}
    for mistake in [*CATALOGUE.entries.get(kind, []), *([signature] if signature is not None else [])]:
        try:
            mistake(*inputs)
        except Exception as e:
            if same_error(e, reply.get("type"), reply.get("message")):
                raisers[mistake.id] = mistake
    if len(raisers) == 1:
        return next(iter(raisers.values()))
    if len(raisers) < 2 or memory is None or memory.size(1) == x.size(1):
        return None
    B, Lt = x.shape[:2]
    mem = torch.randn(B, Lt, memory.size(-1), generator=torch.Generator().manual_seed(Lt), dtype=memory.dtype)
    src = None if src_mask is None else ragged_masks(B, Lt, Lt)[0]
    alike = (p, norm_first, activation, x, mem, src, tgt_mask)
    if signature is not None and signature.id in raisers:
        # The file's own signature raises this error; another entry that computes the same values where nothing
        # raises (the masks swapped in the body) is that signature, not a second explanation.
        try:
            own = signature(*alike)
        except Exception:
            own = None
        others = {m.id for m, v in CATALOGUE.tried(kind, *alike) if m.id in raisers and not _same(v, own)}
        if own is not None and not others:
            return signature
    try:
        out = run_layer(t, p, d, d_ff, norm_first, activation, x, mem, src, tgt_mask)["outputs"][0]
    except CheckFailed:
        return None
    want = expected_layer(p, d, d_ff, norm_first, activation, x, mem, src, tgt_mask)[0]
    atol, rtol = TOLERANCES.get(want.dtype, TOLERANCES[torch.float32])
    candidates = [(m, v) for m, v in layer_tried(t, kind, out, want, *alike) if m.id in raisers]
    return reproducing(candidates, lambda v: isinstance(out, torch.Tensor) and matches(out, v, want, atol, rtol))


def describe_layer(decoder, norm_first, activation, x, memory, label):
    cls = "DecoderLayer" if decoder else "EncoderLayer"
    mode = "pre-LN" if norm_first else "post-LN"
    shapes = f"x {shape_str(x.shape)}" + (f", memory {shape_str(memory.shape)}" if decoder else "")
    return f"{cls}({mode}, {activation}) on {shapes} with {label}"


def check_layer(t: Tester, d, d_ff, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None,
                label="no mask", p=None):
    decoder = memory is not None
    p = p or layer_params(t, d, d_ff, decoder, x.dtype)
    kind = "decoder" if decoder else "encoder"
    with signature_said(t, kind):
        reply = run_layer(t, p, d, d_ff, norm_first, activation, x, memory, src_mask, tgt_mask)
    what = describe_layer(decoder, norm_first, activation, x, memory, label)
    want, _ = expected_layer(p, d, d_ff, norm_first, activation, x, memory, src_mask, tgt_mask)
    tried = lambda: layer_tried(t, kind, reply["outputs"][0], want, p, norm_first, activation, x, memory,  # noqa: E731
                                src_mask, tgt_mask)

    def unused():
        g = torch.ones_like(want)
        grads = run_layer(t, p, d, d_ff, norm_first, activation, x, memory, src_mask, tgt_mask,
                          backward=[g]).get("param_grads")
        return never_used(grads)
    with signature_said(t, kind):
        t.expect_close(reply["outputs"][0], want, f"The output of {what}", tried, probes=[unused])
    names, values = (("x", "memory", "src_mask", "tgt_mask"), (x, memory, src_mask, tgt_mask)) if decoder else \
        (("x", "src_mask"), (x, src_mask))
    inputs_kept(t, reply, "DecoderLayer" if decoder else "EncoderLayer", names, values, what)
    return reply, p


# ---- groups ------------------------------------------------------------------------------------

@group("m3", "layer_norm", provides=("LayerNorm",))
def layer_norm(t: Tester):
    d = 6
    reply = t.module("LayerNorm", (d,))
    names = set(reply["params"])
    if names != {"weight", "bias"}:
        t.fail(f"LayerNorm({d}) should have exactly the parameters weight and bias (nn.Parameter), but it has "
               f"{', '.join(sorted(names)) or 'none'}.", PARAMETER_NAMES)
    for name, want in (("weight", torch.ones(d)), ("bias", torch.zeros(d))):
        got = t.expect_tensor(reply["params"][name], f"LayerNorm({d}).{name}", shape=(d,))
        if not torch.equal(got.to(torch.float32), want):
            t.fail(f"LayerNorm({d}).{name} should start as {'ones' if name == 'weight' else 'zeros'}, like "
                   f"nn.LayerNorm's.", LAYER_NORM_INIT)
    # A large mean with a tiny spread shows where eps goes (float64 only: float32 cannot resolve it).
    # A non-default eps, with a spread small enough that eps matters (float64 and float32).
    cases = [((2, 3, d), 1.0, 0.0, torch.float64, 1e-5), ((5, d), 1.0, 0.0, torch.float64, 1e-5),
             ((2, 3, 4, d), 1.0, 0.0, torch.float64, 1e-5), ((3, 4, d), 1e-3, 100.0, torch.float64, 1e-5),
             ((3, 4, d), 1.0, 0.0, torch.float32, 1e-5), ((2, 5, d), 0.1, 1.0, torch.float32, 1e-5),
             ((3, 4, d), 0.03, 0.5, torch.float64, 1e-3), ((2, 3, d), 0.1, 0.0, torch.float32, 1e-2)]
    for shape, spread, mean, dtype, eps in cases:
        x = t.randn(*shape, dtype=dtype, scale=spread) + mean
        w, b = 1 + t.randn(d, dtype=dtype, scale=0.5), t.randn(d, dtype=dtype, scale=0.5)
        reply = t.module("LayerNorm", (d,), {"eps": eps} if eps != 1e-5 else None, params={"weight": w, "bias": b},
                         dtype="float64" if dtype == torch.float64 else None, calls=[{"args": [x]}])
        got = reply["outputs"][0]
        what = (f"LayerNorm({d}{'' if eps == 1e-5 else f', eps={eps:g}'}) on x {shape_str(shape)} "
                f"({str(dtype).replace('torch.', '')}, mean {mean:g}, spread {spread:g})")
        want = F.layer_norm(x, (d,), w, b, eps)
        t.expect_close(got, want, f"The output of {what}",
                       lambda x=x, w=w, b=b, eps=eps, got=got, want=want: strict_tried("layer_norm", got, want, x, w, b,
                                                                                      eps=eps))
        t.expect_tensor(got, f"The output of {what}", dtype=dtype)
        inputs_kept(t, reply, "LayerNorm", ("x",), (x,), what)


@group("m3", "feed_forward", provides=("FeedForward",))
def feed_forward(t: Tester):
    d, d_ff = 6, 10
    for activation in ("relu", "gelu"):
        reply = t.module("FeedForward", (d, d_ff), {"activation": activation})
        shapes = {k: tuple(v.shape) for k, v in reply["params"].items() if torch.is_tensor(v)}
        want_shapes = {"linear1.weight": (d_ff, d), "linear1.bias": (d_ff,), "linear2.weight": (d, d_ff),
                       "linear2.bias": (d,)}
        if {k: shapes.get(k) for k in want_shapes} != want_shapes:
            t.fail(f"FeedForward({d}, {d_ff}) should have linear1 = nn.Linear({d}, {d_ff}) and linear2 = "
                   f"nn.Linear({d_ff}, {d}); its parameters are {shapes}.", PARAMETER_NAMES)
        p = sub_params(layer_params(t, d, d_ff), "feed_forward")
        for dtype in (torch.float64, torch.float32):
            x = t.randn(3, 4, d, dtype=dtype, scale=2.0)
            pp = {k: v.to(dtype) for k, v in p.items()}
            reply = t.module("FeedForward", (d, d_ff), {"activation": activation}, params=pp, calls=[{"args": [x]}],
                             dtype="float64" if dtype == torch.float64 else None)
            want = feed_forward_fn(pp, x, activation)
            what = (f"FeedForward({d}, {d_ff}, activation={activation!r}) on x {shape_str(x.shape)} "
                    f"({str(dtype).replace('torch.', '')})")
            t.expect_close(reply["outputs"][0], want, f"The output of {what}",
                           lambda pp=pp, x=x: CATALOGUE.tried("feed_forward", pp, x, activation))
            inputs_kept(t, reply, "FeedForward", ("x",), (x,), what)


@group("m3", "encoder_layer", depends=PARTS)
def encoder_layer(t: Tester):
    d, d_ff, B, L = 8, 16, 3, 5
    src_mask, _, _ = ragged_masks(B, L, L)
    x = t.randn(B, L, d)
    for norm_first in (False, True):
        for activation in ("relu", "gelu"):
            check_layer(t, d, d_ff, norm_first, activation, x, src_mask=src_mask,
                        label=f"a padding mask {shape_str(src_mask.shape)}")
        check_layer(t, d, d_ff, norm_first, "relu", x, label="no mask")
    x32 = t.randn(B, L, d, dtype=torch.float32)
    check_layer(t, d, d_ff, True, "gelu", x32, src_mask=src_mask, label="a padding mask (float32)")
    check_layer(t, d, d_ff, False, "relu", x32, src_mask=src_mask, label="a padding mask (float32)")


@group("m3", "decoder_layer", depends=PARTS)
def decoder_layer(t: Tester):
    d, d_ff, B, Lt, Ls = 8, 16, 3, 4, 6
    src_mask, causal, tgt_mask = ragged_masks(B, Lt, Ls)
    x, memory = t.randn(B, Lt, d), t.randn(B, Ls, d)
    for norm_first in (False, True):
        # The causal-only case first: its errors tell swapped masks from swapped attention arguments.
        check_layer(t, d, d_ff, norm_first, "gelu", x, memory, None, causal, f"a causal mask {shape_str(causal.shape)}")
        check_layer(t, d, d_ff, norm_first, "relu", x, memory, src_mask, tgt_mask,
                    f"source padding {shape_str(src_mask.shape)} and causal + target padding {shape_str(tgt_mask.shape)}")
        check_layer(t, d, d_ff, norm_first, "relu", x, memory, None, None, "no masks")
    x32, m32 = t.randn(B, Lt, d, dtype=torch.float32), t.randn(B, Ls, d, dtype=torch.float32)
    check_layer(t, d, d_ff, True, "relu", x32, m32, src_mask, tgt_mask, "both masks (float32)")
    check_layer(t, d, d_ff, False, "gelu", x32, m32, src_mask, tgt_mask, "both masks (float32)")


@group("m3", "gradients", depends=PARTS)
def gradients(t: Tester):
    d, d_ff, B, Lt, Ls = 8, 12, 2, 4, 5
    src_mask, _, tgt_mask = ragged_masks(B, Lt, Ls)
    for norm_first in (False, True):
        x, memory = t.randn(B, Lt, d), t.randn(B, Ls, d)
        p = layer_params(t, d, d_ff, True)
        g = t.randn(B, Lt, d)
        with signature_said(t, "decoder"):
            reply = run_layer(t, p, d, d_ff, norm_first, "gelu", x, memory, src_mask, tgt_mask, backward=[g])
        what = describe_layer(True, norm_first, "gelu", x, memory, "both masks")
        want, want_grads = expected_layer(p, d, d_ff, norm_first, "gelu", x, memory, src_mask, tgt_mask, grad=g)
        with signature_said(t, "decoder"):
            t.expect_close(reply["outputs"][0], want, f"The output of {what}",
                           lambda: layer_tried(t, "decoder", reply["outputs"][0], want, p, norm_first, "gelu", x,
                                               memory, src_mask, tgt_mask),
                           probes=[lambda: never_used(reply.get("param_grads"))])
        grads = reply.get("param_grads")
        if grads is None:
            t.fail(f"No gradient reached the parameters of {what}: {reply.get('grad_problem')}.", GRAPH_CUT)
        for i, name in enumerate(("x", "memory")):
            got = (reply.get("input_grads") or [None, None])[i]
            if got is None:
                t.fail(f"No gradient reached the `{name}` input of {what}: do not .detach() it.", GRAPH_CUT)
            t.expect_close(got, want_grads[name], f"The gradient with respect to `{name}` of {what}")
        for name, want_g in want_grads.items():
            if name in ("x", "memory"):
                continue
            got = grads.get(name)
            if got is None:
                found = never_used(grads)
                t.fail(f"No gradient reached `{name}` in {what}." + (f" Likely cause: {found.text}" if found else ""),
                       found or GRAPH_CUT)
            t.expect_close(got, want_g, f"The gradient of `{name}` in {what}")


@group("m3", "behaviour", depends=PARTS, style=True)
def behaviour(t: Tester):
    d, d_ff, B, Lt, Ls = 8, 12, 3, 5, 6
    src_mask, causal, tgt_mask = ragged_masks(B, Lt, Ls)
    for norm_first in (False, True):
        p = layer_params(t, d, d_ff, True)
        x, memory = t.randn(B, Lt, d), t.randn(B, Ls, d)
        what = describe_layer(True, norm_first, "relu", x, memory, "both masks")
        base = run_layer(t, p, d, d_ff, norm_first, "relu", x, memory, src_mask, tgt_mask)["outputs"][0]
        t.works(base, expected_layer(p, d, d_ff, norm_first, "relu", x, memory, src_mask, tgt_mask)[0], f"`{what}`")
        later = x.clone()
        later[:, 3:] = t.randn(B, Lt - 3, d)
        out = run_layer(t, p, d, d_ff, norm_first, "relu", later, memory, src_mask, tgt_mask)["outputs"][0]
        if not torch.allclose(out[:, :3], base[:, :3], atol=1e-12):
            t.fail(f"{what}: changing target positions 3 and later changed the outputs at positions 0..2. With a "
                   f"causal tgt_mask a position must not see later ones: pass tgt_mask to the self-attention.",
                   LOOKS_AHEAD)
        padded = memory.clone()
        padded[~src_mask[:, 0, :]] = t.randn(int((~src_mask).sum()), d)
        out = run_layer(t, p, d, d_ff, norm_first, "relu", x, padded, src_mask, tgt_mask)["outputs"][0]
        if not torch.allclose(out, base, atol=1e-12):
            t.fail(f"{what}: changing `memory` at padded source positions changed the output. The source padding "
                   f"mask must reach the cross-attention: cross_attn(..., src_mask).", PADDING_NOT_IGNORED)
        alone = run_layer(t, p, d, d_ff, norm_first, "relu", x[1:2], memory[1:2], src_mask[1:2],
                          tgt_mask[1:2])["outputs"][0]
        if not torch.allclose(alone, base[1:2], atol=1e-12):
            t.fail(f"{what}: batch item 1 gives a different output alone than inside the batch: batch items must "
                   f"not mix (statistics over the batch dimension?).", BATCH_MIXING)
    # Eval mode is deterministic, in every layer and form the dropout group reads in eval mode (that group
    # leaves random eval-mode outputs to this one: one mistake, charged once).
    for decoder in (False, True):
        for norm_first in (False, True):
            pe = layer_params(t, d, d_ff, decoder)
            x = t.randn(B, Lt, d)
            mem = t.randn(B, Ls, d) if decoder else None
            reply = run_layer(t, pe, d, d_ff, norm_first, "relu", x, mem, dropout=0.5, calls=2)
            if not eval_deterministic(reply["outputs"]):
                cls = "DecoderLayer" if decoder else "EncoderLayer"
                form = "" if not decoder and not norm_first else ("pre-LN, " if norm_first else "post-LN, ")
                t.fail(f"{cls}({form}dropout=0.5) gives different outputs for the same input in eval mode: dropout "
                       f"must act only in training mode (nn.Dropout follows model.eval(); F.dropout needs "
                       f"training=self.training).", DROPOUT_IN_EVAL)


def eval_deterministic(outputs) -> bool:
    """False when two eval-mode calls on the same input (each with its own seed) gave different tensors."""
    a, b = outputs[:2]
    return not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and not torch.equal(a, b))


def expect_eval_values(t: Tester, outputs, want, what, tried):
    """The dropout group's eval-mode comparison. Dropout that still acts in eval mode makes two calls differ:
    that is the behaviour group's finding ("eval mode is deterministic") and is not charged here again; the
    values are compared only when eval mode is deterministic. `tried(output, want)`: the known mistakes' values."""
    if eval_deterministic(outputs):
        t.expect_close(outputs[0], want, what, functools.partial(tried, outputs[0], want))


def _branch_check(t: Tester, what, out, x, branch, p):
    """`out` of a pre-LN layer on `x` whose only non-zero sub-layer output is the constant `branch`: with
    dropout p on that sub-layer's output, out - x is 0 or branch / (1 - p), entry by entry."""
    diff = out - x
    zero = diff.abs() < 1e-12
    share = zero.double().mean().item()
    if 0.25 < share < 0.75 and torch.allclose(diff[~zero], (branch / (1 - p)).expand_as(diff)[~zero], atol=1e-9):
        return
    if share == 0 and torch.allclose(diff, branch.expand_as(diff), atol=1e-9):
        t.fail(f"{what}: in training mode this sub-layer's output reaches the residual without dropout. Apply "
               f"the layer's dropout to each sub-layer's output before adding it: x + drop(sublayer(...)).",
               NO_RESIDUAL_DROPOUT)
    # The sum dropped: by this sub-layer's dropout, and again by each later sub-layer's when every residual sum
    # is dropped (the other sub-layers output 0 here), so the survivors are (x + branch) / (1 - p)^k.
    dropped = out.abs() < 1e-12
    if 0.25 < dropped.double().mean().item() < 0.95 and any(torch.allclose(
            out[~dropped], ((x + branch) / (1 - p) ** k)[~dropped], atol=1e-9) for k in (1, 2, 3)):
        t.fail(f"{what}: in training mode dropout is applied to the residual sum (x + sublayer(x)); it belongs on "
               f"the sub-layer's output before the add: x + drop(sublayer(...)).", DROPOUT_ON_RESIDUAL_SUM)
    t.fail(f"{what}: in training mode (dropout=0.5) the sub-layer's output should be dropped (about half of its "
           f"entries 0) and the rest divided by 1 - p, then added to x; this layer's output does not fit that.")



def _post_ln_stream_check(t: Tester, what, trained, evaluated):
    """Post-LN, every sub-layer outputting exactly 0: with dropout on the sub-layer outputs only, nothing
    random can reach the output, so training mode must give exactly the eval-mode output."""
    if not torch.allclose(trained, evaluated, atol=1e-9):
        t.fail(f"{what}: with every sub-layer's output 0, training mode still changes the output, so dropout acts "
               f"on the residual stream itself (for example norm(drop(x + sublayer(x)))); it belongs on the "
               f"sub-layer's output only: norm(x + drop(sublayer(x))).", DROPOUT_ON_RESIDUAL_SUM)


def _post_ln_branch_check(t: Tester, what, out, x, branch, p, norm_weights):
    """Post-LN with one live sub-layer outputting the constant `branch`: each position's output is the norms
    applied to x + m * branch / (1 - p) for some 0/1 mask m; there are few masks (2^d_model): try them all."""
    d = x.size(-1)
    masks = torch.tensor([[(k >> j) & 1 for j in range(d)] for k in range(2 ** d)], dtype=torch.float64)
    if torch.allclose(out, through_norms(x + branch, norm_weights), atol=1e-7):
        t.fail(f"{what}: in training mode this sub-layer's output reaches the residual without dropout. Apply "
               f"the layer's dropout to each sub-layer's output before adding it: norm(x + drop(sublayer(x))).",
               NO_RESIDUAL_DROPOUT)
    for xi, yi in zip(x.reshape(-1, d), out.reshape(-1, d)):
        cand = through_norms(xi + masks * branch / (1 - p), norm_weights)           # [2^d, d]
        if not ((cand - yi).abs().amax(-1) < 1e-7).any():
            t.fail(f"{what}: in training mode (dropout=0.5) the output is not norm(x + drop(sublayer(x))) for any "
                   f"dropout pattern: apply the layer's dropout to each sub-layer's output, before the residual add.")


def _ffn_dropout_in_layer(t: Tester, decoder: bool, p: float):
    """A pre-LN layer in training mode whose attention sub-layers output exactly 0 and whose feed-forward has
    linear2 = identity: each output entry is x + m_r * m_h * a / (1 - p)^2, with a = act(linear1(norm(x))), m_h
    the hidden dropout inside the feed-forward and m_r the dropout on its output. A feed-forward built without
    the layer's dropout shows as another scale of the entries that survive."""
    d, B, L = 8, 4, 6
    cls = "DecoderLayer" if decoder else "EncoderLayer"
    q = layer_params(t, d, d, decoder)
    for name in ("self_attn.w_o", "cross_attn.w_o"):
        if f"{name}.weight" in q:
            q[f"{name}.weight"], q[f"{name}.bias"] = torch.zeros(d, d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    q["feed_forward.linear2.weight"] = torch.eye(d, dtype=torch.float64)
    q["feed_forward.linear2.bias"] = torch.zeros(d, dtype=torch.float64)
    x = t.randn(B, L, d)
    memory = t.randn(B, L + 1, d) if decoder else None
    out = run_layer(t, q, d, d, True, "relu", x, memory, dropout=p, train=True)["outputs"][0]
    out = t.expect_tensor(out, f"The output of {cls}(pre-LN, dropout={p}) in training mode", shape=x.shape)
    n = "norm3" if decoder else "norm2"
    normed = F.layer_norm(x, (d,), q[f"{n}.weight"], q[f"{n}.bias"])
    a = F.relu(normed @ q["feed_forward.linear1.weight"].T + q["feed_forward.linear1.bias"])
    y = out - x
    live, zero = a.abs() > 1e-6, y.abs() < 1e-12
    kept = live & ~zero
    what = (f"{cls}(pre-LN, dropout={p}) in training mode, its feed-forward sub-layer alone (linear2 = identity, "
            f"the attention sub-layers silenced)")
    if kept.sum() < 10:
        t.fail(f"{what}: almost every entry of the feed-forward's contribution is 0, where dropout {p} on the hidden "
               f"activations and on the sub-layer's output keeps about {(1 - p) ** 2:.0%} of them.")
    ratio = y[kept] / a[kept]
    scale = ratio.mean().item()
    if torch.allclose(ratio, torch.full_like(ratio, 1 / (1 - p) ** 2), rtol=1e-7, atol=0):
        return
    if torch.allclose(ratio, torch.full_like(ratio, scale), rtol=1e-7, atol=0) and scale * (1 - p) > 1 - 1e-9:
        inner = 1 - 1 / (scale * (1 - p))        # the rate the hidden dropout scaled the survivors with
        said = ("are never dropped: it keeps FeedForward's default 0.0" if inner < 1e-6 else
                f"are dropped with p = {inner:.3g}, not the layer's {p}")
        t.fail(f"{what}: the feed-forward's hidden activations {said}. The layer's one dropout also goes to its "
               f"feed-forward: FeedForward(d_model, d_ff, dropout, activation).", FFN_DROPOUT_NOT_PASSED)
    t.fail(f"{what}: the surviving entries are not activation(linear1(norm(x))) / (1 - p)^2 (dropout {p} on the "
           f"hidden activations inside feed_forward, then on the sub-layer's output).")


@group("m3", "dropout", depends=PARTS)
def dropout(t: Tester):
    d, B, L, p = 8, 4, 6, 0.5
    zeros = functools.partial(torch.zeros, dtype=torch.float64)
    # Eval mode: equal to PyTorch's (outputs that differ from call to call are the behaviour group's finding).
    pe = layer_params(t, d, d)
    x = t.randn(B, L, d)
    reply = run_layer(t, pe, d, d, True, "relu", x, dropout=p, attrs=("self_attn.dropout",), calls=2)
    expect_eval_values(t, reply["outputs"], expected_layer(pe, d, d, True, "relu", x)[0],
                       "The output of EncoderLayer(pre-LN, dropout=0.5) in eval mode (dropout must be off)",
                       lambda out, want: layer_tried(t, "encoder", out, want, pe, True, "relu", x))
    if reply["attrs"][0].get("self_attn.dropout") != p:
        t.fail(f"EncoderLayer(dropout={p}) builds its self_attn without that dropout (its attention weights are "
               f"never dropped): MultiHeadAttention(d_model, num_heads, dropout).", ATTENTION_DROPOUT_MISSING)
    # The feed-forward's hidden dropout: with linear2 invertible, the hidden activations show.
    ff = sub_params(pe, "feed_forward")
    xf = t.randn(B, L, d)
    # gelu, not relu: with relu, dropout before or after the activation gives the same numbers.
    kw = {"dropout": p, "activation": "gelu"}
    evaluated = t.module("FeedForward", (d, d), kw, params=ff, dtype="float64",
                         calls=[{"args": [xf], "seed": s} for s in (3, 4)])["outputs"]
    expect_eval_values(t, evaluated, feed_forward_fn(ff, xf, "gelu"), "The output of FeedForward(dropout=0.5, "
                       "activation='gelu') in eval mode", lambda out, want: CATALOGUE.tried("feed_forward", ff, xf, "gelu"))
    out = t.module("FeedForward", (d, d), kw, params=ff, train=True, dtype="float64",
                     calls=[{"args": [xf], "seed": 3}])["outputs"][0]
    if ((out == 0).double().mean().item() > 0.25):
        t.fail("FeedForward(dropout=0.5) in training mode zeroes its outputs: the dropout sits after linear2. It "
               "belongs on the hidden activations: linear2(dropout(activation(linear1(x)))).", FFN_DROPOUT_MISPLACED)
    hidden = torch.linalg.solve(ff["linear2.weight"], (out - ff["linear2.bias"]).reshape(-1, d).T).T.reshape(out.shape)
    pre = xf @ ff["linear1.weight"].T + ff["linear1.bias"]
    act = F.gelu(pre)
    live = act.abs() > 1e-6
    zero = hidden.abs() < 1e-8
    share = (zero & live).double().sum().item() / max(1, live.sum().item())
    if share == 0:
        t.fail("FeedForward(dropout=0.5) in training mode does not drop its hidden activations: "
               "linear2(dropout(activation(linear1(x)))).", FFN_NO_DROPOUT)
    kept = live & ~zero
    if 0.25 < share < 0.75 and torch.allclose(hidden[kept], F.gelu(pre[kept] / (1 - p)), atol=1e-8):
        t.fail("FeedForward(dropout=0.5, activation='gelu') in training mode drops the hidden values before the "
               "activation; dropout comes after it: linear2(dropout(activation(linear1(x)))).",
               FFN_DROPOUT_BEFORE_ACTIVATION)
    scale = (hidden[kept] / act[kept]).median().item() if kept.any() else 0.0
    rate = 1 - 1 / scale if scale > 1 else 0.0
    if abs(rate - p) > 0.02 and 0 < rate < 1 and torch.allclose(hidden[kept], act[kept] * scale, atol=1e-8):
        t.fail(f"FeedForward(dropout=0.5) in training mode drops its hidden activations at the rate {rate:.2g}, not "
               f"0.5: the survivors are scaled by {scale:.4g} = 1 / (1 - {rate:.2g}) and about {share:.0%} are "
               f"dropped. Use the dropout argument: nn.Dropout(dropout), not a fixed rate.", FFN_DROPOUT_RATE_IGNORED)
    if not (0.25 < share < 0.75 and torch.allclose(hidden[kept], act[kept] / (1 - p), atol=1e-8)):
        t.fail("FeedForward(dropout=0.5) in training mode: dropout must act on the hidden activations (after the "
               "activation, before linear2), keeping the survivors scaled by 1 / (1 - p).", FFN_DROPOUT_MISPLACED)
    # Training mode, one sub-layer at a time: it outputs a constant b (its last weight 0, its bias b).
    b = 1 + t.randn(d).abs()
    for branch, zeroed in (("self-attention", "feed_forward"), ("feed-forward", "self_attn")):
        q = dict(pe)
        q.update({"self_attn.w_o.weight": zeros(d, d), "self_attn.w_o.bias": zeros(d),
                  "feed_forward.linear2.weight": zeros(d, d), "feed_forward.linear2.bias": zeros(d)})
        q["self_attn.w_o.bias" if branch == "self-attention" else "feed_forward.linear2.bias"] = b
        out = run_layer(t, q, d, d, True, "relu", x, dropout=p, train=True)["outputs"][0]
        _branch_check(t, f"EncoderLayer(pre-LN, dropout=0.5), {branch} sub-layer", out, x, b, p)
    # Post-LN: every sub-layer silenced (nothing random may then reach the output), then one live sub-layer
    # read through the norms (d_model 6: 64 dropout patterns per position, all tried).
    d6 = 6
    x6 = t.randn(2, 3, d6)
    b6 = 1 + t.randn(d6).abs()
    for cls_decoder in (False, True):
        q = layer_params(t, d6, d6, cls_decoder)
        mem6 = t.randn(2, 4, d6) if cls_decoder else None
        for name in ("self_attn.w_o", "cross_attn.w_o", "feed_forward.linear2"):
            if f"{name}.weight" in q:
                q[f"{name}.weight"], q[f"{name}.bias"] = zeros(d6, d6), zeros(d6)
        norms = [(q[f"norm{n}.weight"], q[f"norm{n}.bias"]) for n in range(1, 4 if cls_decoder else 3)]
        cls = "DecoderLayer" if cls_decoder else "EncoderLayer"
        silent = [run_layer(t, q, d6, d6, False, "relu", x6, mem6, dropout=p, train=train)["outputs"][0]
                  for train in (False, True)]
        _post_ln_stream_check(t, f"{cls}(post-LN, dropout=0.5)", silent[1], silent[0])
        q["self_attn.w_o.bias"] = b6
        ev = run_layer(t, q, d6, d6, False, "relu", x6, mem6, dropout=p, calls=2)["outputs"]
        expect_eval_values(t, ev, expected_layer(q, d6, d6, False, "relu", x6, mem6)[0], f"The output of {cls}("
                           f"post-LN, dropout=0.5) in eval mode", lambda out, want: layer_tried(
                               t, "decoder" if cls_decoder else "encoder", out, want, q, False, "relu", x6, mem6))
        out = run_layer(t, q, d6, d6, False, "relu", x6, mem6, dropout=p, train=True)["outputs"][0]
        _post_ln_branch_check(t, f"{cls}(post-LN, dropout=0.5), self-attention sub-layer", out, x6, b6, p, norms)
    # The decoder's three sub-layers (pre-LN), each on its own, after its eval-mode values are right.
    pd = layer_params(t, d, d, True)
    memory = t.randn(B, L + 1, d)
    ev = run_layer(t, pd, d, d, True, "relu", x, memory, dropout=p, calls=2)["outputs"]
    expect_eval_values(t, ev, expected_layer(pd, d, d, True, "relu", x, memory)[0],
                       "The output of DecoderLayer(pre-LN, dropout=0.5) in eval mode (dropout must be off)",
                       lambda out, want: layer_tried(t, "decoder", out, want, pd, True, "relu", x, memory))
    for branch, bias in (("self-attention", "self_attn.w_o.bias"), ("cross-attention", "cross_attn.w_o.bias"),
                         ("feed-forward", "feed_forward.linear2.bias")):
        q = dict(pd)
        for name in ("self_attn.w_o", "cross_attn.w_o", "feed_forward.linear2"):
            q[f"{name}.weight"], q[f"{name}.bias"] = zeros(d, d), zeros(d)
        q[bias] = b
        reply = run_layer(t, q, d, d, True, "relu", x, memory, dropout=p, train=True,
                          attrs=("self_attn.dropout", "cross_attn.dropout"))
        _branch_check(t, f"DecoderLayer(pre-LN, dropout=0.5), {branch} sub-layer", reply["outputs"][0], x, b, p)
        for name in ("self_attn", "cross_attn"):
            if reply["attrs"][0].get(f"{name}.dropout") != p:
                t.fail(f"DecoderLayer(dropout={p}) builds its {name} without that dropout (its attention weights "
                       f"are never dropped): MultiHeadAttention(d_model, num_heads, dropout).",
                       ATTENTION_DROPOUT_MISSING)
    # The feed-forward's hidden dropout inside each layer, at another rate than any default.
    for decoder in (False, True):
        _ffn_dropout_in_layer(t, decoder, 0.3)


@group("m3", "structure", depends=PARTS, style=True)
def structure(t: Tester):
    d, d_ff = 8, 12
    x, memory = t.randn(2, 3, d), t.randn(2, 4, d)
    p = layer_params(t, d, d_ff, True)
    reply = run_layer(t, p, d, d_ff, True, "relu", x, memory)
    t.works(reply["outputs"][0], expected_layer(p, d, d_ff, True, "relu", x, memory)[0], "`DecoderLayer`")
    want = {"self_attn": "MultiHeadAttention", "cross_attn": "MultiHeadAttention", "feed_forward": "FeedForward",
            "norm1": "LayerNorm", "norm2": "LayerNorm", "norm3": "LayerNorm"}
    for cls, names, norm_first in (("EncoderLayer", ("self_attn", "feed_forward", "norm1", "norm2"), False),
                                   ("DecoderLayer", tuple(want), True)):
        reply = t.module(cls, (d, 2, d_ff), {"norm_first": norm_first}, attrs=("norm_first",), dtype="float64",
                         calls=[{"args": [x, memory] if cls == "DecoderLayer" else [x]}])
        kids = reply["children"]
        for name in names:
            if kids.get(name) != want[name]:
                t.fail(f"{cls}.{name} should be a {want[name]} (the one of {'multihead' if 'attn' in name else 'blocks'}"
                       f".py), but it is {kids.get(name) or 'missing'}.", SUBMODULE_KINDS)
        # Two sub-layers of the stub that are one object; the same module under a second name of the student's
        # (an Annotated-Transformer sublayer[i].norm that is norm1) is not sharing.
        shared = {k: v for k, v in reply["shared_with"].items() if k in names and v in names}
        if shared:
            t.fail(f"In {cls}, {', '.join(f'{k} is the same module object as {v}' for k, v in shared.items())}: each "
                   f"sub-layer needs its own weights.", SHARED_SUBMODULE)
        if reply["attrs"][0].get("norm_first") is not norm_first:
            t.fail(f"{cls}(..., norm_first={norm_first}).norm_first should be {norm_first}.", NORM_FIRST_ATTRIBUTE)
    ff_refuses = False
    for cls, args in (("FeedForward", (d, d_ff)), ("EncoderLayer", (d, 2, d_ff)), ("DecoderLayer", (d, 2, d_ff))):
        reply = t.module(cls, args, {"activation": "tanh"}, allow_error=True)
        if reply.get("ok") and ff_refuses:
            # FeedForward refuses 'tanh' itself: the layer never hands `activation` on (its own known mistake,
            # charged once with the layer's values).
            kind = "decoder" if cls == "DecoderLayer" else "encoder"
            forgot = next(m for m in CATALOGUE.entries[kind] if m.id == "activation_not_passed")
            t.fail(f"{cls}(..., activation='tanh') should raise ValueError, but it was created, although your "
                   f"FeedForward refuses 'tanh'. Likely cause: {forgot.text}", forgot)
        if reply.get("ok"):
            t.fail(f"{cls}(..., activation='tanh') should raise ValueError (only 'relu' and 'gelu' are allowed), "
                   f"but it was created.", ACTIVATION_NOT_CHECKED)
        ff_refuses = ff_refuses or (cls == "FeedForward" and reply.get("type") == "ValueError")
        message = str(reply.get("message", ""))
        if reply.get("type") != "ValueError" or "relu" not in message or "gelu" not in message:
            t.fail(f"{cls}(..., activation='tanh') should raise ValueError naming the allowed values 'relu' and "
                   f"'gelu'; it raised {reply.get('type')}: {message}", ACTIVATION_ERROR_MESSAGE)
        # The names are lowercase: "GELU" or "ReLU" is another value, refused like any other.
        for name in (("GELU", "ReLU") if cls == "FeedForward" else ("GELU",)):
            reply = t.module(cls, args, {"activation": name}, allow_error=True)
            if reply.get("ok"):
                t.fail(f"{cls}(..., activation={name!r}) should raise ValueError: the allowed values are exactly "
                       f"'relu' and 'gelu', lowercase, as the docstring says; it was created, so a name in another "
                       f"case is accepted (compare the name as given, without .lower()).", ACTIVATION_CASE)
            if reply.get("type") != "ValueError":
                t.fail(f"{cls}(..., activation={name!r}) should raise ValueError naming the allowed values 'relu' "
                       f"and 'gelu'; it raised {reply.get('type')}: {reply.get('message')}", ACTIVATION_ERROR_MESSAGE)


def mask_forms(decoder: bool, B: int, L: int):
    """Every form of mask the layers take, as (label, src_mask, tgt_mask): none, padding [B, 1, L], a full
    [B, Lq, Lk] mask and a 2-D [Lq, Lk] one (the decoder: Lt = L, Ls = L + 1). A loop may hide behind one
    form only (e.g. a loop over the batch for 3-D masks)."""
    Ls = L + 1 if decoder else L
    src, causal, combined = ragged_masks(B, L, Ls)          # [B, 1, Ls], [L, L], [B, L, L]
    if not decoder:
        return [("no mask", None, None), ("a padding mask [B, 1, L]", src, None),
                ("a mask [B, L, L]", combined, None), ("a mask [L, L]", causal, None)]
    near = src & (torch.arange(Ls)[None, None, :] <= torch.arange(L)[None, :, None] + 1)    # [B, Lt, Ls]
    return [("no masks", None, None),
            ("src_mask [B, 1, Ls] and tgt_mask [Lt, Lt]", src, causal),
            ("src_mask [B, Lt, Ls] and tgt_mask [B, Lt, Lt]", near, combined),
            ("src_mask [B, 1, Ls] and tgt_mask [B, 1, Lt]", src, combined[:, -1:, :].clone())]


@group("m3", "vectorization", depends=PARTS, style=True, observes=True)
def vectorization(t: Tester):
    d, d_ff = 8, 12

    def count(decoder, B, L, pick=None):
        """The op count of one request running the layer once per mask form (or only form `pick`)."""
        cls = "DecoderLayer" if decoder else "EncoderLayer"
        x, memory = t.randn(B, L, d), (t.randn(B, L + 1, d) if decoder else None)
        p = layer_params(t, d, d_ff, decoder)
        forms = mask_forms(decoder, B, L)
        forms = forms if pick is None else [forms[pick]]
        calls = [{"args": [x, memory, s, m] if decoder else [x, s]} for _, s, m in forms]
        reply = t.module(cls, (d, HEADS, d_ff), {"norm_first": True}, calls=calls, params=p, record=True,
                         dtype="float64")
        for out, (label, s, m) in zip(reply["outputs"], forms):
            t.works(out, expected_layer(p, d, d_ff, True, "relu", x, memory, s, m)[0], f"`{cls}`")
        return reply["record"]["op_count"]

    for decoder, name in ((False, "EncoderLayer.forward"), (True, "DecoderLayer.forward")):
        b, n = t.grown(2, 9, 25), t.grown(3, 9, 25)            # beyond any small padded count
        forms = len(mask_forms(decoder, 2, 3))
        limit = (200 if decoder else 120)                        # per call, at the base size
        advice = "Let each sub-layer work on the whole [B, L, d_model] tensor at once, whatever the mask's form."

        sizes = {"base": (2, 3), f"the batch grew from 2 to {b}": (b, 3), f"the length grew from 3 to {n}": (2, n)}
        every = {k: count(decoder, *v) for k, v in sizes.items()}
        if len(set(every.values())) == 1 and every["base"] <= limit * forms:
            continue
        # Which form: name it (at the base size and the first size whose count changed).
        grew = next((k for k, v in every.items() if v != every["base"]), None)
        for i, (label, _, _) in enumerate(mask_forms(decoder, 2, 3)):
            t.expect_constant_ops({k: count(decoder, *sizes[k], i) for k in ("base", grew) if k is not None},
                                  "base size", f"{name} (with {label})", advice, limit=limit)
        t.expect_constant_ops(every, "base size", name, advice, limit=limit * forms)
    # LayerNorm and FeedForward take any number of leading dimensions: the layers only pass [B, L, d_model],
    # so a loop reserved for more dimensions shows on a 4-D input alone, at two sizes of each leading dim.
    b, n = t.grown(2, 9, 25), t.grown(3, 9, 25)
    sizes = {"base": (2, 3, 4), f"dim 0 grew from 2 to {b}": (b, 3, 4), f"dim 1 grew from 3 to {n}": (2, n, 4)}
    ff = sub_params(layer_params(t, d, d_ff), "feed_forward")
    for cls, args, params, right in (("LayerNorm", (d,), None, lambda x: F.layer_norm(x, (d,))),
                                     ("FeedForward", (d, d_ff), ff, lambda x: feed_forward_fn(ff, x, "relu"))):
        if cls not in t.values.working:
            continue           # wrong everywhere: charged in its own group; the layers above ran with a stand-in

        def count(shape):
            x = t.randn(*shape, d)
            reply = t.module(cls, args, calls=[{"args": [x]}], params=params, record=True, dtype="float64")
            t.works(reply["outputs"][0], right(x), f"`{cls}`")
            return reply["record"]["op_count"]
        t.expect_constant_ops({k: count(v) for k, v in sizes.items()}, "base size",
                              f"{cls}.forward (on a 4-D input [2, 3, 4, d_model])",
                              f"{cls} takes any number of leading dimensions: let it work on the whole tensor at "
                              f"once (operations over the last dimension), whatever x.dim() is.")


@group("m3", "from_scratch", depends=PARTS, style=True, observes=True)
def from_scratch(t: Tester):
    d, d_ff = 8, 12
    x, memory = t.randn(2, 3, d), t.randn(2, 4, d)
    p = layer_params(t, d, d_ff, True)
    reply = run_layer(t, p, d, d_ff, False, "gelu", x, memory, record=True)
    t.works(reply["outputs"][0], expected_layer(p, d, d_ff, False, "gelu", x, memory)[0], "`DecoderLayer`")
    record = dict(reply["record"])
    record["functions"] = record["functions"] + reply.get("submodules", [])
    t.expect_allowed(record, "DecoderLayer")
    ln = t.module("LayerNorm", (d,), calls=[{"args": [x]}], record=True, dtype="float64")
    t.works(ln["outputs"][0], F.layer_norm(x, (d,)), "`LayerNorm`")
    record = dict(ln["record"])
    record["functions"] = record["functions"] + ln.get("submodules", [])
    t.expect_allowed(record, "LayerNorm")
