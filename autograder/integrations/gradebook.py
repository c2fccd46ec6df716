"""One gradebook for the term: a row per student, columns per milestone, from every route.

    course gradebook RESULTS... --out DIR [--roster roster.csv]

RESULTS are `grade-class --out` folders (grades.csv: autograded score, late percent, flags) and
nbgrader score exports (`course export-scores` / `nbgrader export`: a column per check and written
question; the milestone is the one whose checks and questions the header names). For each student
and milestone: `autograded` (grade-class when given, else nbgrader), `written` (nbgrader's hand
grades; blank when no nbgrader export of that milestone was given), `late_penalty` (the late percent
recorded when grading, applied to autograded + written), `total`, and the flags. A student who is
in any input or in the roster is one row; a milestone they have no result for counts 0 and is
flagged "no submission". DIR receives gradebook.csv, gradebook.json, canvas.csv, moodle.csv and
class.html (lms_export.py, classpage.py). None of it is for students: it lists everyone's grades.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from autograder import config
from autograder.grading.report import clean, write_json


@dataclass
class Cell:
    """One student's result for one milestone."""
    autograded: float | None = None
    written: float | None = None
    late_percent: float = 0.0
    flags: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)     # "grade-class", "nbgrader"

    @property
    def late_penalty(self) -> float:
        return round(((self.autograded or 0) + (self.written or 0)) * self.late_percent / 100, 2)

    @property
    def total(self) -> float:
        return round((self.autograded or 0) + (self.written or 0) - self.late_penalty, 2)


@dataclass
class Gradebook:
    milestones: list[config.Milestone]                   # those with a result, in course order
    written_graded: set[str]                             # milestone ids with an nbgrader export
    cells: dict[str, dict[str, Cell]]                    # student -> milestone id -> cell
    roster: dict[str, dict[str, str]]                    # student -> roster row (may be empty)
    summaries: dict[str, dict]                           # milestone id -> grade-class summary.json

    def max_score(self, m: config.Milestone) -> int:
        return m.max_score + (sum(w.points for w in m.written) if m.id in self.written_graded else 0)

    @property
    def max_total(self) -> int:
        return sum(self.max_score(m) for m in self.milestones)

    def total(self, student: str) -> float:
        return round(sum(self.cell(student, m.id).total for m in self.milestones), 2)

    def cell(self, student: str, mid: str) -> Cell:
        c = self.cells.get(student, {}).get(mid)
        return c if c is not None else Cell(flags=["no submission"])

    def flags(self, student: str) -> list[str]:
        out = [f"{m.id}: {f}" for m in self.milestones for f in self.cell(student, m.id).flags]
        if self.roster and student not in self.roster:
            out.append("not on the roster")
        return out

    @property
    def students(self) -> list[str]:
        return sorted(set(self.cells) | set(self.roster))


def _num(x) -> float | None:
    try:
        return float(x) if str(x).strip() != "" else None
    except ValueError:
        return None


def _milestone_of_export(header: list[str], course: config.Course, path: Path) -> config.Milestone:
    cols = set(header)
    for m in course.milestones:
        if set(m.checks) | {w.id for w in m.written} <= cols:
            return m
    raise ValueError(f"{path}: its columns name the checks of no milestone of course.yaml: expected the CSV of "
                     f"`course export-scores` (student_id, one column per check and written question, ...)")


def _read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        r = csv.DictReader(f)
        return list(r.fieldnames or []), list(r)


def _add_grade_class(book: dict, run: Path, course: config.Course, summaries: dict) -> str:
    try:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        m = course.milestone(summary["milestone"])
    except (OSError, ValueError, KeyError, config.ConfigError) as e:
        raise ValueError(f"{run}: not a `course grade-class --out` folder (summary.json: {e})") from None
    summaries[m.id] = summary
    _, rows = _read_csv(run / "grades.csv")
    for row in rows:
        c = book.setdefault(row["student"], {}).setdefault(m.id, Cell())
        if "grade-class" in c.sources:
            raise ValueError(f"{run}: {row['student']!r} of {m.id} is in two grade-class runs: give the gradebook one "
                             f"run per milestone")
        c.autograded = _num(row["score"]) or 0.0
        c.late_percent = _num(row.get("late_percent")) or 0.0
        c.flags += [f for f in (row.get("flags") or "").split("; ") if f and f not in c.flags]
        c.sources.append("grade-class")
    return m.id


