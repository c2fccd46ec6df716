"""The check framework: groups of hidden checks that talk to student code only through a Tester.

A check group is a function `check(t: Tester)` registered with `@group("m1", "masking", ...)`. It sends
inputs through `t.call` / `t.module` / `t.run` (which run in the sandboxed worker), computes the
expected values itself, and compares with `t.expect_*`. The first problem found fails the group with
a message written for the student. Nothing in this file is shown to students; only the messages are.

Rules every milestone gets from here, by construction:
- A group passes only when the code computes the right values on the inputs it tried.
- A `style` group (a rule on how code is written: loops, forbidden APIs, dtype, in-place) runs after
  every group of values and calls `t.works` on its inputs' values before judging (a style group that
  never does is a grader bug). Wrong values that a failed group of values already charged do not stop
  it: the rule is judged on what the code computes, and a crash leaves its points alone. It is "not
  judged" (0 points) when no group of values passed (a file that computes nothing scores 0), when the
  callable it meets gives right values in no group of values, or when no group of values failed (the
  failure is then charged here, once). See `Tester._judgeable`.
- A group that `depends` on groups which failed is run with correct stand-ins for the student
  callables those groups `provide` (see grade.py), so one mistake costs points where it is.
- Failures carry a `cause` (a catalogue id, see diagnosis.py) so a later group failing for the same
  reason says so in one line.
"""
from __future__ import annotations

import fnmatch
import functools
import inspect
import re
import textwrap
import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from autograder.sandbox import protocol

from autograder.grading import diagnosis
from autograder.sandbox.client import WorkerLost
from autograder.grading.diagnosis import Mistake

# Tolerances per dtype, from the spread between correct implementations (matmul vs einsum vs
# PyTorch's own modules): about 1e-15 in float64 and 1e-7 in float32.
TOLERANCES = {torch.float64: (1e-10, 1e-9), torch.float32: (2e-5, 1e-4)}   # (atol, rtol)


@dataclass(frozen=True)
class Group:
    milestone: str
    name: str
    fn: Callable
    depends: tuple[str, ...] = ()      # earlier groups whose failure this group's code may inherit
    style: bool = False                # judges how code is written; points only when values are right
    provides: tuple[str, ...] = ()     # student callables this group judges (stand-ins replace them)
    observes: bool = False             # decided by the worker's observers (ops, functions, model events)


REGISTRY: dict[str, dict[str, Group]] = {}
STAND_INS: dict[str, dict[str, dict]] = {}     # milestone -> callable name -> {"source", "defines"}


def group(milestone: str, name: str, *, depends=(), style=False, provides=(), observes=False):
    def register(fn):
        REGISTRY.setdefault(milestone, {})[name] = Group(milestone, name, fn, tuple(depends), style, tuple(provides),
                                                         observes)
        return fn
    return register


def stand_ins(milestone: str, **objects) -> None:
    """Correct judge-written versions of student callables (`name=function or class`), sent to the
    worker as source when a group that provides `name` failed. They are the judge's own code, never
    the reference solution's text. A class goes with its bases from the same module (their source first)."""
    def source(obj) -> str:
        own = [c for c in getattr(obj, "__mro__", (obj,))[::-1] if c.__module__ == obj.__module__]
        return "\n\n".join(source_of(c) for c in own)
    STAND_INS[milestone] = {name: {"source": source(obj), "defines": obj.__name__} for name, obj in objects.items()}


class CheckFailed(Exception):
    """A check found a problem; the message is for the student. `mistake`: the known mistake it shows, when
    named (`cause` is its id, `cause_text` the sentence a later group failing the same way repeats)."""

    def __init__(self, message: str, mistake: Mistake | None = None):
        super().__init__(message)
        if mistake is not None and not isinstance(mistake, Mistake):
            raise TypeError(f"a failure names a Mistake (declared in the milestone's catalogue), not {mistake!r}")
        self.mistake = mistake
        self.cause = mistake.id if mistake else None
        self.cause_text = (mistake.text or message) if mistake else None
        self.failed_on = ""    # the student callable it is about, when raised by Tester.fail (see Tester.last_call)


class NotJudged(CheckFailed):
    """A style group could not judge: the code crashed or computed wrong values on its inputs."""


