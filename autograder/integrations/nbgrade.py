"""nbgrader glue: grading outside the student's kernel, the course's nbgrader settings, student-safe
feedback, per-check score export, and `course release`.

Autograde never trusts the notebook's kernel. nbgrader's execute step is surrounded by two steps of
ours (see `configure`): `GradeFiles` grades the student's files with the engine, in the sandbox, from
nbgrader's own process, before any notebook cell runs; `SandboxedExecute` runs the notebook in a
confined kernel (nbkernel.py) for the figures and written answers; `ApplyVerdicts` then replaces the
outputs of every autograded cell with the engine's verdict, which nbgrader's SaveAutoGrades scores.
Nothing a cell does (patching functions, faking modules, reading or writing files) reaches a score.
Nothing here repeats a course fact: folders, student files and points come from course.yaml.
"""
from __future__ import annotations

import atexit
import csv
import os
import subprocess
import sys
from pathlib import Path

from autograder import config
from autograder.authoring import notebook

try:   # nbgrader is an optional extra ("instructor"); the rest of the course works without it
    from nbgrader.preprocessors import Execute as _Execute
    from nbgrader.preprocessors import NbGraderPreprocessor as _Base
except ImportError:  # pragma: no cover
    _Base = _Execute = object


# ---- autograde: verdicts from the engine, never from the kernel -------------------------------

_SLOT = None     # one sandboxed fork server for the whole nbgrader process (torch imported once)


def _slot(course: config.Course):
    global _SLOT
    if _SLOT is None or not _SLOT.alive():
        from autograder.sandbox import Sandbox, Slot, make_root, remove_root
        root = make_root()
        _SLOT = Slot(0, root, Sandbox.detect("auto"), course.startup_timeout)

        def close(slot=_SLOT, root=root):
            slot.close()
            remove_root(root)
        atexit.register(close)
    return _SLOT


def milestone_of(course: config.Course, assignment: str) -> config.Milestone:
    for m in course.milestones:
        if assignment in (m.folder, m.id):
            return m
    raise config.ConfigError(f"nbgrader assignment {assignment!r} is not a milestone folder of course.yaml")


class GradeFiles(_Base):
    """Before the notebook runs: grade the student's files (the autograded folder nbgrader prepared:
    the submission, with the course's files restored) exactly as `course grade` does."""

    def preprocess(self, nb, resources):
        from autograder.grading.grade import grade
        from autograder.grading.submission import SubmissionError
        course = config.load()
        m = milestone_of(course, resources["nbgrader"]["assignment"])
        folder = Path(resources["metadata"]["path"])
        try:
            resources["course_result"] = grade(folder, m.id, course=course, slot=_slot(course))
        except SubmissionError as e:
            resources["course_result"] = e
        return nb, resources


class SandboxedExecute(_Execute):
    """nbgrader's Execute, with the notebook's kernel confined (nbkernel.SandboxedKernelManager)."""

    def __init__(self, **kwargs):
        from autograder.integrations.nbkernel import SandboxedKernelManager
        kwargs["kernel_manager_class"] = SandboxedKernelManager
        super().__init__(**kwargs)


class ApplyVerdicts(_Base):
    """After the notebook ran: every autograded cell shows the engine's verdict and nothing else."""

    def preprocess(self, nb, resources):
        from autograder.integrations.nbkernel import isolation
        result = resources.get("course_result")
        notes = [] if isinstance(result, Exception) or result is None else list(result.notes)
        kernel = isolation()
        if not kernel.isolated:
            notes.append(f"Notebook kernel: NOT isolated ({kernel.why_not}); resource limits only.")
        first = True
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            cell.outputs = verdict_outputs(result, meta.get("grade_id"), notes if first else [])
            first = False
        return nb, resources


def _stream(text: str, name: str = "stdout") -> dict:
    from nbformat.v4 import new_output
    return new_output("stream", name=name, text=text)


