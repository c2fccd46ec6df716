"""Grade one submission for one milestone: run every check group of course.yaml, in order.

The judge (this process) never imports student code. A sandboxed worker does (sandbox.Slot); when it
hangs or dies, the check that was running fails with a message and the next check gets a fresh worker.

How points follow mistakes (the same for every milestone): one mistake costs points once, where it is.
- Every group is all or nothing, and passes only when the code gives the right values on its inputs.
- A group that depends on an earlier group which failed is graded with correct stand-ins for the
  student callables that group judges: a wrong `softmax` is charged in `softmax`, and attention is
  graded on its own merits. The report says which stand-ins were used.
- A group whose failure is reproduced by the same known mistake (its own computation, see
  diagnosis.py) that an earlier group was charged for, in the same student callable or in one that runs a
  helper of the student's in common with it (shared_code.py), keeps its points and says so in one line.
- Style groups (rules: loops, forbidden APIs, dtype, in-place, errors) run after every group of values
  and judge the rule on what the code computes (checks.Values): wrong values charged above do not
  cost their points again, and a file where no group of values passes scores 0 in them too.
"""
from __future__ import annotations

import functools
import importlib
import sys
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import torch
# autograd imports this (and sympy, ~0.6 s) at the judge's first gradient with a given grad_output; import
# it now, while the sandboxed worker is still starting (course grade starts it before importing us).
import torch.fx.experimental.symbolic_shapes  # noqa: F401

from autograder import config
from autograder.grading import checks
from autograder.grading.checks import ChargedAbove, CheckFailed, CheckResult, Group, NotJudged, Session, Tester, Values
from autograder.sandbox import protocol
from autograder.grading.shared_code import common_helper, shared_helpers
from autograder.grading.submission import GradedFile, prepared
from autograder.sandbox.client import Worker, WorkerLost


@dataclass
class Result:
    milestone: str
    seed: int
    checks: list[CheckResult]
    files: list[GradedFile]
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)   # e.g. that the code was not isolated
    # Evidence that the code reached for the grader's observers (tamper) or computed where they could not
    # see (unobserved): the checks that rest on those observers score 0, and every output flags it.
    tamper: list[str] = field(default_factory=list)
    unobserved: list[str] = field(default_factory=list)
    written_points: int = 0      # the notebook's written questions: graded by hand, not in this total

    @property
    def integrity(self) -> str:
        """"tamper", "unobserved" or "" (nothing found)."""
        return "tamper" if self.tamper else ("unobserved" if self.unobserved else "")

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

    def __init__(self, folder: Path, slot, modules: tuple[str, ...], references: tuple[str, ...], timeout: float,
                 preload: tuple[str, ...] = ()):
        self.folder, self.slot, self.modules, self.references, self.timeout = folder, slot, modules, references, timeout
        self.preload = preload
        self.factory = slot.worker_factory()
        self.worker: Worker | None = None
        self.workers: list[Worker] = []           # every worker of this submission (their evidence)
        self.import_lost: WorkerLost | None = None

    def get(self) -> Worker:
        if self.import_lost is not None:
            raise self.import_lost
        if self.worker is None or not self.worker.alive():
            self.close()
            self.worker = self.factory([self.folder], self.preload)
            self.workers.append(self.worker)
            try:
                reply = self.worker.request(protocol.Import(modules=list(self.modules),
                                                            references=list(self.references)), self.timeout)
            except WorkerLost as e:
                self.import_lost = WorkerLost(f"importing your file, {e.reason}", e.kind)
                raise self.import_lost from None
            if reply.get("kind") == "tamper":
                self.import_lost = WorkerLost(f"importing your file, it reached for the grader's own objects "
                                              f"({reply.get('message')}), and the process was stopped", "tamper")
                raise self.import_lost
        return self.worker

    def close(self):
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def evidence(self) -> tuple[list[str], list[str]]:
        """(tamper, unobserved): what the guards of every worker so far reported, once each."""
        tamper = list(dict.fromkeys(e for w in self.workers for e in w.tamper))
        unobserved = list(dict.fromkeys(e for w in self.workers for e in w.unobserved))
        return tamper, unobserved


def worker_preload(milestone_id: str) -> tuple[str, ...]:
    """Modules a milestone's workers need the fork server to import first (see milestones/m5/checks.py: WORKER_PRELOAD)."""
    module = sys.modules.get(f"autograder.milestones.{milestone_id}.checks")
    return tuple(getattr(module, "WORKER_PRELOAD", ()))


def check_groups(milestone_id: str) -> dict[str, Group]:
    try:
        importlib.import_module(f"autograder.milestones.{milestone_id}.checks")
    except ModuleNotFoundError:
        return {}
    return checks.REGISTRY.get(milestone_id, {})


