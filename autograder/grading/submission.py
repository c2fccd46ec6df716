"""Prepare a submission for grading: the student's files for this milestone, references for the rest.

Grading milestone N uses the student's own files for N and the reference for every earlier module
it imports, whatever the submission folder holds, so one mistake is never punished twice.

Every path that grades (`course grade`, the pytest plugin, nbgrader, grade-class, Gradescope) reads
the student's files through `open_submitted`: a submitted file must be a regular file, never a
symbolic link (which could point at the course's solutions), a FIFO or a device.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from autograder.authoring import markers
from autograder.config import Course, Milestone

MAX_FILE_BYTES = 2_000_000
PROVIDED = "provided by the course"


class SubmissionError(Exception):
    """The submission cannot be graded at all (not a grading result). `status`: "missing" (no file
    to grade) or "refused" (a file that may not be graded: a link, a FIFO, too large, a bad zip)."""

    def __init__(self, message: str, status: str = "refused"):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class GradedFile:
    name: str
    source: str     # "yours" or "reference from m1"


def _megabytes(n: int) -> str:
    return f"{n / 1_000_000:g} MB"


def open_submitted(path: Path, limit: int = MAX_FILE_BYTES):
    """Open a file a student submitted for reading (binary), or raise SubmissionError saying why not.

    lstat first, so that a link, FIFO or device is never opened; then O_NOFOLLOW (a link swapped in
    meanwhile fails) and O_NONBLOCK (a FIFO swapped in cannot block), and fstat what was opened."""
    path = Path(path)
    name = path.name
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise SubmissionError(f"{name} is missing", "missing") from None
    except OSError as e:
        raise SubmissionError(f"{name} could not be read ({e.strerror})") from None
    if stat.S_ISLNK(before.st_mode):
        raise SubmissionError(f"{name} is a symbolic link: submit the file itself, not a link to it")
    if not stat.S_ISREG(before.st_mode):
        raise SubmissionError(f"{name} is not a regular file (a folder, a pipe or a device): submit the file itself")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise SubmissionError(f"{name} could not be read ({e.strerror})") from None
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(now.st_mode):
        os.close(fd)
        raise SubmissionError(f"{name} changed while it was being read: submit it again")
    if now.st_size > limit:
        os.close(fd)
        raise SubmissionError(f"{name} is larger than {_megabytes(limit)}")
    return os.fdopen(fd, "rb")


def read_submitted(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a submitted file (see open_submitted), at most `limit` of them."""
    with open_submitted(path, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:                       # it grew after the size was checked
        raise SubmissionError(f"{Path(path).name} is larger than {_megabytes(limit)}")
    return data


def missing_files(path: Path, m: Milestone) -> list[str]:
    """The milestone's files with no entry at all in `path` (a link or a FIFO is there, and refused later)."""
    return [f for f in m.files if not os.path.lexists(Path(path) / f)]


def reference_files(course: Course, m: Milestone) -> list[tuple[str, str]]:
    """(path under solutions/, how the report names it) of every course file grading m adds: the
    references of earlier milestones and the provided files. Never m's own solution."""
    deps = course.dependencies(m)
    refs = [(f"{dep.folder}/{f}", f"reference from {dep.id}") for dep in deps for f in dep.files]
    return refs + [(f"{owner.folder}/{f}", PROVIDED) for owner in [*deps, m] for f in owner.provided]


@contextmanager
def prepared(course: Course, m: Milestone, path: Path):
    """Yield (folder, graded_files): a private copy the worker imports from."""
    path = Path(path)
    if not path.is_dir():
        raise SubmissionError(f"{path} is not a folder: pass the folder holding {', '.join(m.files)}", "missing")
    absent = missing_files(path, m)
    if absent:
        raise SubmissionError(f"{path} has no {', '.join(absent)} (milestone {m.id} grades {', '.join(m.files)})",
                              "missing")
    tmp = Path(tempfile.mkdtemp(prefix=f"grade-{m.id}-"))
    try:
        folder = tmp / "submission"
        folder.mkdir()
        graded = []
        for f in m.files:
            (folder / f).write_bytes(read_submitted(path / f))
            graded.append(GradedFile(f, "yours"))
        for rel, source in reference_files(course, m):
            src = course.root / "solutions" / rel
            text = src.read_text()        # the course's own file, whatever the submission holds
            if source != PROVIDED:
                text = markers.make_reference(text, str(src))
            (folder / src.name).write_text(text)
            graded.append(GradedFile(src.name, source))
        yield folder, graded
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
