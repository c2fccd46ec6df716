"""From a wrong answer to a sentence a student can act on.

Three steps, simplest explanation first:
1. The numbers, printed with as many digits as it takes to tell them apart (never "expected 0.897534,
   got 0.897534"), and the relative error.
2. Lower precision: an answer off by float32 rounding on float64 inputs was computed in float32.
3. The catalogue: each `Mistake` of a milestone computes what one known mistake returns on the same
   inputs. The first entry that reproduces the student's answer, and differs from the right answer
   on these inputs (otherwise it proves nothing), is named as the likely cause.
"""
from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import yaml

# float32 rounding seen between correct float32 and float64 computations of the course's functions
FLOAT32_REL = 1e-5
FLOAT32_ABS = 1e-5


MISTAKES: dict[str, dict[str, "Mistake"]] = {}     # milestone -> id -> every mistake it declares


class Row(NamedTuple):
    """One row of a deviations.yaml table; `only`: "pre" or "post" where it can happen in one layout only."""
    id: str
    text: str
    switches: dict
    only: str | None = None


@functools.cache
def _tables(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _row_problem(row: dict, said: dict, judge: Callable | None, layouts: bool) -> str:
    """What is wrong with a row of a deviations.yaml table ("" when nothing is)."""
    keys = {"id", "text", "switches"} | ({"only"} if layouts else set())
    if set(row) - keys:
        return f"unknown keys {sorted(set(row) - keys)}; a row of this table has {sorted(keys)}"
    if not isinstance(row.get("switches"), dict) or not row["switches"]:
        return "no switches"
    if not (row.get("text") or said.get(row["id"])):
        return "no text, and its id has no sentence yet"
    if row.get("only") not in (None, "pre", "post"):
        return "`only` is pre or post"
    if judge is not None:
        try:
            inspect.signature(judge).bind_partial(**row["switches"])
        except TypeError as e:
            return f"{judge.__name__} takes no such switch ({e})"
    return ""


@dataclass(frozen=True)
class Mistake:
    """A known mistake: its `id` (named in mutants' DIAGNOSIS lines), the sentence a student reads (`text`;
    empty when the failure's own message says it) and, where the judge can recompute it, `reproduce`: the
    mistake's own computation (a probe's inputs -> what a student who made it returns, or None where it
    cannot happen). Calling a Mistake runs that computation. `observed`: the check sees the mistake itself
    happen (e.g. it counts the decoding steps), which proves it as a reproduction does."""
    id: str
    text: str = ""
    reproduce: Callable | None = field(default=None, compare=False, repr=False)
    observed: bool = field(default=False, compare=False)
    home: str = field(default="", compare=False)   # the group it is charged in when groups of equal worth fail on it

    def __call__(self, *args, **kwargs):
        return self.reproduce(*args, **kwargs)

    def saying(self, text: str) -> "Mistake":
        """The same mistake, with a sentence that names what this input showed."""
        return Mistake(self.id, text, self.reproduce, self.observed, self.home)


@dataclass
class Catalogue:
    """A milestone's known mistakes: `mistake(id, text)` declares one, `plain(*ids)` several without text, and
    `@entry(kind, id, text)` one with its computation (the decorated function, which becomes the Mistake:
    calling it still computes), grouped by the kind of answer it reproduces. A milestone's mistakes.py holds its
    CATALOGUE and the mistakes a check recognises from its own evidence (a declaration without text: the check's
    message says it); the ones the judge recomputes are declared beside their computations, in answers.py."""
    milestone: str
    tables: Path | None = None       # the milestone's deviations.yaml (see `table`)
    entries: dict[str, list[Mistake]] = field(default_factory=dict)

    def mistake(self, mid: str, text: str = "", *, kind: str | None = None, reproduce: Callable | None = None,
                observed: bool = False, home: str = "") -> Mistake:
        m = Mistake(mid, text, reproduce, observed, home)
        known = MISTAKES.setdefault(self.milestone, {})
        # One id may be declared again with its own sentence (another computation of it, or another piece of
        # evidence for it), never without one: a failure naming it would not say what the catalogue says.
        if mid in known and known[mid] != m and not (text and known[mid].text):
            raise ValueError(f"{self.milestone}: the mistake {mid!r} is declared twice")
        known.setdefault(mid, m)
        if kind is not None:
            self.entries.setdefault(kind, []).append(m)
        return m

    def plain(self, *ids: str) -> tuple[Mistake, ...]:
        """Declare mistakes without text (the check's message says what went wrong), one per id, in order."""
        return tuple(self.mistake(mid) for mid in ids)

    def observed(self, *ids: str) -> tuple[Mistake, ...]:
        """Like `plain`, for mistakes a check sees happen (Mistake.observed)."""
        return tuple(self.mistake(mid, observed=True) for mid in ids)

    def entry(self, kind: str, mid: str, text: str, home: str = ""):
        return lambda fn: self.mistake(mid, text, kind=kind, reproduce=fn, home=home)

    def table(self, name: str, judge: Callable | None = None, layouts: bool = False) -> list[Row]:
        """The rows of table `name` in the milestone's deviations.yaml: mistakes that are the judge's own
        computation with some switches flipped, with the sentence a student reads. A row without `text`
        takes the sentence its id already has (declared above it, in the table or in the code). A row that
        cannot be what it says is refused: with `judge` given, a switch it does not take (a typo would make
        the row the right computation, which is never named); `only` (pre or post) unless the caller reads
        it (`layouts`)."""
        said = {mid: m.text for mid, m in MISTAKES.get(self.milestone, {}).items() if m.text}
        rows = []
        for row in _tables(self.tables)[name]:
            problem = _row_problem(row, said, judge, layouts)
            if problem:
                raise ValueError(f"{self.tables}: table {name}, row {row.get('id')!r}: {problem}")
            switches = {k: tuple(v) if isinstance(v, list) else v for k, v in row["switches"].items()}
            text = row.get("text") or said[row["id"]]
            said.setdefault(row["id"], text)
            rows.append(Row(row["id"], text, switches, row.get("only")))
        return rows

    def deviations(self, kind: str, judge: Callable, table: str | None = None) -> list[tuple[Mistake, dict]]:
        """Register each row of `table` (by default the table named like `kind`) as `judge(*args, **switches)`.
        Returns [(mistake, switches)]."""
        return [(self.mistake(r.id, r.text, kind=kind, reproduce=functools.partial(judge, **r.switches)), r.switches)
                for r in self.table(table or kind, judge)]

    def mistakes(self) -> dict[str, Mistake]:
        """Every mistake this milestone declares, by id."""
        return dict(MISTAKES.get(self.milestone, {}))

    def tried(self, kind: str, *args, part: int | None = None, **kwargs) -> list[tuple[Mistake, object]]:
        """(mistake, what it returns) for every entry of `kind`; `part` picks one item of a tuple answer."""
        out = []
        for mistake in self.entries.get(kind, []):
            try:
                value = mistake(*args, **kwargs)
            except Exception:      # the mistake cannot happen with these shapes
                value = None
            if value is not None and part is not None:
                value = value[part]
            if value is not None:
                out.append((mistake, value))
        return out


    def raising(self, kind: str, error_type: str, message: str, *args, prefer=frozenset(), **kwargs
                ) -> Mistake | None:
        """The entry of `kind` that raises the student's error (same type, same message) on the same
        arguments: a student whose code fails exactly like that most likely made that mistake. When several
        do, the one an earlier check of this submission already proved (`prefer`: ids), if exactly one."""
        found = {}
        for mistake in self.entries.get(kind, []):
            try:
                mistake(*args, **kwargs)
            except Exception as e:
                if same_error(e, error_type, message):
                    found[mistake.id] = mistake
        return alone(found.values()) or alone(m for m in found.values() if m.id in prefer)


def alone(mistakes) -> Mistake | None:
    """The mistake, when exactly one (by id) fits: two different mistakes that fit prove neither."""
    found = {m.id: m for m in mistakes}
    return next(iter(found.values())) if len(found) == 1 else None


def reproducing(candidates, same: Callable) -> Mistake | None:
    """The one mistake whose own computation gives the student's answer. `candidates`: (Mistake, what it
    returns) pairs; `same(value)`: is this the student's answer (and not the right one)? The comparison
    is the caller's: tensors to a tolerance, tokens and numbers exactly, text by its words."""
    return alone(m for m, value in candidates if same(value))


def same_error(exc: BaseException, error_type: str, message: str) -> bool:
    """Is `exc` the error the worker reported? The same type, and the same words and numbers in any
    order (a broadcast error names the two sizes in the order of the operands, which depends on how
    the student wrote the operation)."""
    text = str(exc)
    if len(text) > 500:
        text = text[:500] + "..."
    return type(exc).__name__ == error_type and sorted(re.findall(r"\w+", text)) == sorted(re.findall(r"\w+", message or ""))


def number_pair(expected: float, got: float) -> str:
    """'expected X, got Y' with enough significant digits that X and Y differ when the numbers do."""
    for digits in range(6, 18):
        e, g = f"{expected:.{digits}g}", f"{got:.{digits}g}"
        if e != g:
            break
    return f"expected {e}, got {g}"


def relative_error(a: torch.Tensor, e: torch.Tensor) -> float:
    scale = e.abs().max().item()
    return (a - e).abs().max().item() / (scale if scale > 0 else 1.0)


def lower_precision(actual: torch.Tensor, expected: torch.Tensor, inputs_dtype=None) -> str | None:
    """A sentence when float64 inputs gave an answer computed in lower precision, else None. Named only
    when the answer itself shows it: a float32 dtype, or every value exactly a float32 number (what a
    computation that ended in float32 returns). A float64 answer that is merely inaccurate (a formula
    that cancels, part of it in float32) is described by `precision_lost`, without a guess."""
    if (inputs_dtype or expected.dtype) != torch.float64:
        return None
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()):
        return None
    if not torch.allclose(a, LOWER_PRECISION(e), rtol=FLOAT32_REL, atol=FLOAT32_ABS):
        return None          # not the right answer rounded to float32: some other mistake
    if actual.dtype != torch.float64:
        return (f"the result has dtype {str(actual.dtype).replace('torch.', '')} for float64 inputs: keep the "
                f"input's dtype (do not call .float() or create float32 tensors inside).")
    single = a.to(torch.float32).to(torch.float64)
    if (torch.equal(single, a)
            and not torch.equal(e.to(torch.float32).to(torch.float64), e)):
        return ("every value of the result is a float32 number, so it was computed in float32 and converted "
                "back: keep the input's dtype throughout (a torch.tensor(...) or .float() inside defaults to "
                "float32).")
    return None