def grade(path: Path | str, milestone_id: str, seed: int | None = None, course: config.Course | None = None,
          slot=None, sandbox: str = "auto") -> Result:
    """Grade the submission folder `path`. `slot`: a sandbox.Slot to run the code in (one is opened
    and closed here when None; `sandbox` then says which kind, "auto" being bubblewrap when it works)."""
    with Grading(path, milestone_id, seed, course, slot, sandbox) as g:
        return g.result()


class Grading:
    """One submission being graded, group by group, in one sandboxed worker session.

    `run(name)` grades a group (and first, silently, the groups it depends on: their outcome decides
    its stand-ins) and returns its CheckResult; `result()` grades every group and gives the report.
    `grade()` uses it whole; the pytest plugin (autograder/integrations/pytest_plugin) one group per test.
    """

    def __init__(self, path: Path | str, milestone_id: str, seed: int | None = None,
                 course: config.Course | None = None, slot=None, sandbox: str = "auto"):
        self.course = course or config.load()
        self.m = self.course.milestone(milestone_id)
        self.seed = self.course.seed if seed is None else seed
        self.path, self.slot, self.sandbox = Path(path), slot, sandbox
        self.results: dict[str, CheckResult] = {}
        self._stack = ExitStack()

    def __enter__(self):
        # The judge's own tensors are tiny: with more than one thread, waking the pool costs milliseconds
        # per operation on a busy machine (measured: log_softmax of [12, 9] 0.004 ms -> 8 ms).
        torch.set_num_threads(1)
        try:
            self.folder, self.graded = self._stack.enter_context(prepared(self.course, self.m, self.path))
            if self.slot is None:
                from autograder.sandbox import open_slot
                self.slot = self._stack.enter_context(open_slot(self.sandbox, self.course.startup_timeout))
            self.groups = check_groups(self.m.id)
            self.helpers = _helpers(self.course, self.m, self.folder)
            references = tuple(Path(f.name).stem for f in self.graded if f.source != "yours")
            self.pool = _WorkerPool(self.folder, self.slot, self.m.modules, references, self.m.probe_timeout,
                                    worker_preload(self.m.id))
            self._stack.callback(self.pool.close)
        except BaseException:
            self._stack.close()
            raise
        self.session = Session(self.pool.get, self.m.probe_timeout, self.m.forbidden_for)
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False

    def run(self, name: str) -> CheckResult:
        spec = self.groups.get(name)
        first = [g for g in self.m.checks if spec is not None and spec.style and not _is_style(self.groups, g)]
        for dep in run_order([*first, name], self.groups, self.m.checks):
            if dep not in self.results:
                self.results[dep] = self._run(dep)
        return self.results[name]

    def verdict(self, name: str) -> CheckResult:
        """`run(name)`, with the rules that need other groups applied: a failure with a reproduced cause is charged
        where it costs most (every group runs first), and a group the grader's observers decide is judged only
        after every group ran (evidence found anywhere counts)."""
        result, spec = self.run(name), self.groups.get(name)
        if (not result.passed and result.reproduced) or (spec is not None and spec.observes):
            for other in self.m.checks:     # where a reproduced mistake is charged, every group decides
                self.run(other)
        _charge_once([self.results[n] for n in self.m.checks if n in self.results], self.helpers)
        if spec is None or not spec.observes:
            return self.results[name]
        tamper, unobserved = self.pool.evidence()
        _charge_observers([self.results[name]], self.groups, tamper, unobserved)
        return self.results[name]

    def _run(self, name: str) -> CheckResult:
        points = self.m.checks[name]
        if time.monotonic() - self.start > self.m.total_timeout:
            return CheckResult(name, points, 0, f"Not run: grading stopped at the total time limit of "
                                                f"{self.m.total_timeout:g} s.")
        earlier = list(self.results.values())
        failed = {r.name: r.blamed for r in earlier if not r.passed or r.charged_in}
        values = Values(tuple(r.name for r in earlier if r.passed and not r.charged_in
                              and not _is_style(self.groups, r.name)),
                        tuple((r.name, r.message.strip().split("\n")[0]) for r in earlier
                              if not r.passed and not _is_style(self.groups, r.name)),
                        # right values, or values a known mistake reproduces (charged once, where it is)
                        frozenset(c for r in earlier if (r.passed and not r.charged_in or r.reproduced)
                                  and not _is_style(self.groups, r.name) for c in r.invoked),
                        frozenset(r.cause for r in earlier if not r.passed and r.reproduced and r.cause))
        charged = {r.name: r.charged_in for r in earlier if r.passed and r.charged_in}
        return _run_group(name, points, self.groups.get(name), self.groups, failed, self.session, self.m,
                          self.seed, values, charged)

    def result(self) -> Result:
        for name in self.m.checks:
            self.run(name)
        ordered = [self.results[name] for name in self.m.checks]      # report order: course.yaml's
        _charge_once(ordered, self.helpers)
        _name_causes_once(ordered)
        tamper, unobserved = self.pool.evidence()
        _charge_observers(ordered, self.groups, tamper, unobserved)
        notes = [self.slot.sandbox.note] if self.slot.sandbox.note else []
        return Result(self.m.id, self.seed, ordered, self.graded, time.monotonic() - self.start, notes,
                      tamper, unobserved, sum(w.points for w in self.m.written))


