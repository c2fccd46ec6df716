"""Shared fixtures: grade many submissions once per session, two at a time (grading waits on
worker subprocesses, so threads overlap well on 2 cores)."""
from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder import config
from autograder.engine.grade import grade

HERE = Path(__file__).resolve().parent
COURSE = config.load()


def subject_folder(milestone: str, source: Path, name: str) -> Path:
    """A temp folder holding `source` under the milestone's student file name."""
    m = COURSE.milestone(milestone)
    folder = Path(tempfile.mkdtemp(prefix=f"subject-{name}-"))
    shutil.copy(source, folder / m.files[0])
    return folder


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
    """Every file the grader is tested against, by kind/name."""
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


_cache: dict[str, dict] = {}


def graded(milestone: str) -> dict:
    """Results for every subject of a milestone, graded once per session."""
    if milestone not in _cache:
        items = subjects(milestone)

        def one(item):
            name, path = item
            folder = subject_folder(milestone, path, name.replace("/", "-"))
            try:
                return name, grade(folder, milestone, course=COURSE)
            finally:
                shutil.rmtree(folder, ignore_errors=True)

        with ThreadPoolExecutor(2) as pool:
            _cache[milestone] = dict(pool.map(one, items.items()))
    return _cache[milestone]


@pytest.fixture(scope="session")
def course():
    return COURSE
