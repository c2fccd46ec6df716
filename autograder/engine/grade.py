"""Grade one submission for one milestone: run every check group of course.yaml, in order.

The judge (this process) never imports student code. A sandboxed worker does (sandbox.Slot); when it
hangs or dies, the check that was running fails with a message and the next check gets a fresh worker.

How points follow mistakes (the same for every milestone):
- Every group is all or nothing, and passes only when the code gives the right values on its inputs.
- A group that depends on an earlier group which failed is graded with correct stand-ins for the
  student callables that group judges: a wrong `softmax` is charged in `softmax`, and attention is
  graded on its own merits. The report says which stand-ins were used.
- Style groups (loops, forbidden APIs, dtype, in-place, errors) are judged only for code that works.
- A failure whose named cause an earlier group already reported loses its points (the code is wrong
  there too) but says so in one line instead of repeating the numbers.
"""
from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .. import config
from . import checks
from .checks import CheckFailed, CheckResult, Group, NotJudged, Session, Tester
from .client import Worker, WorkerLost
from .submission import GradedFile, prepared


@dataclass
class Result:
    milestone: str
    seed: int
    checks: list[CheckResult]
    files: list[GradedFile]
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)   # e.g. that the code was not isolated

    @property
    def score(self) -> int:
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> int:
        return sum(c.max_score for c in self.checks)

    @property
    def internal_errors(self) -> list[str]:
        return [f"{c.name}: {c.internal_error}" for c in self.checks if c.internal_error]


class _WorkerPool:
    """At most one live worker; a lost one is replaced on the next request.

    Each new worker first imports the course's reference modules (wrapped, so errors inside them are
    reported at the student's call) and then the student's. If that kills or hangs the worker, every
    later check would fail the same way, so the reason is kept and no new worker is started.
    """

    def __init__(self, folder: Path, slot, modules: tuple[str, ...], references: tuple[str, ...], timeout: float):
        self.folder, self.slot, self.modules, self.references, self.timeout = folder, slot, modules, references, timeout
        self.factory = slot.worker_factory()
        self.worker: Worker | None = None
        self.import_lost: WorkerLost | None = None

    def get(self) -> Worker:
        if self.import_lost is not None:
            raise self.import_lost
        if self.worker is None or not self.worker.alive():
            self.close()
            self.worker = self.factory([self.folder])
            try:
                self.worker.request({"op": "import", "modules": list(self.modules),
                                     "references": list(self.references)}, self.timeout)
            except WorkerLost as e:
                self.import_lost = WorkerLost(f"importing your file, {e.reason}", e.kind)
                raise self.import_lost from None
        return self.worker

    def close(self):
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def check_groups(milestone_id: str) -> dict[str, Group]:
    try:
        importlib.import_module(f"autograder.engine.checks_{milestone_id}")
    except ModuleNotFoundError:
        return {}
    return checks.REGISTRY.get(milestone_id, {})


def grade(path: Path | str, milestone_id: str, seed: int | None = None, course: config.Course | None = None,
          slot=None, sandbox: str = "auto") -> Result:
    """Grade the submission folder `path`. `slot`: a sandbox.Slot to run the code in (one is opened
    and closed here when None; `sandbox` then says which kind, "auto" being bubblewrap when it works)."""
    course = course or config.load()
    m = course.milestone(milestone_id)
    seed = course.seed if seed is None else seed
    with prepared(course, m, Path(path)) as (folder, graded):
        if slot is None:
            from .sandbox import open_slot
            with open_slot(sandbox, course.startup_timeout) as own:
                return _grade_prepared(course, m, seed, folder, graded, own)
        return _grade_prepared(course, m, seed, folder, graded, slot)


def _grade_prepared(course, m, seed, folder, graded, slot) -> Result:
    groups = check_groups(m.id)
    start = time.monotonic()
    results: dict[str, CheckResult] = {}
    references = tuple(Path(f.name).stem for f in graded if f.source != "yours")
    pool = _WorkerPool(folder, slot, m.modules, references, m.probe_timeout)
    session = Session(pool.get, m.probe_timeout, m.forbidden_for)
    try:
        for name in run_order(m.checks, groups):
            points = m.checks[name]
            if time.monotonic() - start > m.total_timeout:
                results[name] = CheckResult(name, points, 0, f"Not run: grading stopped at the total time "
                                                             f"limit of {m.total_timeout:g} s.")
                continue
            failed = {r.name for r in results.values() if not r.passed}
            results[name] = _run_group(name, points, groups.get(name), groups, failed, session, m, seed)
    finally:
        pool.close()
    ordered = [results[name] for name in m.checks]      # report order: course.yaml's
    _name_causes_once(ordered)
    notes = [slot.sandbox.note] if slot.sandbox.note else []
    return Result(m.id, seed, ordered, graded, time.monotonic() - start, notes)


def run_order(names, groups: dict[str, Group]) -> list[str]:
    """course.yaml's order, except that a group runs after the groups it depends on (their failure
    decides which stand-ins it gets)."""
    done: list[str] = []

    def visit(name, path=()):
        if name in done or name in path:
            return
        spec = groups.get(name)
        for dep in (spec.depends if spec else ()):
            if dep in names:
                visit(dep, path + (name,))
        done.append(name)

    for name in names:
        visit(name)
    return done


def _name_causes_once(results: list[CheckResult]) -> None:
    """A named cause is explained where it first appears in the report; later groups failing for
    the same cause say so in one line."""
    first: dict[str, str] = {}
    for r in results:
        if r.passed or not r.cause:
            continue
        if r.cause in first:
            r.message = f"Fails for the same reason as `{first[r.cause]}` above: {r.cause_text}"
        else:
            first[r.cause] = r.name


def _patches(spec: Group, groups: dict[str, Group], failed: set[str]) -> dict[str, dict]:
    """Stand-ins for every student callable provided by a failed group this group depends on."""
    available = checks.STAND_INS.get(spec.milestone, {})
    return {name: available[name] for dep in spec.depends if dep in failed and dep in groups
            for name in groups[dep].provides if name in available}


def _run_group(name, points, spec, groups, failed, session, m, seed) -> CheckResult:
    t0 = time.monotonic()
    result = CheckResult(name, points, 0)
    if spec is None:
        result.message = "This check is not available in this grader version."
        result.internal_error = f"no check function registered for {m.id}/{name}"
        return result
    patches = _patches(spec, groups, failed)
    if patches:
        callables = ", ".join(f"`{n}`" for n in patches)
        owners = ", ".join(f"`{d}`" for d in spec.depends if d in failed)
        result.stand_ins = tuple(patches)
        result.note = (f"Graded with a correct {callables} in place of yours (yours failed {owners}), so "
                       f"that mistake costs points only once.")
    tester = Tester(session, spec, seed, m.modules[0], patches)
    try:
        spec.fn(tester)
        if spec.style and tester.verified == 0:
            raise AssertionError(f"style group {m.id}/{name} judged without confirming values (t.works)")
        result.score = points
    except NotJudged as e:
        result.message, result.judged = str(e), False
    except CheckFailed as e:
        result.message, result.cause, result.cause_text = str(e), e.cause, e.cause_text
    except WorkerLost as e:   # the worker could not start, or died importing the student's file
        result.message = f"Your code could not be run: {e.reason}."
    except Exception:
        result.message = ("The grader could not finish this check on your submission (an unexpected value "
                          "came back). Your instructor can see the details.")
        result.internal_error = traceback.format_exc(limit=4)
    result.seconds = time.monotonic() - t0
    return result