def precision_lost(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """'They agree to about N significant digits...' when a float64 answer is close but not float64-accurate;
    what the dtype is, when it is not the input's."""
    if actual.dtype != expected.dtype and actual.is_floating_point():
        return (f"Your result also has dtype {str(actual.dtype).replace('torch.', '')} where the inputs are "
                f"{str(expected.dtype).replace('torch.', '')}: keep the input's dtype.")
    if expected.dtype != torch.float64:
        return None
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()) or not torch.allclose(a, e, rtol=1e-4, atol=1e-4):
        return None
    digits = max(1, int(-torch.log10(torch.tensor(relative_error(a, e) + 1e-300)).item()))
    return (f"Your values agree with the right ones to only about {digits} significant digits, where a float64 "
            f"computation of the formula gives about 15.")


def matches(actual: torch.Tensor, variant, expected: torch.Tensor, atol: float, rtol: float, loose=True) -> bool:
    """Does `variant` (what a mistake gives) reproduce `actual`, and differ from the right answer?
    `loose`: to float32 accuracy at least (a student computing in float32 can still be recognised)."""
    if not isinstance(variant, torch.Tensor) or tuple(variant.shape) != tuple(actual.shape):
        return False
    v = variant.detach().to(torch.float64)
    a = actual.to(torch.float64)
    e = expected.to(torch.float64)
    if tuple(e.shape) == tuple(v.shape) and torch.allclose(v, e, atol=atol, rtol=rtol, equal_nan=True):
        return False          # the mistake gives the right answer here: it explains nothing
    if not loose:
        return torch.allclose(a, v, atol=atol, rtol=rtol, equal_nan=True)
    if tuple(e.shape) == tuple(v.shape) and torch.allclose(v, e, atol=max(atol, 1e-6), rtol=max(rtol, 1e-5),
                                                           equal_nan=True):
        # The mistake's own effect is below the loose tolerance (e.g. float32 rounding): at that tolerance any small
        # deviation would "match" it. It reproduces the answer only if the answer is no further off than it is.
        effect = (v - e).abs().nan_to_num(nan=float("inf")).max()
        return bool((a - e).abs().nan_to_num(nan=float("inf")).max() <= 4 * effect + atol)
    return torch.allclose(a, v, atol=max(atol, 1e-6), rtol=max(rtol, 1e-5), equal_nan=True)


