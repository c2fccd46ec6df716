"""Shared fixtures: the subjects the grader is tested against (reference, stub, mutants, correct variants,
samples), each graded once per session and only when a test asks for it; warm sandbox slots; and grading
of one-off submissions given as text.

A test that needs a subject's result says so with the `grades` mark (`pytest.mark.grades(("m6",
"mutants/x"))`, usually on a parametrize case) and asks the `graded` fixture for it. Collection lists
the subjects the selected tests need, in test order; while a test waits for its subject, a second lane
grades the next one needed (as the batch grader's two lanes do), so `-k one_mutant` grades one file and
the whole suite keeps both cores busy.
"""
from __future__ import annotations

import ast
import functools
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from autograder import config
from derived import subject_files, subject_text

# Python 3.11 keeps the ast module's recursion counter per interpreter, not per thread: two threads building ASTs
# at once (a grading lane reading a subject with derived.py while pytest formats a failure) can fail with
# "SystemError: AST constructor recursion depth mismatch". The suite builds every AST under one lock.
_AST_LOCK = threading.RLock()
_parse = ast.parse


@functools.wraps(_parse)
def _locked_parse(*args, **kwargs):
    with _AST_LOCK:
        return _parse(*args, **kwargs)


ast.parse = _locked_parse

HERE = Path(__file__).resolve().parent
# Read at import: parametrize lists are built at collection, before any fixture exists.
COURSE = config.load()
LANES = 2                        # subjects graded at once (the batch grader's default on 2 cores)
_NEEDED = pytest.StashKey[list]()


def subjects(milestone: str, course: config.Course = COURSE) -> dict[str, Path]:
    """Every file the grader is tested against, by kind/name (read them with `text_of`)."""
    m = course.milestone(milestone)
    found = {
        "reference": course.root / "solutions" / m.folder / m.files[0],
        "stub": course.root / "assignments" / m.folder / m.files[0],
    }
    for kind in ("mutants", "correct"):
        for p in subject_files(HERE / kind / milestone):
            found[f"{kind}/{p.stem}"] = p
    for p in sorted((course.root / "autograder" / "samples" / milestone).glob(f"*/{m.files[0]}")):
        found[f"samples/{p.parent.name}"] = p
    return found


def text_of(milestone: str, path: Path, course: config.Course = COURSE) -> str:
    """The whole submission a subject file stands for (see derived.py for files with a BASE line)."""
    return subject_text(path, course, milestone)


# ---- warm sandbox slots ---------------------------------------------------------------------------
class Slots:
    """Fork-server slots kept warm for the whole session (torch imported once per slot, not per grade).

    `borrow()` lends an idle slot, starting one when none is idle; a slot whose server died is replaced.
    """

    def __init__(self, course: config.Course):
        from autograder.sandbox.slot import Sandbox, make_root
        self.course = course
        self.box = Sandbox.detect("auto")
        self.root = make_root()
        self._idle: list = []
        self._all: list = []
        self._lock = threading.Lock()

    @contextmanager
    def borrow(self):
        from autograder.sandbox.slot import Slot
        with self._lock:
            slot = self._idle.pop() if self._idle else None
            if slot is None:
                slot = Slot(len(self._all), self.root, self.box, self.course.startup_timeout)
                self._all.append(slot)
        try:
            if not slot.alive():
                slot.close()
                with self._lock:
                    fresh = Slot(len(self._all), self.root, self.box, self.course.startup_timeout)
                    self._all.append(fresh)
                slot = fresh
            yield slot
        finally:
            with self._lock:
                self._idle.append(slot)

    def close(self):
        from autograder.sandbox.slot import remove_root
        for slot in self._all:
            slot.close()
        remove_root(self.root)


def grade_folder_text(course: config.Course, slots: Slots, milestone: str, text: str, seed=None, name="case",
                      grading_course=None):
    """Grade a one-file submission given as source text, in a warm slot."""
    from autograder.grading.grade import grade
    m = course.milestone(milestone)
    folder = Path(tempfile.mkdtemp(prefix=f"case-{name}-"))
    try:
        (folder / m.files[0]).write_text(text)
        with slots.borrow() as slot:
            return grade(folder, milestone, seed=seed, course=grading_course or course, slot=slot)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- subjects, graded on demand -------------------------------------------------------------------
