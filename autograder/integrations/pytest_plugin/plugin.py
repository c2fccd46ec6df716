"""pytest plugin (entry point `pytest11`): the hidden checks of one milestone as pytest tests.

    pytest autograder/integrations/pytest_plugin --submission DIR --milestone m3 [--seed N] [-k GROUP] [-x] [--junitxml F]

Each check group of course.yaml becomes a test named after it. Grading is the engine's
(`grading.grade.Grading`): the same sandboxed worker, seed and messages as `course grade`, one worker
session for the whole pytest session, each group graded once and only when its test runs (with
`-k parity`, only parity and the groups it depends on, which decide its stand-ins, are graded, except
that a group decided by the grader's observers waits for every group, whose evidence it needs; `-x`
stops grading at the first failing group). A failing test shows exactly the student-facing message;
points, score and seed are recorded as properties (JUnit XML: `--junitxml`).
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MARKER = "milestone.checks"
_GRADING = pytest.StashKey()


def pytest_addoption(parser):
    g = parser.getgroup("course", "Transformer from Scratch: hidden checks (autograder/integrations/pytest_plugin)")
    g.addoption("--submission", metavar="DIR", help="folder holding the student's files for the milestone")
    g.addoption("--milestone", metavar="ID", help="milestone id from course.yaml, e.g. m3")
    g.addoption("--seed", type=int, default=None, help="seed for the hidden inputs (default: course.yaml grading.seed)")
    g.addoption("--sandbox", choices=("auto", "bwrap", "rlimits"), default="auto",
                help="how the student's code is isolated (default: bubblewrap when it works)")


def pytest_collect_file(file_path, parent):
    if file_path.name == MARKER and file_path.resolve().parent == HERE:
        return MilestoneChecks.from_parent(parent, path=file_path)
    return None


class GroupFailed(Exception):
    """A check group failed; str() is the student-facing message."""


class MilestoneChecks(pytest.File):
    def collect(self):
        from autograder import config
        opts = self.config.option
        if not opts.submission or not opts.milestone:
            raise pytest.UsageError("autograder/integrations/pytest_plugin needs --submission DIR and --milestone ID (e.g. m1)")
        try:
            m = config.load().milestone(opts.milestone)
        except config.ConfigError as e:
            raise pytest.UsageError(str(e)) from None
        for name, points in m.checks.items():
            yield GroupItem.from_parent(self, name=name, points=points, milestone=m.id)


class GroupItem(pytest.Item):
    def __init__(self, *, points: int, milestone: str, **kwargs):
        super().__init__(**kwargs)
        self.points, self.milestone = points, milestone

    def runtest(self):
        grading, reported = _grading(self.config, self.milestone)
        from autograder.grading.grade import same_reason
        result = grading.verdict(self.name)
        self.user_properties += [("points", self.points), ("score", result.score), ("seed", grading.seed),
                                 ("graded_groups", ",".join(grading.results))]
        message = same_reason(result, [grading.results[n] for n in reported]) or result.message
        reported.append(self.name)
        if result.internal_error:
            self.user_properties.append(("internal_error", result.internal_error))
        if not result.passed:
            raise GroupFailed(message)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GroupFailed):
            return str(excinfo.value)
        if isinstance(excinfo.value, GradingUnavailable):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.milestone}::{self.name} ({self.points} point{'s' if self.points != 1 else ''})"


class GradingUnavailable(Exception):
    """The submission cannot be graded at all (e.g. a required file is missing)."""


def _grading(config, milestone: str):
    """The session's Grading (opened on first use, closed at the end of the session)."""
    state = config.stash.get(_GRADING, None)
    if state is None:
        from autograder.grading.grade import Grading
        from autograder.grading.submission import SubmissionError
        opts = config.option
        try:
            grading = Grading(Path(opts.submission), milestone, seed=opts.seed, sandbox=opts.sandbox).__enter__()
            state = (grading, [])
        except SubmissionError as e:
            state = e
        config.stash[_GRADING] = state
    if isinstance(state, Exception):
        raise GradingUnavailable(f"The submission could not be graded: {state}")
    return state


def pytest_unconfigure(config):
    state = config.stash.get(_GRADING, None)
    if state is not None and not isinstance(state, Exception):
        state[0].__exit__(None, None, None)


def pytest_report_header(config):
    if config.option.milestone and config.option.submission:
        return [f"course hidden checks: milestone {config.option.milestone}, submission {config.option.submission}"]
    return None