def _helpers(course: config.Course, m: config.Milestone, folder: Path) -> dict[str, frozenset[str]]:
    """The student file's callables -> the helpers of their own they run (shared_code), read as text."""
    try:
        return shared_helpers((folder / m.files[0]).read_text(errors="replace"),
                              _api(course.root / "solutions" / m.folder / m.files[0]))
    except OSError:
        return {}


@functools.lru_cache(maxsize=None)
def _api(reference: Path) -> frozenset[str]:
    """The top-level names the reference declares, the API the stub gives too (read once per milestone, not
    once per submission)."""
    return frozenset(shared_helpers(reference.read_text(), set()))


def _is_style(groups: dict[str, Group], name: str) -> bool:
    return name in groups and groups[name].style


def _charge_once(results: list[CheckResult], helpers: dict[str, frozenset[str]] | None = None) -> None:
    """Failures whose cause is the same known mistake, one that reproduced the answers (it has its own
    computation), in the same student callable, cost points once: in the group worth the most (the first in
    report order on a tie); the others keep their points and say where it was charged. The same mistake made
    in two functions is two mistakes, unless both run a helper of the student's in common (`helpers`:
    shared_code.shared_helpers of the student's file), where it most likely is."""
    helpers = helpers or {}
    by_cause: dict[str, list[list[CheckResult]]] = {}
    for r in results:
        if not r.passed and r.cause and r.reproduced and not r.charged_in:
            clusters = by_cause.setdefault(r.cause, [])
            joined = [c for c in clusters if any(o.failed_on == r.failed_on
                                                 or common_helper(helpers, o.failed_on, r.failed_on) for o in c)]
            for c in joined:
                clusters.remove(c)
            clusters.append([o for c in joined for o in c] + [r])
    for same in (c for clusters in by_cause.values() for c in clusters):
        # the group worth the most; among equals the mistake's home group (Mistake.home), else the first
        owner = max(same, key=lambda r: (r.max_score, r.name == r.cause_home))
        for r in same:
            if r is not owner:
                r.score, r.charged_in = r.max_score, owner.name
                helper = common_helper(helpers, owner.failed_on, r.failed_on) if owner.failed_on != r.failed_on \
                    else None
                why = (f"; `{owner.failed_on}` and `{r.failed_on}` both run your `{helper}`, so it is one mistake"
                       if helper else "")
                r.message = f"Same mistake as in `{owner.name}`, charged there (so not here{why}): {owner.cause_text}"
    by_name = {r.name: r for r in results}
    for r in results:          # a style group kept its points for a failure charged in a group now forgiven
        owner = by_name.get(r.charged_in)
        if owner is not None and owner.charged_in and r.cause is None:
            r.message = r.message.replace(f"`{r.charged_in}`", f"`{owner.charged_in}`")
            r.charged_in = owner.charged_in


def run_order(names, groups: dict[str, Group], known=None) -> list[str]:
    """`names` in their order, each after the groups it depends on (their failure decides which
    stand-ins it gets). `known`: every group of the milestone (default: `names`)."""
    known = names if known is None else known
    done: list[str] = []

    def visit(name, path=()):
        if name in done or name in path:
            return
        spec = groups.get(name)
        for dep in (spec.depends if spec else ()):
            if dep in known:
                visit(dep, path + (name,))
        done.append(name)

    for name in names:
        visit(name)
    return done


def _charge_observers(results: list[CheckResult], groups: dict[str, Group], tamper, unobserved) -> None:
    """Checks decided by the grader's observers (op counts, functions used, the models' events) score 0
    when the code reached for those observers or computed where they could not see."""
    if not tamper and not unobserved:
        return
    if tamper:
        why = (f"Not judged: your code reached for the grader's own objects or switched off what it observes "
               f"({'; '.join(tamper[:3])}). Checks that rest on those observations score 0, and your instructor "
               f"is told.")
    else:
        why = (f"Not judged: part of your result was computed where the grader could not observe it (an "
               f"operation outside PyTorch's observed calls: {', '.join(unobserved[:3])}). Checks that rest on "
               f"observing your computation score 0, and your instructor is told.")
    for r in results:
        spec = groups.get(r.name)
        if spec is not None and spec.observes and r.score:
            r.score, r.judged, r.message, r.cause, r.cause_text = 0, False, why, None, None


