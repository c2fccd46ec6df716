"""Grade one submission for one milestone: run every check group of course.yaml, in order.

The judge (this process) never imports student code. A worker subprocess does; when it hangs or
dies, the check that was running fails with a message and the next check gets a fresh worker.
"""
from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import config
from . import checks
from .checks import CheckFailed, CheckResult, Session, Tester
from .client import Worker, WorkerLost
from .submission import GradedFile, prepared

CHECK_MODULES = {"m1": "autograder.engine.checks_m1", "m2": "autograder.engine.checks_m2"}


@dataclass
class Result:
    milestone: str
    seed: int
    checks: list[CheckResult]
    files: list[GradedFile]
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)   # e.g. how the worker was isolated

    @property
    def score(self) -> int:
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> int:
        return sum(c.max_score for c in self.checks)

    @property
    def internal_errors(self) -> list[str]:
        return [f"{c.name}: {c.internal_error}" for c in self.checks if c.internal_error]


WorkerFactory = Callable[[list[Path]], Worker]


class _WorkerPool:
    """At most one live worker; a lost one is replaced on the next request.

    Each new worker first imports the student's modules. If that kills or hangs the worker, every
    later check would fail the same way, so the reason is kept and no new worker is started.
    """

    def __init__(self, folders: list[Path], factory: WorkerFactory, modules: tuple[str, ...], timeout: float):
        self.folders, self.factory, self.modules, self.timeout = folders, factory, modules, timeout
        self.worker: Worker | None = None
        self.import_lost: WorkerLost | None = None

    def get(self) -> Worker:
        if self.import_lost is not None:
            raise self.import_lost
        if self.worker is None or not self.worker.alive():
            self.close()
            self.worker = self.factory(self.folders)
            try:
                self.worker.request({"op": "import", "modules": list(self.modules)}, self.timeout)
            except WorkerLost as e:
                self.import_lost = WorkerLost(f"importing your file, {e.reason}", e.kind)
                raise self.import_lost from None
        return self.worker

    def close(self):
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def check_groups(milestone_id: str) -> dict[str, Callable]:
    module = CHECK_MODULES.get(milestone_id)
    if module is None:
        return {}
    importlib.import_module(module)
    return checks.REGISTRY.get(milestone_id, {})


def grade(path: Path | str, milestone_id: str, seed: int | None = None,
          course: config.Course | None = None, worker_factory: WorkerFactory | None = None) -> Result:
    course = course or config.load()
    m = course.milestone(milestone_id)
    seed = course.seed if seed is None else seed
    factory = worker_factory or (lambda folders: Worker(folders, course.startup_timeout))
    groups = check_groups(m.id)
    start = time.monotonic()
    results: list[CheckResult] = []
    with prepared(course, m, Path(path)) as (folder, graded):
        pool = _WorkerPool([folder], factory, m.modules, m.probe_timeout)
        session = Session(pool.get, m.probe_timeout, m.forbidden_for)
        try:
            for name, points in m.checks.items():
                if time.monotonic() - start > m.total_timeout:
                    results.append(CheckResult(name, points, 0, f"Not run: grading stopped at the total time "
                                                                f"limit of {m.total_timeout:g} s."))
                    continue
                results.append(_run_group(name, points, groups.get(name), session, m, seed))
        finally:
            pool.close()
    return Result(m.id, seed, results, graded, time.monotonic() - start)


def _run_group(name, points, fn, session, m, seed) -> CheckResult:
    t0 = time.monotonic()
    result = CheckResult(name, points, 0)
    if fn is None:
        result.message = "This check is not available in this grader version."
        result.internal_error = f"no check function registered for {m.id}/{name}"
        return result
    try:
        fn(Tester(session, m.id, name, seed, m.modules[0]))
        result.score = points
    except CheckFailed as e:
        result.message = str(e)
    except WorkerLost as e:   # the worker could not start, or died importing the student's file
        result.message = f"Your code could not be run: {e.reason}."
    except Exception:
        result.message = ("The grader could not finish this check on your submission (an unexpected value "
                          "came back). Your instructor can see the details.")
        result.internal_error = traceback.format_exc(limit=4)
    result.seconds = time.monotonic() - t0
    return result
