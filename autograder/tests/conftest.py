"""Shared helpers: the subjects the grader is tested against (reference, stub, mutants, correct
variants, samples), graded once per session; and grading of one-off submissions given as text."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from autograder import config
from autograder.grading.grade import grade
from derived import subject_text

HERE = Path(__file__).resolve().parent
COURSE = config.load()


def grade_text(milestone: str, text: str, course=None, seed=None, name="case"):
    """Grade a one-file submission given as source text."""
    m = COURSE.milestone(milestone)
    folder = Path(tempfile.mkdtemp(prefix=f"case-{name}-"))
    try:
        (folder / m.files[0]).write_text(text)
        return grade(folder, milestone, seed=seed, course=course or COURSE)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def subjects(milestone: str) -> dict[str, Path]:
    """Every file the grader is tested against, by kind/name (read them with `text_of`)."""
    m = COURSE.milestone(milestone)
    found = {
        "reference": COURSE.root / "solutions" / m.folder / m.files[0],
        "stub": COURSE.root / "assignments" / m.folder / m.files[0],
    }
    for kind in ("mutants", "correct"):
        for p in sorted((HERE / kind / milestone).glob("*.py")):
            found[f"{kind}/{p.stem}"] = p
    for p in sorted((COURSE.root / "autograder" / "samples" / milestone).glob(f"*/{m.files[0]}")):
        found[f"samples/{p.parent.name}"] = p
    return found


def text_of(milestone: str, path: Path) -> str:
    """The whole submission a subject file stands for (see derived.py for files with a BASE line)."""
    return subject_text(path, COURSE, milestone)


_cache: dict[str, dict] = {}


def graded(milestone: str) -> dict:
    """Results for every subject of a milestone, graded once per session.

    They go through the batch grader (two lanes, torch imported once per lane): the same engine and
    checks as `course grade`, which test_engine.py exercises on its own.
    """
    if milestone not in _cache:
        from autograder.integrations.batch.run import grade_class
        m = COURSE.milestone(milestone)
        staging = Path(tempfile.mkdtemp(prefix=f"subjects-{milestone}-"))
        try:
            names = {}
            for name, path in subjects(milestone).items():
                folder = staging / "class" / name.replace("/", "__")
                folder.mkdir(parents=True)
                (folder / m.files[0]).write_text(text_of(milestone, path))
                names[folder.name] = name
            run = grade_class(staging / "class", milestone, staging / "out", jobs=2, progress=False, course=COURSE)
            _cache[milestone] = {names[student]: r for student, r in run.results.items()}
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _cache[milestone]


@pytest.fixture(scope="session")
def course():
    return COURSE
