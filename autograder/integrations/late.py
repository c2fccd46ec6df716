"""When each student submitted, and what the late policy of course.yaml (`term.late`) takes.

Submission times, first found wins:
1. an LMS export's column (`grade-class --times FILE`: a CSV with a student column and a time column,
   e.g. Moodle's grading worksheet "Last modified (submission)" or a plain `student,submitted_at`);
2. nbgrader's `timestamp.txt` beside the submitted files (written by `nbgrader collect`, in UTC);
3. a zip's entry times of the graded files (the newest; zip times carry no zone: the course's);
4. the file times of the graded files (the newest modification time, links never followed).
A student with no time (say, a refused entry) is not charged; the report says "unknown".
"""
from __future__ import annotations

import csv
import datetime as dt
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from autograder import config
from autograder.grading.submission import open_submitted

STUDENT_COLUMNS = ("student", "student_id", "username", "login", "sis login id", "identifier", "full name", "name")
TIME_COLUMNS = ("submitted_at", "submitted", "submission time", "last modified (submission)", "timestamp")


@dataclass(frozen=True)
class Late:
    submitted: dt.datetime | None     # aware
    source: str                       # where the time came from ("zip entry times", ...)
    due: dt.datetime | None
    days: int = 0                     # started days past due + grace
    percent: float = 0.0              # share of the score taken

    def penalty(self, score: float) -> float:
        return round(score * self.percent / 100, 2)

    @property
    def is_late(self) -> bool:
        return self.days > 0

    def describe(self, score: float | None = None, policy: config.LatePolicy | None = None) -> str:
        """One sentence for the student and the instructor."""
        if self.due is None:
            return "No due date in course.yaml: no late policy applied."
        when = self.submitted.isoformat(timespec="minutes") if self.submitted else "unknown"
        head = f"Submitted {when} ({self.source}); due {self.due.isoformat(timespec='minutes')}"
        if self.submitted is None:
            return head + ": no late penalty applied."
        if not self.days:
            return head + ": on time."
        cost = f"-{self.percent:g}%"
        if score is not None:
            cost += f" ({self.penalty(score):g} point(s))"
        rule = f" [{policy.describe()}]" if policy else ""
        return head + f": {self.days} day(s) late, {cost}.{rule}"


def parse_time(text: str, tz: dt.tzinfo) -> dt.datetime:
    """ISO times ("2026-09-21T08:00", "2026-09-21 08:00:00.123 UTC", "...+02:00"); no zone: `tz`."""
    t = text.strip()
    zone = None
    if t.endswith((" UTC", "Z")):
        t, zone = t.removesuffix(" UTC").removesuffix("Z"), dt.timezone.utc
    d = dt.datetime.fromisoformat(t)
    if d.tzinfo is None:
        d = d.replace(tzinfo=zone or tz)
    return d


def read_times(path: Path | str, tz: dt.tzinfo) -> dict[str, dt.datetime]:
    """{student: time} from an LMS export CSV; ValueError naming the file and row for a bad one."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no rows")
    header = {h.strip().lower(): h for h in rows[0].keys() if h}
    who = next((header[c] for c in STUDENT_COLUMNS if c in header), None)
    when = next((header[c] for c in TIME_COLUMNS if c in header), None)
    if who is None or when is None:
        raise ValueError(f"{path}: expected a student column (one of {', '.join(STUDENT_COLUMNS)}) and a time "
                         f"column (one of {', '.join(TIME_COLUMNS)}); found {', '.join(rows[0])}")
    out = {}
    for n, row in enumerate(rows, start=2):
        if not (row.get(when) or "").strip() or (row[when].strip() in ("-", "No submission")):
            continue
        try:
            out[row[who].strip()] = parse_time(row[when], tz)
        except ValueError:
            raise ValueError(f"{path}, row {n}: {row[when]!r} is not a date and time like 2026-09-21T08:00") from None
    return out


def _names(m: config.Milestone) -> set[str]:
    return set(m.files) | {Path(f).stem + ".ipynb" for f in m.files}


def _zip_time(zpath: Path, m: config.Milestone, tz: dt.tzinfo) -> dt.datetime | None:
    from autograder.integrations.batch.collect import MAX_ZIP_BYTES, _check_directory, _zip_members
    with open_submitted(zpath, MAX_ZIP_BYTES) as archive:
        _check_directory(archive, zpath.name)
        with zipfile.ZipFile(archive) as z:
            stamps = [info.date_time for name, info in _zip_members(z, zpath.name).items()
                      if name.rpartition("/")[2] in _names(m)]
    return dt.datetime(*max(stamps), tzinfo=tz) if stamps else None


def _folder_time(folder: Path, entry: Path, m: config.Milestone, tz: dt.tzinfo) -> tuple[dt.datetime | None, str]:
    for where in (folder, entry):
        stamp = where / "timestamp.txt"
        if stamp.is_file() and not stamp.is_symlink() and stamp.stat().st_size < 200:
            try:
                return parse_time(stamp.read_text(encoding="utf-8"), dt.timezone.utc), "nbgrader timestamp.txt"
            except ValueError:
                pass
    times = [os.lstat(folder / n).st_mtime for n in _names(m) if os.path.lexists(folder / n)]
    if not times:
        return None, "no file"
    return dt.datetime.fromtimestamp(max(times), tz), "file times"


def submission_time(found, m: config.Milestone, course: config.Course,
                    times: dict[str, dt.datetime] | None = None) -> tuple[dt.datetime | None, str]:
    """(time, where it came from) for one collected student (collect.Found)."""
    if times and found.student in times:
        return times[found.student], "LMS export"
    entry = found.entry
    try:
        if entry is None or entry.is_symlink():
            return None, "unknown"
        if entry.is_file():
            return _zip_time(entry, m, course.tz), "zip entry times"
        from autograder.integrations.batch.collect import _find_folder
        folder = _find_folder(entry, m)
        return _folder_time(folder, entry, m, course.tz) if folder else (None, "unknown")
    except Exception:        # a damaged zip was refused by collect already: no time, no penalty
        return None, "unknown"


def assess(found, m: config.Milestone, course: config.Course, times: dict[str, dt.datetime] | None = None) -> Late:
    submitted, source = submission_time(found, m, course, times)
    submitted = submitted.astimezone(course.tz) if submitted else None
    if m.due is None or submitted is None:
        return Late(submitted, source, m.due)
    days = course.late.days_late(submitted, m.due)
    return Late(submitted, source, m.due, days, course.late.percent(days))


def schedule_text(course: config.Course) -> str:
    """`course term`: the dates of course.yaml, and what is open now."""
    now = dt.datetime.now(course.tz)
    lines = [f"{course.title}: dates in {course.timezone}. Late policy: {course.late.describe()}.", "",
             f"{'milestone':<10} {'release':<17} {'due':<17} {'late work until':<17} now"]
    fmt = "%Y-%m-%d %H:%M"
    for m in course.milestones:
        end = course.late_window_end(m)
        state = ("not released" if m.release and now < m.release else
                 "open" if m.due and now <= m.due else
                 "late window" if end and now <= end else "closed" if m.due else "")
        lines.append(f"{m.id:<10} {m.release.strftime(fmt) if m.release else '-':<17} "
                     f"{m.due.strftime(fmt) if m.due else '-':<17} {end.strftime(fmt) if end else '-':<17} {state}")
    lines += ["", "A milestone's folder holds the reference of the milestones it builds on: course.yaml cannot "
                  "release it before their late work closes."]
    return "\n".join(lines)