def verdict_outputs(result, group: str, notes: list[str]) -> list:
    """The outputs an autograded cell shows: a pass line, or an error nbgrader scores as 0."""
    from nbformat.v4 import new_output
    outputs = [_stream("".join(f"{n}\n" for n in notes))] if notes else []
    if result is None or isinstance(result, Exception):
        why = str(result) if result is not None else "the grader did not run"
        return outputs + [new_output("error", ename="NotGraded", evalue=f"check `{group}` was not graded: {why}",
                                     traceback=[f"NotGraded: check `{group}` was not graded: {why}"])]
    found = [c for c in result.checks if c.name == group]
    if not found:
        text = f"check `{group}` is not a check of milestone {result.milestone}"
        return outputs + [new_output("error", ename="NotGraded", evalue=text, traceback=[f"NotGraded: {text}"])]
    check = found[0]
    if check.internal_error:   # for the instructor: the autograded notebook keeps it, feedback drops it
        outputs.append(_stream(f"INSTRUCTOR: internal grader error in {result.milestone}/{group}:\n"
                               f"{check.internal_error}", "stderr"))
    if check.passed:
        extra = f"\n{check.note}" if check.note else ""
        return outputs + [_stream(f"check `{group}` passed: {check.score}/{check.max_score}{extra}\n")]
    text = f"check `{group}` failed ({check.score}/{check.max_score}): {check.message}"
    return outputs + [new_output("error", ename="CheckFailed", evalue=text, traceback=text.splitlines())]


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
    # Grading happens around nbgrader's execute step, never inside the student's kernel.
    from nbgrader.converters.autograde import Autograde
    steps = []
    for step in Autograde.class_traits()["autograde_preprocessors"].default():
        if getattr(step, "__name__", step) in ("Execute", "nbgrader.preprocessors.Execute"):
            steps += ["autograder.integrations.nbgrade.GradeFiles", "autograder.integrations.nbgrade.SandboxedExecute",
                      "autograder.integrations.nbgrade.ApplyVerdicts"]
        else:
            steps.append(step)
    c.Autograde.autograde_preprocessors = steps
    # Notebook cells only draw figures and run quick checks now: a minute each is plenty.
    c.Execute.timeout = 60
    c.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades",
        "nbgrader.preprocessors.ClearHiddenTests",
        "autograder.integrations.nbgrade.StudentFacingOutputs",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
    c.ExportApp.plugin_class = "autograder.integrations.nbgrade.PerCheckExport"
    os.environ.setdefault("MPLBACKEND", "Agg")


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
    header = ["student_id", *cells, "autograded", "written", "total", "max_score", "status",
              "submitted_at", "days_late", "late_percent", "late_penalty", "final_total"]   # course.yaml term.late
    nb_name = notebook.notebook_name(m)[: -len(".ipynb")]
    rows = []
    for student in sorted(gradebook.students, key=lambda s: s.id):
        row = {"student_id": student.id, "max_score": m.max_score + sum(w.points for w in m.written)}
        try:
            sub = gradebook.find_submission_notebook(nb_name, m.folder, student.id)
        except MissingEntry:
            rows.append({**row, **{k: 0 for k in cells}, "autograded": 0, "written": 0, "total": 0,
                         "status": "no submission", "submitted_at": "", "days_late": 0, "late_percent": 0,
                         "late_penalty": 0, "final_total": 0})
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
        blank = [w.id for w in m.written if w.id in grades and not grades[w.id].needs_manual_grade
                 and grades[w.id].manual_score is None and not grades[w.id].auto_score]
        if blank:                       # nbgrader scores an untouched answer cell 0 without asking anyone
            status.append("written answer left blank (scored 0): " + ", ".join(blank))
        row["autograded"] = _num(sum(row[k] for k in m.checks))
        row["written"] = _num(sum(row[w.id] for w in m.written))
        row["total"] = _num(row["autograded"] + row["written"])
        row["status"] = "; ".join(status) or "ok"
        row.update(_late_columns(gradebook, course, m, student.id, row["total"]))
        rows.append(row)
    return header, rows


def _late_columns(gradebook, course: config.Course, m: config.Milestone, student_id: str, total) -> dict:
    """course.yaml's late policy applied to nbgrader's submission time (collect's timestamp, UTC)."""
    import datetime as dt
    try:
        stamp = gradebook.find_submission(m.folder, student_id).timestamp
    except Exception:
        stamp = None
    if stamp is None or m.due is None:
        return {"submitted_at": "", "days_late": 0, "late_percent": 0, "late_penalty": 0, "final_total": total}
    when = (stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)).astimezone(course.tz)
    days = course.late.days_late(when, m.due)
    pct = course.late.percent(days)
    penalty = round(float(total) * pct / 100, 2)
    return {"submitted_at": when.isoformat(timespec="seconds"), "days_late": days, "late_percent": pct,
            "late_penalty": _num(penalty), "final_total": _num(float(total) - penalty)}


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
