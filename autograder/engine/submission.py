"""Prepare a submission for grading: the student's files for this milestone, references for the rest.

Grading milestone N uses the student's own files for N and the reference for every earlier module
it imports, whatever the submission folder holds, so one mistake is never punished twice.
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import markers
from ..config import Course, Milestone

MAX_FILE_BYTES = 2_000_000


class SubmissionError(Exception):
    """The submission cannot be graded at all (not a grading result)."""


@dataclass(frozen=True)
class GradedFile:
    name: str
    source: str     # "yours" or "reference from m1"


def missing_files(path: Path, m: Milestone) -> list[str]:
    return [f for f in m.files if not (path / f).is_file()]


@contextmanager
def prepared(course: Course, m: Milestone, path: Path):
    """Yield (folder, graded_files): a private copy the worker imports from."""
    path = Path(path)
    if not path.is_dir():
        raise SubmissionError(f"{path} is not a folder: pass the folder holding {', '.join(m.files)}")
    absent = missing_files(path, m)
    if absent:
        raise SubmissionError(f"{path} has no {', '.join(absent)} (milestone {m.id} grades {', '.join(m.files)})")
    tmp = Path(tempfile.mkdtemp(prefix=f"grade-{m.id}-"))
    try:
        folder = tmp / "submission"
        folder.mkdir()
        graded = []
        for f in m.files:
            data = (path / f).read_bytes()
            if len(data) > MAX_FILE_BYTES:
                raise SubmissionError(f"{path / f} is larger than {MAX_FILE_BYTES // 1_000_000} MB")
            (folder / f).write_bytes(data)
            graded.append(GradedFile(f, "yours"))
        for dep in course.dependencies(m):
            for f in dep.files:
                src = course.root / "solutions" / dep.folder / f
                (folder / f).write_text(markers.make_reference(src.read_text(), str(src)))
                graded.append(GradedFile(f, f"reference from {dep.id}"))
        for owner in [*course.dependencies(m), m]:
            for f in owner.provided:      # the course's own file, whatever the submission holds
                (folder / f).write_text((course.root / "solutions" / owner.folder / f).read_text())
                graded.append(GradedFile(f, "provided by the course"))
        yield folder, graded
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