# Mistakes every milestone can show, declared once.
# Its computation: the right answer rounded to float32; its text says what the answer showed (see lower_precision).
LOWER_PRECISION = Mistake("lower_precision", reproduce=lambda right: right.to(torch.float32).to(right.dtype))
DTYPE_LOWERED = Mistake("lower_precision")        # the same mistake seen in a dtype alone (values not compared)
DTYPE_CHANGED = Mistake("dtype_changed")
FORBIDDEN_API = Mistake("forbidden_api")
PARAMETER_NAMES = Mistake("parameter_names")
SHARED_SUBMODULE = Mistake("shared_submodule")
PYTHON_LOOP = Mistake("python_loop")
NUMPY_WORK = Mistake("numpy_work", "part of the computation ran in numpy, where no loop can be seen.")

# Errors whose message alone says what went wrong, whatever the milestone: (pattern, Mistake).
def _seen(mid: str, text: str) -> Mistake:
    """A mistake an error message names by itself: seen happen (Mistake.observed), so the same crash met by
    several groups in one student callable is one mistake, charged once."""
    return Mistake(mid, text, observed=True)


ERROR_PATTERNS = [
    (r"leaf Variable that requires grad is being used in an in-place operation",
     _seen("input_modified", "an input is changed in place (for example q /= math.sqrt(d_k) or "
             "x.masked_fill_(...)): inputs must be left as they are; use out-of-place operations "
             "(q = q / ..., masked_fill).")),
    (r"modified by an inplace operation",
     _seen("inplace_breaks_autograd", "a tensor that autograd still needs is changed in place (for example "
             "x -= x.max() or w.masked_fill_(...)): use out-of-place operations (x = x - m, masked_fill).")),
    (r"view size is not compatible with input tensor's size and stride",
     _seen("view_after_transpose", ".view() after .transpose() needs a contiguous tensor: use .reshape(...) or "
             ".contiguous().view(...).")),
    (r"(expected (scalar type|m1 and m2 to have the same dtype)|found dtype \w+ but expected)",
     _seen("dtype_mismatch", "two tensors of different dtypes meet (float32 and float64): a tensor created "
             "or converted inside your code has another dtype than the inputs; create new tensors with the "
             "input's dtype (dtype=x.dtype) and do not convert with .float() / .double().")),
    (r"The shape of the mask \[.*\] at index \d+ does not match the shape of the indexed tensor",
     _seen("bool_index_mask", "indexing with a boolean mask (scores[~mask] = ...) does not broadcast the mask: "
             "use scores.masked_fill(~mask, float('-inf')), which does.")),
    (r"shape '\[.*\]' is invalid for input of size \d+",
     _seen("reshape_wrong_size", "a reshape/view asks for a shape with another number of elements than the "
             "tensor has: take each tensor's sizes from that tensor (for example the key's length for keys and "
             "values, which can differ from the query's length).")),
    (r"(must be tuple of ints, but found element of type float|got float|expected int.*float)",
     _seen("float_size", "a size is a float (for example d_model / num_heads): use integer division, "
             "d_model // num_heads.")),
    (r"cannot assign module before Module.__init__\(\) call",
     _seen("super_init_late", "super().__init__() must run first in __init__, before any submodule or "
             "parameter is created.")),
    (r"Expected all tensors to be on the same device",
     _seen("device_mismatch", "tensors on different devices meet: create new tensors on the input's device "
             "(device=x.device).")),
]


def error_cause(message: str) -> Mistake | None:
    """The Mistake an error message names by itself, if any."""
    for pattern, mistake in ERROR_PATTERNS:
        if re.search(pattern, message or ""):
            return mistake
    return None
