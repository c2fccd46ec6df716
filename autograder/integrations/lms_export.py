"""The gradebook as the CSV files Canvas and Moodle import.

Canvas (Grades > Import): the columns of Canvas's own gradebook export, `Student, ID, SIS User ID,
SIS Login ID, Section`, then one column per assignment, and a `Points Possible` row. Canvas matches a
row by ID, SIS User ID or SIS Login ID: give `course gradebook --roster` a CSV with the canvas_id /
sis_user_id / sis_login_id of each student; without one, the student's name as submitted goes into
SIS Login ID (right when submissions are named by login). A column named like an existing assignment,
`m1 Scaled dot-product ... (12345)`, updates it; another name makes Canvas offer a new assignment.
Moodle (Grades > Import > CSV file): a user column (`Username`, or `Email address` from the roster)
and a column per grade item, mapped in Moodle's import form. Both carry final totals, after late
penalties; the flags stay in the course's gradebook.csv (not for students' eyes).
"""
from __future__ import annotations

import csv
from pathlib import Path

from autograder.grading.report import clean


def _safe(value) -> str:
    """A spreadsheet never runs a cell: text starting with = + - @ gets a leading apostrophe."""
    text = clean(str(value), one_line=True)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def assignment_name(m) -> str:
    return f"{m.id} {m.title}"


def write_canvas(gb, path: Path) -> Path:
    head = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] + [assignment_name(m) for m in gb.milestones]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerow(["    Points Possible", "", "", "", ""] + [gb.max_score(m) for m in gb.milestones])
        for s in gb.students:
            r = gb.roster.get(s, {})
            w.writerow([_safe(r.get("name") or s), _safe(r.get("canvas_id", "")), _safe(r.get("sis_user_id", "")),
                        _safe(r.get("sis_login_id") or s), _safe(r.get("section", ""))]
                       + [f"{gb.cell(s, m.id).total:g}" for m in gb.milestones])
    return Path(path)


def write_moodle(gb, path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Username", "Email address"] + [assignment_name(m) for m in gb.milestones])
        for s in gb.students:
            r = gb.roster.get(s, {})
            w.writerow([_safe(r.get("username") or s), _safe(r.get("email", ""))]
                       + [f"{gb.cell(s, m.id).total:g}" for m in gb.milestones])
    return Path(path)
