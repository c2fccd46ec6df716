"""The check framework: groups of hidden checks that talk to student code only through a Tester.

A check group is a function `check(t: Tester)` registered with `@group("m1", "masking")`. It sends
inputs through `t.call` / `t.module` (which run in the worker), computes the expected values itself,
and compares with `t.expect_*`. The first problem found fails the group with a message written for
the student. Nothing in this file is shown to students; only the messages are.
"""
from __future__ import annotations

import fnmatch
import zlib
from dataclasses import dataclass
from typing import Callable

import torch

from .client import WorkerLost

REGISTRY: dict[str, dict[str, Callable]] = {}

# Tolerances per dtype, from the spread between correct implementations (matmul vs einsum vs
# F.scaled_dot_product_attention): about 1e-15 in float64 and 1e-7 in float32.
TOLERANCES = {torch.float64: (1e-10, 1e-9), torch.float32: (2e-5, 1e-4)}   # (atol, rtol)


def group(milestone: str, name: str):
    def register(fn):
        REGISTRY.setdefault(milestone, {})[name] = fn
        return fn
    return register


class CheckFailed(Exception):
    """A check found a problem; the message is for the student."""


def shape_str(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def describe(value) -> str:
    """A short, student-facing description of a returned value."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {shape_str(value.shape)}"
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
    forbidden_for: Callable[[str], tuple[str, ...]]


class Tester:
    def __init__(self, session: Session, milestone: str, group_name: str, seed: int, module: str):
        self.session = session
        self.milestone = milestone
        self.group = group_name
        self.module_name = module
        # One generator per group: a group's inputs do not depend on which groups ran before it.
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(f"{milestone}/{group_name}".encode()))
        self.seed = seed

    # ---- inputs -------------------------------------------------------------------------
    def randn(self, *shape, dtype=torch.float64, scale=1.0):
        return torch.randn(*shape, generator=self.gen, dtype=dtype) * scale

    def randint(self, low, high, shape):
        return torch.randint(low, high, shape, generator=self.gen)

    def rand_bool(self, *shape, p=0.7):
        return torch.rand(*shape, generator=self.gen) < p

    # ---- talking to the worker -------------------------------------------------------
    def _request(self, message: dict, what: str, allow_error: bool = False) -> dict:
        worker = self.session.get_worker()
        try:
            reply = worker.request(message, self.session.probe_timeout)
        except WorkerLost as e:
            tail = worker.output_tail().strip()
            extra = f"\nLast output of your code:\n{tail[-600:]}" if tail and e.kind == "died" else ""
            raise CheckFailed(f"While running {what}, {e.reason}.{extra}") from None
        if not reply.get("ok") and not allow_error:
            raise CheckFailed(student_error(reply, what))
        return reply

    def call(self, func: str, *args, record=False, grad_args=None, backward=None, return_args=False,
             seed=0, **kwargs) -> dict:
        what = f"`{func}`"
        return self._request({"op": "call", "module": self.module_name, "func": func, "args": list(args),
                              "kwargs": kwargs, "record": record, "grad_args": grad_args or [],
                              "backward": backward, "return_args": return_args, "seed": seed}, what)

    def module(self, cls: str, args=(), kwargs=None, *, calls=(), params=None, train=False, attrs=(),
               record=False, backward=None, seed=0, dtype=None, allow_error=False) -> dict:
        """Build `cls(*args, **kwargs)` in the worker, load `params`, run `calls`; see worker.op_module."""
        what = f"`{cls}`"
        return self._request({"op": "module", "module": self.module_name, "cls": cls, "args": list(args),
                              "kwargs": kwargs or {}, "params": params, "train": train,
                              "calls": [dict(c) for c in calls], "attrs": list(attrs), "record": record,
                              "backward": backward, "seed": seed, "dtype": dtype}, what, allow_error)

    # ---- verdicts ----------------------------------------------------------------------
    def fail(self, message: str):
        raise CheckFailed(message)

    def expect_tensor(self, value, what: str, shape=None, dtype=None) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            self.fail(f"{what} should be a tensor, but it is {describe(value)}.")
        if shape is not None and tuple(value.shape) != tuple(shape):
            self.fail(f"{what} should have shape {shape_str(shape)}, but it has shape {shape_str(value.shape)}.")
        if dtype is not None and value.dtype != dtype:
            self.fail(f"{what} should have dtype {str(dtype).replace('torch.', '')}, "
                      f"but it has dtype {str(value.dtype).replace('torch.', '')}.")
        return value

    def expect_pair(self, value, what: str) -> tuple:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            self.fail(f"{what} should return a pair (output, weights), but it returned {describe(value)}.")
        return tuple(value)

    def expect_close(self, actual, expected: torch.Tensor, what: str, diagnose=(), atol=None):
        """Compare with dtype-based tolerances.

        `diagnose`: (explanation, tensor a known mistake gives); a None tensor is a general hint,
        given when no specific mistake matches.
        """
        actual = self.expect_tensor(actual, what, shape=expected.shape)
        default_atol, rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
        atol = default_atol if atol is None else atol
        a = actual.to(torch.float64)
        e = expected.to(torch.float64)
        if torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=False):
            return
        if torch.isnan(a).any() and not torch.isnan(e).any():
            where = torch.nonzero(torch.isnan(a))[0].tolist()
            message = f"{what} contains NaN (first at index {where}) where a number was expected."
        else:
            diff = (a - e).abs().nan_to_num(float("inf"))
            idx = tuple(torch.nonzero(diff == diff.max())[0].tolist())
            message = (f"{what}: wrong values. The largest difference is {diff.max().item():.3g} at index "
                       f"{list(idx)} (expected {e[idx].item():.6g}, got {a[idx].item():.6g}).")
        # Name a likely cause only when exactly one known mistake reproduces the answer; several
        # matching (e.g. any scaling gives one-hot weights at huge logits) means we cannot tell.
        matches = [text for text, variant in diagnose if variant is None or (
            variant.shape == a.shape and torch.allclose(a, variant.to(torch.float64), atol=max(atol, 1e-6),
                                                        rtol=max(rtol, 1e-5), equal_nan=True))]
        general = [text for text, variant in diagnose if variant is None]
        specific = [m for m in matches if m not in general]
        if len(specific) == 1:
            message += f" Likely cause: {specific[0]}"
        elif not specific and general:
            message += f" A common cause: {general[0]}"
        self.fail(message)

    def expect_allowed(self, record: dict | None, func: str):
        """Fail if the recorded torch functions / ATen ops include a forbidden one."""
        if not record:
            return
        patterns = self.session.forbidden_for(func)
        used = [n for n in record["functions"] + record["ops"] if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
        if used:
            names = ", ".join(sorted(set(used))[:4])
            self.fail(f"`{func}` uses {names}, which this milestone asks you to write yourself "
                      f"from basic tensor operations.")


def student_error(reply: dict, what: str) -> str:
    kind = reply.get("kind")
    tb = reply.get("traceback") or ""
    tb = f"\n{tb}" if tb else ""
    err = f"{reply.get('type')}: {reply.get('message')}"
    if kind == "not_implemented":
        return f"{what} is not implemented yet (it raises NotImplementedError)."
    if kind == "import":
        return f"Your file could not be imported, so {what} could not run: {err}{tb}"
    if kind == "missing":
        return f"{reply.get('message')}: keep the names and signatures from the stub."
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

    @property
    def passed(self) -> bool:
        return self.score == self.max_score
