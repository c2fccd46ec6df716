"""nbgrader glue: the hidden part of each autograded cell, the course's nbgrader settings, student-safe
feedback, per-check score export, and `course release`.

Nothing here repeats a course fact: folders, student files and points come from course.yaml, and the
hidden cells call the same engine as `course grade` (`engine.grade.grade`).
"""
from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from . import config, notebook

# ---- inside the notebook kernel (autograde) ------------------------------------------------


_RESULTS: dict = {}   # (milestone, folder, digest of the student files) -> Result or SubmissionError


def _grade_once(milestone: str, path: Path):
    """Grade the whole milestone once per kernel and set of student files, exactly as `course grade`
    does (one worker, a fresh one after a loss, the total time limit); every autograded cell then
    reports its own group. A student file edited between cells is graded again."""
    from .engine.grade import grade
    from .engine.submission import SubmissionError
    course = config.load()
    m = course.milestone(milestone)
    digest = hashlib.sha256()
    for f in m.files:
        p = path / f
        digest.update(f.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"<missing>") + b"\0")
    key = (m.id, str(path.resolve()), digest.hexdigest())
    if key not in _RESULTS:
        try:
            _RESULTS[key] = grade(path, m.id, course=course)
        except SubmissionError as e:
            _RESULTS[key] = e
    return _RESULTS[key]


def run_check(milestone: str, group: str, path: str | Path = ".") -> None:
    """The hidden part of the autograded cell of check group `group`, run in the notebook's kernel on
    the student files in `path` (the kernel's working directory at autograde).

    Passes with a one-line note, or raises AssertionError with the student-facing message, which
    nbgrader records as 0 points for the cell.
    """
    result = _grade_once(milestone, Path(path))
    if isinstance(result, Exception):
        raise AssertionError(str(result))
    (check,) = [c for c in result.checks if c.name == group]
    if check.internal_error:   # for the instructor: the autograded notebook keeps it, feedback drops it
        print(f"INSTRUCTOR: internal grader error in {milestone}/{group}:\n{check.internal_error}", file=sys.stderr)
    if not check.passed:
        raise AssertionError(f"check `{group}` failed ({check.score}/{check.max_score}): {check.message}")
    print(f"check `{group}` passed: {check.score}/{check.max_score}")


# ---- nbgrader_config.py ---------------------------------------------------------------------


def configure(c, root: Path | str, course: config.Course | None = None) -> None:
    """Fill nbgrader's config `c` for the course directory `root`."""
    root = Path(root).resolve()
    course = course or config.load(root / "course.yaml")
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = "source_notebooks"
    c.CourseDirectory.release_directory = "assignments"
    c.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    # Students edit these files; autograde must keep them (other files are restored from the source).
    c.Autograde.exclude_overwriting = {m.folder: list(m.files) for m in course.milestones}
    c.Autograde.create_student = True
    # A student who deletes a graded cell gets it back (and graded) rather than a silent manual grade.
    c.OverwriteCells.add_missing_cells = True
    # The first hidden cell grades the whole milestone (worker start-up plus every group); the
    # engine's own probe and total limits (course.yaml) stop runaway student code first.
    c.Execute.timeout = int(course.startup_timeout + max(m.total_timeout for m in course.milestones))
    c.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades",
        "nbgrader.preprocessors.ClearHiddenTests",
        "autograder.nbgrade.StudentFacingOutputs",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
    c.ExportApp.plugin_class = "autograder.nbgrade.PerCheckExport"
    # The kernel puts PYTHONPATH before its working directory (the student's folder), so a student's
    # autograder.py cannot stand in for the grader.
    parts = [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(root)]
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    os.environ.setdefault("MPLBACKEND", "Agg")


try:   # nbgrader is an optional extra ("instructor"); the rest of the course works without it
    from nbgrader.preprocessors import NbGraderPreprocessor as _Base
except ImportError:  # pragma: no cover
    _Base = object


class StudentFacingOutputs(_Base):
    """Feedback: errors become `Name: message` (no traceback into grader code) and grader stderr goes."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            kept = []
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
                elif out.get("output_type") == "stream" and out.get("name") == "stderr" \
                        and "INSTRUCTOR:" in "".join(out.get("text", "")):
                    continue
                kept.append(out)
            cell["outputs"] = kept
        return cell, resources


# ---- scores ---------------------------------------------------------------------------------

def score_rows(gradebook, course: config.Course, m: config.Milestone) -> tuple[list[str], list[dict]]:
    """One row per student of the gradebook: a column per graded cell (check group, written question)."""
    from nbgrader.api import MissingEntry
    cells = list(m.checks) + [w.id for w in m.written]
    header = ["student_id", *cells, "autograded", "written", "total", "max_score", "status"]
    nb_name = notebook.notebook_name(m)[: -len(".ipynb")]
    rows = []
    for student in sorted(gradebook.students, key=lambda s: s.id):
        row = {"student_id": student.id, "max_score": m.max_score + sum(w.points for w in m.written)}
        try:
            sub = gradebook.find_submission_notebook(nb_name, m.folder, student.id)
        except MissingEntry:
            rows.append({**row, **{k: 0 for k in cells}, "autograded": 0, "written": 0, "total": 0,
                         "status": "no submission"})
            continue
        grades = {g.name: g for g in sub.grades}
        status = []
        if all(grades.get(k) is None or grades[k].auto_score is None for k in m.checks):
            status.append("not autograded (unreadable notebook or failed run: see `nbgrader autograde` log)")
        for k in cells:
            g = grades.get(k)
            row[k] = 0 if g is None or g.score is None else _num(g.score)
        manual = [k for k in cells if k in grades and grades[k].needs_manual_grade]
        if manual:
            status.append("needs manual grading: " + ", ".join(manual))
        row["autograded"] = _num(sum(row[k] for k in m.checks))
        row["written"] = _num(sum(row[w.id] for w in m.written))
        row["total"] = _num(row["autograded"] + row["written"])
        row["status"] = "; ".join(status) or "ok"
        rows.append(row)
    return header, rows


def _num(x):
    return int(x) if float(x).is_integer() else round(float(x), 3)


def write_scores(course: config.Course, milestone: str, dest: Path | str, db_url: str | None = None) -> int:
    from nbgrader.api import Gradebook
    m = course.milestone(milestone)
    with Gradebook(db_url or f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        header, rows = score_rows(gb, course, m)
    with open(dest, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


try:
    from nbgrader.plugins import ExportPlugin as _ExportBase
except ImportError:  # pragma: no cover
    _ExportBase = object


class PerCheckExport(_ExportBase):
    """`nbgrader export`: one CSV per milestone (scores-<folder>.csv, or --to PREFIX), a column per check."""

    def export(self, gradebook) -> None:
        course = config.load()
        wanted = [str(a) for a in self.assignment]
        for m in course.milestones:
            if wanted and m.folder not in wanted and m.id not in wanted:
                continue
            try:
                gradebook.find_assignment(m.folder)
            except Exception:
                continue
            dest = f"{self.to or 'scores'}-{m.folder}.csv"
            header, rows = score_rows(gradebook, course, m)
            with open(dest, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=header)
                w.writeheader()
                w.writerows(rows)
            self.log.info("Wrote %s (%d students)", dest, len(rows))


# ---- course release -------------------------------------------------------------------------

def nbgrader_env() -> dict:
    """nbgrader shells out to `alembic` and starts kernels: put this Python's bin/ first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_nbgrader(course: config.Course, *args: str) -> int:
    return subprocess.call([sys.executable, "-m", "nbgrader", *args], cwd=course.root, env=nbgrader_env())