def _name_causes_once(results: list[CheckResult]) -> None:
    """A named cause is explained where it first appears in the report; later groups failing for
    the same cause say so in one line."""
    for i, r in enumerate(results):
        line = same_reason(r, results[:i])
        if line:
            r.message = line


def same_reason(result: CheckResult, earlier: list[CheckResult]) -> str | None:
    """'Fails for the same reason as `X` above: ...' when an earlier failed group named the same cause."""
    if result.passed or not result.cause:
        return None
    first = next((e for e in earlier if not e.passed and e.cause == result.cause), None)
    return f"Fails for the same reason as `{first.name}` above: {result.cause_text}" if first else None


def _patches(spec: Group, groups: dict[str, Group], failed: dict[str, tuple]) -> dict[str, dict]:
    """Stand-ins for every student callable provided by (or proved wrong in) a failed group this group
    depends on. `failed`: failed group -> the callables it proved wrong."""
    available = checks.STAND_INS.get(spec.milestone, {})
    return {name: available[name] for dep in spec.depends if dep in failed and dep in groups
            for name in (*groups[dep].provides, *failed[dep]) if name in available}


def _run_group(name, points, spec, groups, failed, session, m, seed, values: Values, charged=None) -> CheckResult:
    """`charged`: groups that kept their points because what they met was charged in another (-> that one)."""
    t0 = time.monotonic()
    result = CheckResult(name, points, 0)
    if spec is None:
        result.message = "This check is not available in this grader version."
        result.internal_error = f"no check function registered for {m.id}/{name}"
        return result
    patches = _patches(spec, groups, failed)
    if patches:
        callables = ", ".join(f"`{n}`" for n in patches)
        owners_of = [d for d in spec.depends if d in failed and d in groups
                     and set((*groups[d].provides, *failed[d])) & set(patches)]
        owners = ", ".join(f"`{d}`" for d in owners_of)
        result.stand_ins = tuple(patches)
        them = "it" if len(patches) == 1 else "them"
        verb = "checks" if "," not in owners else "check"
        result.note = (f"Graded with the course's correct {callables} in place of yours, because {owners}, which "
                       f"{verb} {them}, failed: that mistake costs points only once.")
        where = sorted({(charged or {}).get(d, d) for d in owners_of})
        if set(owners_of) & set(charged or {}):
            result.note = (f"Graded with the course's correct {callables} in place of yours, because {owners} found "
                           f"a mistake in {them}: it costs points only once, in {', '.join(f'`{w}`' for w in where)}.")
    deps_failed = tuple(d for d in spec.depends if d in failed)
    _attempt(result, Tester(session, spec, seed, m.modules[0], patches, deps_failed, values), spec, points)
    if patches and not result.passed and not result.internal_error:
        # The student's own callables may fit together where ours do not (e.g. a table [1, max_len, d] that
        # their module indexes as pe[:, :L]): if the group passes with theirs, the mistake it met is the
        # one already charged above, in the group of the callable we replaced.
        own = CheckResult(name, points, 0)
        _attempt(own, Tester(session, spec, seed, m.modules[0], {}, deps_failed, values), spec, points)
        if own.passed and (own.judged or not spec.style):      # a real pass, not a style group's 'not judged'
            own.note = (f"Graded with your own {callables}: your code is built around yours and gives the right "
                        f"values with it (with the course's correct version in its place it failed), so that mistake "
                        f"costs points only in {owners}.")
            result = own
    result.seconds = time.monotonic() - t0
    return result


def _attempt(result: CheckResult, tester: Tester, spec: Group, points: int) -> None:
    """Run the group's checks with `tester`; record the outcome in `result`."""
    try:
        spec.fn(tester)
        if spec.style and tester.verified == 0:
            raise AssertionError(f"style group {spec.milestone}/{spec.name} judged without confirming values (t.works)")
        result.score = points
    except ChargedAbove as e:
        result.score, result.message, result.judged, result.charged_in = points, str(e), False, e.charged_in
    except NotJudged as e:
        result.message, result.judged = str(e), False
    except CheckFailed as e:
        result.message, result.cause, result.cause_text = str(e), e.cause, e.cause_text
        result.reproduced = e.mistake is not None and (e.mistake.reproduce is not None or e.mistake.observed)
        result.failed_on = e.failed_on
        result.cause_home = e.mistake.home if e.mistake is not None else ""
    except WorkerLost as e:   # the worker could not start, or died importing the student's file
        result.message = f"Your code could not be run: {e.reason}."
    except Exception:
        result.message = ("The grader could not finish this check on your submission (an unexpected value "
                          "came back). Your instructor can see the details.")
        result.internal_error = traceback.format_exc(limit=4)
    result.blamed = tuple(tester.blamed)
    result.invoked = tuple(sorted(tester.invoked))
    result.failed_on = "" if result.passed else result.failed_on or tester.last_call
