"""The flags every output carries: not attempted (the released stub unchanged), late, integrity.

"Not attempted" compares each submitted file with the stub students received,
`assignments/<folder>/<file>`, ignoring line endings and trailing white space: a student who
handed the stub back gets 0 like before, and the instructor sees why at a glance.
"""
from __future__ import annotations

from pathlib import Path

from autograder import config

MAX_COMPARE = 2_000_000


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).strip()


def not_attempted(folder: Path | None, m: config.Milestone, course: config.Course) -> bool:
    """True when every student file of m in `folder` is the released stub (regular files only)."""
    if folder is None:
        return False
    for name in m.files:
        stub, mine = course.root / "assignments" / m.folder / name, Path(folder) / name
        try:
            if mine.is_symlink() or not mine.is_file() or mine.stat().st_size > MAX_COMPARE:
                return False
            if _normal(mine.read_text(encoding="utf-8", errors="replace")) != _normal(stub.read_text(encoding="utf-8")):
                return False
        except OSError:
            return False
    return True


def flag_list(*, status: str = "graded", not_attempted: bool = False, late_days: int = 0, late_percent: float = 0,
              integrity: str = "") -> list[str]:
    """Short flags, in a fixed order: `not attempted`, `late 2d -20%`, `integrity: tamper`, `missing`..."""
    out = []
    if status in ("missing", "refused", "internal_error", "no submission"):
        out.append(status.replace("_", " "))
    if not_attempted:
        out.append("not attempted")
    if late_days:
        out.append(f"late {late_days}d -{late_percent:g}%")
    if integrity:
        out.append(f"integrity: {integrity}")
    return out
