"""What changed between two runs of `grade-class` (after a grader fix, a new seed, a late list).

    course regrade-diff OLD NEW [--json FILE]

OLD and NEW are `grade-class --out` folders (`grade-class --force` keeps the earlier run in
NEW/previous/). Per student (matched by `key`): the score and final score before and after, the
status and flags that changed, and for every check group whose points or message changed, the
points before and after and the new message: why the score moved, in the words the student reads.
"""
from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder.grading.report import clean


@dataclass
class GroupChange:
    group: str
    old_points: float | None
    new_points: float | None
    max_points: float | None
    old_message: str
    new_message: str


@dataclass
class StudentChange:
    student: str
    key: str
    what: str                                   # "changed", "added" (only in NEW), "removed" (only in OLD)
    old_score: float | None = None
    new_score: float | None = None
    old_final: float | None = None
    new_final: float | None = None
    fields: dict[str, tuple[str, str]] = field(default_factory=dict)    # status, flags, seed: (old, new)
    groups: list[GroupChange] = field(default_factory=list)


def _num(x) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _load(run: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """(rows by key, {key: {group: test}}) of a grade-class output folder."""
    run = Path(run)
    grades = run / "grades.csv"
    if not grades.is_file():
        raise FileNotFoundError(f"{run} holds no grades.csv: expected a `course grade-class --out` folder")
    with open(grades, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if "key" not in (reader.fieldnames or ()):
            raise ValueError(f"{grades} has no `key` column: it was not written by `course grade-class` (or by an "
                             f"older version), so there is nothing to compare it with")
        rows = {r["key"]: r for r in reader}
    tests = {}
    for key in rows:
        p = run / "results" / key / "results.json"
        try:
            data = json.loads(p.read_text(encoding="utf-8")) if p.is_file() and not p.is_symlink() else {}
        except ValueError:
            data = {}
        tests[key] = {t["name"]: t for t in data.get("tests", []) if isinstance(t, dict) and "name" in t}
    return rows, tests


def diff(old: Path | str, new: Path | str) -> list[StudentChange]:
    """Every student whose grade, status, flags or any group's points or message differ."""
    old_rows, old_tests = _load(Path(old))
    new_rows, new_tests = _load(Path(new))
    out = []
    for key in sorted(set(old_rows) | set(new_rows)):
        o, n = old_rows.get(key), new_rows.get(key)
        if o is None or n is None:
            row = n or o
            out.append(StudentChange(row["student"], key, "added" if o is None else "removed",
                                     _num(o["score"]) if o else None, _num(n["score"]) if n else None,
                                     _num(o.get("final_score")) if o else None, _num(n.get("final_score")) if n else None))
            continue
        ch = StudentChange(n["student"], key, "changed", _num(o["score"]), _num(n["score"]),
                           _num(o.get("final_score", o["score"])), _num(n.get("final_score", n["score"])))
        for name in ("status", "flags", "integrity", "submitted_at"):      # the seed: run_header, once
            if o.get(name, "") != n.get(name, ""):
                ch.fields[name] = (o.get(name, ""), n.get(name, ""))
        ot, nt = old_tests.get(key, {}), new_tests.get(key, {})
        for g in list(nt) + [g for g in ot if g not in nt]:
            a, b = ot.get(g, {}), nt.get(g, {})
            if (a.get("score") != b.get("score") or a.get("max_score") != b.get("max_score")
                    or a.get("output", "") != b.get("output", "")):
                ch.groups.append(GroupChange(g, _num(a.get("score")), _num(b.get("score")),
                                             _num(b.get("max_score", a.get("max_score"))),
                                             clean(a.get("output", ""), one_line=False), clean(b.get("output", ""))))
        if ch.fields or ch.groups or ch.old_score != ch.new_score or ch.old_final != ch.new_final:
            out.append(ch)
    return out


def run_header(old: Path | str, new: Path | str) -> str:
    """What changed for the whole class (milestone, seed, sandbox), from the two summary.json."""
    def summary(run):
        try:
            return json.loads((Path(run) / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
    a, b = summary(old), summary(new)
    moved = [f"{k}: {a.get(k)} -> {b.get(k)}" for k in ("milestone", "seed", "sandbox", "max_score", "late_policy")
             if a.get(k) != b.get(k)]
    return ("Whole class: " + "; ".join(moved)) if moved else "Same milestone, seed, sandbox, points and late policy."


def _pts(x) -> str:
    return "-" if x is None else f"{x:g}"


def diff_text(changes: list[StudentChange], brief: bool = False) -> str:
    if not changes:
        return "no student's grade, flags or feedback changed."
    moved = [c for c in changes if c.what == "changed" and c.old_final != c.new_final]
    if brief:
        return (f"{len(changes)} student(s) changed ({len(moved)} final score(s) moved); "
                f"`course regrade-diff` on the two folders lists them.")
    lines = [f"# Regrade: {len(changes)} student(s) changed, {len(moved)} final score(s) moved", ""]
    for c in changes:
        if c.what != "changed":
            lines.append(f"## {c.student} ({c.key}): {c.what}, score {_pts(c.old_score if c.what == 'removed' else c.new_score)}")
            continue
        lines.append(f"## {c.student} ({c.key}): {_pts(c.old_score)} -> {_pts(c.new_score)}"
                     f" (final {_pts(c.old_final)} -> {_pts(c.new_final)})")
        for name, (a, b) in c.fields.items():
            lines.append(f"- {name}: {a or '(none)'} -> {b or '(none)'}")
        for g in c.groups:
            why = clean(g.new_message.splitlines()[0] if g.new_message else "", one_line=True)[:300]
            lines.append(f"- {g.group}: {_pts(g.old_points)} -> {_pts(g.new_points)} / {_pts(g.max_points)}: {why}")
        lines.append("")
    return "\n".join(lines).rstrip()


def diff_json(changes: list[StudentChange]) -> list[dict]:
    return [asdict(c) for c in changes]