class ChargedAbove(CheckFailed):
    """A style group could not judge its rule because of a failure a group of values already charged:
    it keeps its points (the mistake costs points once, where it is)."""

    def __init__(self, message: str, charged_in: str):
        super().__init__(message)
        self.charged_in = charged_in


@dataclass(frozen=True)
class Values:
    """What the groups of values (every group that is not `style`) found, for a style group's verdict:
    which passed, each failed one's first line (to recognise the same crash again), and which student
    callables computed right values somewhere (a rule is judged only for code that does)."""
    passed: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()      # (group, first line of its message)
    working: frozenset = frozenset()   # student callables with right values (or a known mistake's) somewhere
    proven: frozenset = frozenset()    # ids of the mistakes an earlier group reproduced by their own computation

    def charged_in(self, text: str) -> str | None:
        """The failed group of values whose message starts with the same line as `text`."""
        first = text.strip().split("\n")[0].rstrip(".")
        return next((g for g, line in self.failed if line.rstrip(".") == first), None)


def _named(what: str) -> list[str]:
    """The student callables a `what` names: the first word of each `...` (e.g. "`MultiHeadAttention`",
    "`greedy_decode(model, ...)`")."""
    return re.findall(r"`(\w+)", what or "")


def shape_str(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def dtype_str(dtype) -> str:
    return str(dtype).replace("torch.", "")


def arguments_text(args, kwargs) -> str:
    """The arguments of a call, as a student reads them: tensors by shape (and dtype when not float64)."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return shape_str(v.shape) + ("" if v.dtype == torch.float64 else f" ({dtype_str(v.dtype)})")
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    parts = [one(v) for v in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return ", ".join(parts) if parts else "no arguments"


def describe(value) -> str:
    """A short, student-facing description of a returned value."""
    if isinstance(value, torch.Tensor):
        return f"a {dtype_str(value.dtype)} tensor of shape {shape_str(value.shape)}"
    if isinstance(value, dict) and "__object__" in value:
        return f"a {value['__object__']} ({value['repr'][:80]})"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    return f"{type(value).__name__} {value!r}"[:120]


@dataclass
class Session:
    """What a Tester needs from the grading run: a way to get a live worker, and the limits."""
    get_worker: Callable[[], object]
    probe_timeout: float
    forbidden_for: Callable[[str], tuple]       # function name -> the config.Forbidden rules that apply


class Tester:
    def __init__(self, session: Session, spec: Group, seed: int, module: str, patches: dict | None = None,
                 failed_above: tuple[str, ...] = (), values: Values = Values(("?",), ())):
        self.session = session
        self.values = values               # style groups: what the groups of values found
        self.failed_above = failed_above   # groups this one depends on that failed (their mistake may show here)
        self.spec = spec
        self.milestone = spec.milestone
        self.group = spec.name
        self.module_name = module
        self.patches = patches or {}
        self.verified = 0
        self.invoked: set[str] = set()  # the student callables this group ran (named in `what` of requests)
        self.last_call = ""             # the one its latest request ran (a failure is usually about it)
        self.blamed: list[str] = []    # student callables this group proved wrong (see blame)
        self.numpy_seen = False        # a measured call made tensors from numpy data (work no op count sees)
        # One generator per group: a group's inputs do not depend on which groups ran before it.
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(f"{spec.milestone}/{spec.name}".encode()))
        self.seed = seed

    # ---- inputs -------------------------------------------------------------------------
    def randn(self, *shape, dtype=torch.float64, scale=1.0):
        return torch.randn(*shape, generator=self.gen, dtype=dtype) * scale

    def randint(self, low, high, shape):
        return torch.randint(low, high, shape, generator=self.gen)

    def grown(self, base: int, low: int, high: int) -> int:
        """A size drawn from [low, high) with this group's generator, for loop detection: it differs from
        `base` and is larger than any small constant a loop could be padded to."""
        size = int(torch.randint(low, high, (), generator=self.gen))
        return size if size != base else size + 1

    def rand_bool(self, *shape, p=0.7):
        return torch.rand(*shape, generator=self.gen) < p

    # ---- talking to the worker -------------------------------------------------------
    def _request(self, request: protocol.Request, what: str, allow_error: bool = False, crash=None,
                 called_with: str = "") -> dict:
        self.invoked.update(_named(what))
        self.last_call = next(iter(_named(what)), "")
        # The name a request itself targets stays the student's: their own class or function is what it runs,
        # and under the stand-in's name a valid `super(LayerNorm, self).__init__()` in it would fail.
        own = getattr(request, "cls", None) or getattr(request, "func", None)
        request.patches = [{"module": self.module_name, "name": n, **p} for n, p in self.patches.items() if n != own]
        worker = self.session.get_worker()
        try:
            reply = worker.request(request, self.session.probe_timeout)
        except WorkerLost as e:
            tail = worker.output_tail().strip()
            extra = f"\nLast output of your code:\n{tail[-600:]}" if tail and e.kind == "died" else ""
            self._not_judged_if_style(f"while running {what}, {e.reason}", what)
            raise CheckFailed(f"While running {what}, {e.reason}.{extra}") from None
        if (reply.get("record") or {}).get("numpy"):
            self.numpy_seen = True
        if not reply.get("ok") and not allow_error:
            text = student_error(reply, what)
            if called_with and text.startswith(f"{what} raised "):     # the student's call, as it was made
                text = f"{what}, called with {called_with}, raised " + text[len(f"{what} raised "):]
            self._not_judged_if_style(text.rstrip("."), what)
            if reply.get("kind") == "params":
                raise CheckFailed(text, diagnosis.PARAMETER_NAMES)
            if reply.get("kind") == "shared":
                raise CheckFailed(text, diagnosis.SHARED_SUBMODULE)
            mistake = crash(reply) if crash is not None and reply.get("kind") == "exception" else None
            if mistake is None and reply.get("kind") == "exception":
                mistake = diagnosis.error_cause(reply.get("message"))
            if mistake is not None:
                raise CheckFailed(f"{text}\nLikely cause: {mistake.text}", mistake)
            raise CheckFailed(text)
        return reply

    def _not_judged_if_style(self, why: str, what: str):
        """A style group whose code crashed cannot judge its rule: see `_judgeable`; when it may go on, its
        points are kept (the code already loses points in a group of values)."""
        if self.spec.style:
            owner = self._judgeable(what, f"What happened here: {why}", why)
            # A crash report ends with the student's code line: the sentence goes on its own line, not glued to it.
            end = "\n" if "\n" in why else ". "
            raise ChargedAbove(f"Not judged: {why}{end}Your code already loses points in `{owner}`, so this check "
                               f"keeps its points; it judges its rule once your code runs here.", owner)

    def _judgeable(self, what: str, happened: str, failure: str = "") -> str:
        """For a style group meeting a crash or wrong values of `what`: the failed group of values that already
        charges the code (the one that met the same `failure`, if any), when the rule may be judged regardless;
        else NotJudged (0 points here)."""
        if not self.values.passed:
            raise NotJudged(f"Not judged: no check of values passed, so there is nothing to judge this rule on "
                            f"(a file that computes nothing scores 0). {happened}")
        broken = [n for n in _named(what) if n not in self.values.working]
        if broken:
            raise NotJudged(f"Not judged: `{broken[0]}` gives the right values in no check of values (nor values a "
                            f"known mistake explains), so there is nothing of it to judge this rule on. {happened}")
        if not self.values.failed:
            raise NotJudged(f"Not judged: this check judges code that runs and gives the right values, and no "
                            f"check of values found this failure, so it costs points here. {happened}")
        return self.values.charged_in(failure) or self.values.failed[0][0]

    def call(self, func: str, *args, record=False, grad_args=None, backward=None, return_args=False,
             seed=0, catalogue=None, allow_error=False, **kwargs) -> dict:
        """Call the student's `func`. `catalogue`: (Catalogue, kind) whose entries, run here on the same
        arguments, may reproduce an error the student's code raised: that entry is the likely cause.
        `allow_error`: return an error reply (its "type" and "message") instead of failing."""
        what = f"`{func}`"
        crash = None
        if catalogue is not None:
            def crash(reply):
                return catalogue[0].raising(catalogue[1], reply.get("type"), reply.get("message"), *args,
                                            prefer=self.values.proven, **kwargs)
        return self._request(protocol.Call(module=self.module_name, func=func, args=list(args), kwargs=kwargs,
                                           record=record, grad_args=grad_args or [], backward=backward,
                                           return_args=return_args, seed=seed), what, allow_error, crash,
                             called_with=arguments_text(args, kwargs))

    def module(self, cls: str, args=(), kwargs=None, *, calls=(), attrs=(), allow_error=False, crash=None,
               **options) -> dict:
        """Build `cls(*args, **kwargs)` in the worker and run `calls` on it: the other fields of
        protocol.Module (params, train, dtype, backward, ...) are keyword `options`. `crash(reply)`: a Mistake
        explaining an error the student's code raised, or None; `allow_error`: return an error reply."""
        request = protocol.Module(module=self.module_name, cls=cls, args=list(args), kwargs=kwargs or {},
                                  calls=[dict(c) for c in calls], attrs=list(attrs), **options)
        return self._request(request, f"`{cls}`", allow_error, crash)

    def run(self, recipe: Callable, *args, what: str, record=False, seed=0, helpers=(), crash=None, **kwargs) -> dict:
        """Run the judge's `recipe` function inside the worker (for objects that must live beside the
        student's code, e.g. a model and an optimizer). It must import what it needs itself and return
        tensors and plain values only. `helpers`: judge classes/functions (or source strings) defined
        before it, in the same namespace. `crash(reply)`: a Mistake explaining an error, or None."""
        source = "\n\n".join(h if isinstance(h, str) else source_of(h) for h in (*helpers, recipe))
        reply = self._request(protocol.Run(source=source, entry=recipe.__name__, args=list(args), kwargs=kwargs,
                                           record=record, seed=seed), what, crash=crash)
        reply["value"] = _unwrap(reply.get("value"))      # the recipe's own dicts, as plain dicts again
        return reply

    # ---- verdicts ----------------------------------------------------------------------
    def blame(self, name: str):
        """Record that the student's `name` was proved wrong here: groups depending on this one get a
        stand-in for it (as for `provides`, but only when proved; for optional helpers, whose
        signature is known only once a call with the stub's arguments has worked)."""
        self.blamed.append(name)

    def fail(self, message: str, mistake: Mistake | None = None):
        """Fail the group. A named `mistake` lets later groups failing the same way say so in one line
        (with its text, or else this message)."""
        failure = CheckFailed(message, mistake)
        failure.failed_on = self.last_call    # a failure kept and raised after a probe stays about its own call
        raise failure

    def expect_tensor(self, value, what: str, shape=None, dtype=None) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            self.fail(f"{what} should be a tensor, but it is {describe(value)}.")
        if shape is not None and tuple(value.shape) != tuple(shape):
            self.fail(f"{what} should have shape {shape_str(shape)}, but it has shape {shape_str(value.shape)}.")
        if dtype is not None and value.dtype != dtype:
            self.fail(f"{what} should have dtype {dtype_str(dtype)}, but it has dtype {dtype_str(value.dtype)}: keep "
                      f"the input's dtype.", diagnosis.DTYPE_LOWERED if dtype == torch.float64 else diagnosis.DTYPE_CHANGED)
        return value

    def expect_pair(self, value, what: str, names="(output, weights)") -> tuple:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            self.fail(f"{what} should return a pair {names}, but it returned {describe(value)}.")
        return tuple(value)

    def close(self, actual, expected: torch.Tensor, atol=None) -> bool:
        default_atol, rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
        atol = default_atol if atol is None else atol
        return (isinstance(actual, torch.Tensor) and tuple(actual.shape) == tuple(expected.shape)
                and torch.allclose(actual.to(torch.float64), expected.to(torch.float64), atol=atol, rtol=rtol))

    def expect_close(self, actual, expected: torch.Tensor, what: str, mistakes=(), atol=None, probes=(),
                     inputs_dtype=None):
        """Compare with dtype-based tolerances; on a difference, explain it as well as the evidence allows.

        `mistakes`: (Mistake, what that mistake returns) pairs, from a milestone's catalogue, or a
        function giving them (called only on a difference: the catalogue costs time).
        `probes`: callables run only on failure, each returning a Mistake (a structural finding, e.g. a
        parameter that gets no gradient) or None.
        """
        actual = self.expect_tensor(actual, what, shape=expected.shape)
        default_atol, rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
        atol = default_atol if atol is None else atol      # a number, or a tensor broadcasting to `expected`
        a = actual.to(torch.float64)
        e = expected.to(torch.float64)
        if bool(((a - e).abs() <= atol + rtol * e.abs()).all()):
            return
        atol = float(torch.as_tensor(atol).max())
        if torch.isnan(a).any() and not torch.isnan(e).any():
            where = torch.nonzero(torch.isnan(a))[0].tolist()
            message = f"{what} contains NaN (first at index {where}) where a number was expected."
        else:
            diff = (a - e).abs().nan_to_num(float("inf"))
            idx = tuple(torch.nonzero(diff == diff.max())[0].tolist())
            where = f" The largest difference is at index {list(idx)}:" if idx else ""     # none for a scalar
            message = (f"{what}: wrong values.{where} {diagnosis.number_pair(e[idx].item(), a[idx].item())} "
                       f"(relative error {diagnosis.relative_error(a, e):.2g}, against the largest expected value).")
        cause = self.explain(actual, expected, mistakes, probes, atol, rtol, inputs_dtype)
        if cause is not None:
            raise CheckFailed(f"{message} Likely cause: {cause.text}", cause)
        lost = diagnosis.precision_lost(actual, expected)
        raise CheckFailed(f"{message} {lost}" if lost else message)

    def explain(self, actual, expected, mistakes=(), probes=(), atol=None, rtol=None, inputs_dtype=None):
        """The Mistake that explains `actual`, simplest explanation first; None when nothing does."""
        default_atol, default_rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
        atol = default_atol if atol is None else atol
        rtol = default_rtol if rtol is None else rtol
        candidates = list(mistakes() if callable(mistakes) else mistakes)
        # A mistake that reproduces the answer to full precision beats every other explanation; then
        # lower precision (the simplest one); then mistakes that match only to float32 accuracy. At each
        # step, two different mistakes that both fit prove neither: then nothing is named.
        if any(diagnosis.matches(actual, v, expected, atol, rtol, loose=False) for _, v in candidates):
            return diagnosis.reproducing(candidates, lambda v: diagnosis.matches(actual, v, expected, atol, rtol,
                                                                                 loose=False))
        precision = diagnosis.lower_precision(actual, expected, inputs_dtype)
        if precision:
            return diagnosis.LOWER_PRECISION.saying(precision)
        if any(diagnosis.matches(actual, v, expected, atol, rtol) for _, v in candidates):
            return diagnosis.reproducing(candidates, lambda v: diagnosis.matches(actual, v, expected, atol, rtol))
        for probe in probes:
            found = probe()
            if found is not None:
                return found
        return None

    def expect_grads(self, grads: dict, want: dict, cut: str, mistake: Mistake | None = None):
        """Each parameter's gradient (`grads`, by name) against the judge's (`want`); a missing one fails with
        "No gradient reached `name`: " and `cut`, the likely reason in the milestone's words."""
        for name, w in want.items():
            got = grads.get(name)
            if got is None:
                self.fail(f"No gradient reached `{name}`: {cut}", mistake)
            self.expect_close(got, w, f"The gradient of `{name}`")

    def works(self, actual, expected: torch.Tensor, what: str, atol=None):
        """For style groups, before judging their rule on these values: wrong values are judged as they are
        when the code already loses points in a group of values (see `_judgeable`)."""
        self.verified += 1
        if not self.close(actual, expected, atol):
            self._judgeable(what, f"Here {what} does not give the right values.")

    def expect_allowed(self, record: dict | None, func: str):
        """Fail if the recorded torch functions / ATen ops / PyTorch modules include a forbidden one."""
        if not record:
            return
        for rule in self.session.forbidden_for(func):
            used = sorted({n for n in record["functions"] + record["ops"]
                           if any(fnmatch.fnmatchcase(n, p) for p in rule.names)})
            if used:
                # Name what the student wrote (Python names) rather than ATen's internals, when we can.
                shown = [n for n in used if not n.startswith("aten::")] or used
                self.fail(f"`{func}` uses {', '.join(shown[:3])}: do not use {rule.plain}.",
                          diagnosis.FORBIDDEN_API.saying(f"it uses {rule.plain}, which this milestone does not allow."))

    def expect_constant_ops(self, counts: dict, base_label: str, func: str, advice: str, limit: int | None = None):
        """Vectorization: `counts` maps 'what grew' -> op count; the first entry is the base size. `limit`:
        the most operations a vectorized version needs at the base size (with room to spare): more points to
        a loop that runs a fixed number of times whatever the sizes."""
        (_, base), *grown = counts.items()
        if self.numpy_seen:
            self.fail(f"`{func}` worked on tensor data outside torch (.numpy(), .tolist(), numpy arrays, "
                      f"torch.from_numpy): the grader counts tensor operations to find loops, and work done there "
                      f"cannot be counted. Compute with torch operations only.", diagnosis.NUMPY_WORK)
        # A count that grows says which dimension the loop runs over: that first, then the fixed-count limit.
        for label, n in grown:
            if n != base:
                self.fail(f"`{func}` ran {base} tensor operations at the {base_label} but {n} when {label}: "
                          f"that points to a Python loop over that dimension. {advice}", diagnosis.PYTHON_LOOP)
        if limit is not None and base > limit:
            self.fail(f"`{func}` ran {base} tensor operations at the {base_label}, where a version without Python "
                      f"loops needs at most about {limit}: that points to a loop that runs a fixed number of times "
                      f"(for example over a padded batch). {advice}", diagnosis.PYTHON_LOOP)


@functools.lru_cache(maxsize=None)
def source_of(obj) -> str:
    """The source of a judge function or class, read once per process (parsing a class's file again for
    every request is slow)."""
    return textwrap.dedent(inspect.getsource(obj))


def _unwrap(x):
    if isinstance(x, dict) and set(x) == {"__dict__"}:
        return {k: _unwrap(v) for k, v in x["__dict__"].items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    return x


def student_error(reply: dict, what: str) -> str:
    kind = reply.get("kind")
    tb = reply.get("traceback") or ""
    tb = f"\n{tb}" if tb else ""
    err = f"{reply.get('type')}: {reply.get('message')}"
    inside = reply.get("inside")
    if inside:
        err += (f"\nIt was raised inside the course's {inside['where']}, which your code (the line below) "
                f"called with {inside['args']}.")
    if kind == "not_implemented":
        named = re.fullmatch(r"([\w.]+) is not implemented yet", str(reply.get("message", "")))
        # the stub's own message names the function, which may be one `what` calls (a recipe's)
        return f"`{named.group(1) if named else what.strip('`')}` is not implemented yet (it raises NotImplementedError)."
    if kind == "import":
        return f"Your file could not be imported, so {what} could not run: {err}{tb}"
    if kind == "missing":
        return f"{reply.get('message')}: keep the names and signatures from the stub."
    if kind == "params":
        return (f"{reply.get('message')}: keep the parameter names of the stub (the checks load weights into "
                f"them by name).")
    if kind == "shared":
        return f"{reply.get('message')}: create a separate module for each sub-layer."
    if kind == "tamper":
        return (f"While running {what}, the process running your code was stopped: {reply.get('message')}. Code "
                f"may not reach for the grader's own objects (stack frames, the garbage collector, torch's mode "
                f"internals, ctypes, process memory).")
    if kind == "exit":
        return f"While running {what}, {reply.get('message')}; your code should return, not exit.{tb}"
    if kind == "constructor":
        return f"Creating {what} raised {err}{tb}"
    return f"{what} raised {err}{tb}"


@dataclass
class CheckResult:
    name: str
    max_score: int
    score: int
    message: str = ""
    seconds: float = 0.0
    internal_error: str = ""     # for the instructor only; never shown to students
    cause: str | None = None     # catalogue id of the named cause, when one was named
    cause_text: str | None = None
    judged: bool = True          # False: a style group that could not judge (code broken)
    charged_in: str = ""         # the group above that already charged the failure this one met
    invoked: tuple[str, ...] = field(default=())  # student callables the group ran
    failed_on: str = ""          # the student callable of the request before the failure
    reproduced: bool = False     # the named cause is a mistake whose own computation the judge ran (or it was seen)
    cause_home: str = ""         # the group that cause is charged in on a tie (Mistake.home)
    note: str = ""               # e.g. graded with a stand-in for a function that failed above
    stand_ins: tuple[str, ...] = field(default=())
    blamed: tuple[str, ...] = field(default=())   # student callables this group proved wrong

    @property
    def passed(self) -> bool:
        return self.score == self.max_score