def _add_nbgrader(book: dict, path: Path, course: config.Course) -> str:
    header, rows = _read_csv(path)
    if "student_id" not in header:
        raise ValueError(f"{path}: expected a student_id column (the CSV of `course export-scores`)")
    m = _milestone_of_export(header, course, path)
    for row in rows:
        c = book.setdefault(row["student_id"], {}).setdefault(m.id, Cell())
        auto = _num(row.get("autograded"))
        status = row.get("status", "")
        if "no submission" in status:
            if "grade-class" not in c.sources:
                c.flags.append("no submission (nbgrader)")
            c.sources.append("nbgrader")
            continue
        if "grade-class" in c.sources:
            if auto is not None and c.autograded is not None and abs(auto - c.autograded) > 1e-9:
                c.flags.append(f"routes disagree: grade-class {c.autograded:g}, nbgrader {auto:g}")
        else:
            c.autograded = auto or 0.0
            c.late_percent = _num(row.get("late_percent")) or 0.0
        c.written = _num(row.get("written")) or 0.0
        blank = [w.id for w in m.written if row.get(w.id) in ("", "0", "0.0")]
        if status and status != "ok":
            c.flags += [x.strip() for x in status.split(";") if x.strip() and x.strip() not in c.flags]
        if m.written and len(blank) == len(m.written):
            c.flags.append("written answers all 0")
        c.sources.append("nbgrader")
    return m.id


def read_roster(path: Path | str) -> dict[str, dict[str, str]]:
    """{student (as in the submissions): row}; columns: student, then any of name, canvas_id,
    sis_user_id, sis_login_id, section, username, email (LMS exports use them)."""
    header, rows = _read_csv(Path(path))
    if "student" not in header:
        raise ValueError(f"{path}: expected a `student` column (the name as in the submissions)")
    return {r["student"].strip(): {k: (v or "").strip() for k, v in r.items() if k} for r in rows if r["student"].strip()}


def build(inputs: list[Path | str], course: config.Course, roster: dict | None = None) -> Gradebook:
    book: dict[str, dict[str, Cell]] = {}
    summaries: dict[str, dict] = {}
    seen, written = set(), set()
    for p in map(Path, inputs):
        if p.is_dir() and (p / "grades.csv").is_file():
            seen.add(_add_grade_class(book, p, course, summaries))
        elif p.is_file() and p.suffix.lower() == ".csv":
            mid = _add_nbgrader(book, p, course)
            seen.add(mid)
            written.add(mid)
        else:
            raise ValueError(f"{p}: expected a `course grade-class --out` folder (with grades.csv) or the CSV of "
                             f"`course export-scores`")
    return Gradebook([m for m in course.milestones if m.id in seen], written, book, roster or {}, summaries)


def _n(x: float) -> float | int:
    """20.0 -> 20, 17.5 stays: what a person and an LMS read."""
    return int(x) if float(x).is_integer() else round(float(x), 2)


def columns(gb: Gradebook) -> list[str]:
    cols = ["student"]
    for m in gb.milestones:
        cols += [f"{m.id} autograded", f"{m.id} written", f"{m.id} late penalty", f"{m.id} total", f"{m.id} flags"]
    return cols + ["total", "max_total", "flags"]


def rows(gb: Gradebook) -> list[dict]:
    out = []
    for s in gb.students:
        row = {"student": clean(s, one_line=True)}
        for m in gb.milestones:
            c = gb.cell(s, m.id)
            row.update({f"{m.id} autograded": _n(c.autograded or 0),
                        f"{m.id} written": "" if c.written is None else _n(c.written),
                        f"{m.id} late penalty": _n(c.late_penalty), f"{m.id} total": _n(c.total),
                        f"{m.id} flags": clean("; ".join(c.flags), one_line=True)})
        row.update(total=_n(gb.total(s)), max_total=gb.max_total, flags=clean("; ".join(gb.flags(s)), one_line=True))
        out.append(row)
    return out


def write(gb: Gradebook, course: config.Course, out: Path | str, force: bool = False) -> list[Path]:
    """Write every gradebook output into `out` (refused when it holds files, unless force)."""
    from autograder.integrations import classpage, lms_export
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise FileExistsError(f"{out} is not empty: pass --force to replace the gradebook there, or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    data = rows(gb)
    with open(out / "gradebook.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns(gb))
        w.writeheader()
        w.writerows(data)
    write_json(out / "gradebook.json", {
        "milestones": [{"id": m.id, "title": m.title, "max_score": gb.max_score(m),
                        "written_graded": m.id in gb.written_graded,
                        "due": m.due.isoformat() if m.due else None} for m in gb.milestones],
        "late_policy": course.late.describe(), "rows": data})
    written = [out / "gradebook.csv", out / "gradebook.json",
               lms_export.write_canvas(gb, out / "canvas.csv"), lms_export.write_moodle(gb, out / "moodle.csv"),
               classpage.write(gb, course, out / "class.html")]
    return written