class Graded:
    """Results of the suite's subjects, each graded at most once per session, on first use.

    `graded(milestone, name)` returns the Result of one subject; `graded.of(milestone, prefix)` those of
    every subject whose name starts with `prefix`. While a test waits, up to LANES subjects are graded at
    once: the one asked for first, then the next ones the selected tests will ask for (`needed`).
    """

    def __init__(self, course: config.Course, slots: Slots, needed: list[tuple[str, str]]):
        self.course, self.slots = course, slots
        self.needed = list(dict.fromkeys(needed))
        self._results: dict[tuple[str, str], object] = {}
        self._errors: dict[tuple[str, str], BaseException] = {}
        self._taken: set[tuple[str, str]] = set()
        self._asked: list[tuple[str, str]] = []
        self._waiting = 0
        self._lanes = 0
        self._cond = threading.Condition()

    def __call__(self, milestone: str, name: str):
        key = (milestone, name)
        with self._cond:
            if key not in self._results and key not in self._errors:
                self._asked.append(key)
                self._waiting += 1
                try:
                    while self._lanes < LANES and self._next_job(peek=True) is not None:
                        self._lanes += 1
                        threading.Thread(target=self._lane, daemon=True, name=f"subjects-lane-{self._lanes}").start()
                    self._cond.notify_all()
                    self._cond.wait_for(lambda: key in self._results or key in self._errors)
                finally:
                    self._waiting -= 1
            if key in self._errors:
                raise self._errors[key]
            return self._results[key]

    def of(self, milestone: str, prefix: str) -> dict:
        return {name: self(milestone, name) for name in subjects(milestone, self.course) if name.startswith(prefix)}

    def _next_job(self, peek: bool = False):
        """(milestone, name) to grade now: a subject a test waits for, else (while one waits) the next needed."""
        if not self._waiting:
            return None
        for key in self._asked + self.needed:
            if key not in self._taken:
                if not peek:
                    self._taken.add(key)
                return key
        return None

    def _lane(self):
        while True:
            with self._cond:
                key = self._next_job()
                if key is None:
                    self._lanes -= 1
                    return
            try:
                r, err = self._grade(*key), None
            except BaseException as e:          # a grader bug: the test that asked for it fails with it
                r, err = None, e
            with self._cond:
                if err is None:
                    self._results[key] = r
                else:
                    self._errors[key] = err
                self._cond.notify_all()

    def _grade(self, milestone: str, name: str):
        path = subjects(milestone, self.course)[name]
        return grade_folder_text(self.course, self.slots, milestone, text_of(milestone, path, self.course),
                                 name=name.replace("/", "__"))


def pytest_configure(config):
    config.addinivalue_line("markers", "grades(*keys): the (milestone, subject) results this test reads from "
                                       "the `graded` fixture, graded ahead of it")


def pytest_collection_modifyitems(session, config, items):
    config.stash[_NEEDED] = [tuple(key) for item in items for mark in item.iter_markers("grades")
                             for key in mark.args]


@pytest.fixture(scope="session")
def course():
    return COURSE


@pytest.fixture(scope="session")
def slots(course):
    s = Slots(course)
    yield s
    s.close()


@pytest.fixture(scope="session")
def graded(course, slots, request):
    g = Graded(course, slots, request.config.stash.get(_NEEDED, []))
    yield g
    with g._cond:                 # no lane starts another subject; wait for the ones grading now
        g.needed.clear()
        g._asked.clear()
        g._cond.wait_for(lambda: g._lanes == 0, timeout=600)


@pytest.fixture(scope="session")
def grade_text(course, slots):
    """grade_text(milestone, text, course=None, seed=None, name="case"): grade a one-file submission
    given as source text, in a warm slot (`course`: another course configuration, e.g. shorter limits)."""
    def grade_text(milestone: str, text: str, course=None, seed=None, name="case"):
        return grade_folder_text(COURSE, slots, milestone, text, seed=seed, name=name, grading_course=course)
    return grade_text
