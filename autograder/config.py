"""Load and validate course.yaml, the single source of course facts.

Everything the build and the grader need to know about milestones (files, dependencies, points,
forbidden APIs, time limits) comes from here. A bad file fails loudly, naming the key.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

ROOT = Path(__file__).resolve().parent.parent
COURSE_FILE = ROOT / "course.yaml"


class ConfigError(ValueError):
    """course.yaml is missing, malformed, or holds a value of the wrong kind."""


@dataclass(frozen=True)
class Written:
    """A question answered in prose in the milestone's notebook, graded by hand (nbgrader)."""
    id: str
    points: int
    prompt: str


@dataclass(frozen=True)
class Forbidden:
    """APIs students may not call: in one function (`where`) or in all of them ("all")."""
    where: str
    names: tuple[str, ...]     # fnmatch patterns over torch function names and "aten::" ops
    plain: str                 # what students read


@dataclass(frozen=True)
class Milestone:
    id: str                                 # "m1"
    folder: str                             # its folder under solutions/ and assignments/
    title: str
    files: tuple[str, ...]                  # the student files it grades
    depends_on: tuple[str, ...]             # earlier milestones whose reference files it is graded with
    probe_timeout: float                    # time_limits.probe: seconds for one call into student code
    total_timeout: float                    # time_limits.total: seconds for the whole milestone
    forbidden: tuple[Forbidden, ...]
    checks: dict[str, int]                  # group name -> points, in report order
    written: tuple[Written, ...] = ()       # hand-graded questions of the notebook
    about: dict[str, str] = field(default_factory=dict)   # group name -> what it checks, for students
    rules: tuple[str, ...] = ()             # the rules that cost points, in students' words
    provided: tuple[str, ...] = ()          # course files students receive as they are (e.g. data.py)
    release: dt.datetime | None = None      # when students get the folder (aware, course timezone)
    due: dt.datetime | None = None          # deadline; later submissions follow the course's late policy

    @property
    def modules(self) -> tuple[str, ...]:
        """Module names students edit ("attention" for attention.py)."""
        return tuple(Path(f).stem for f in self.files)

    @property
    def max_score(self) -> int:
        return sum(self.checks.values())

    def forbidden_for(self, function: str) -> tuple[Forbidden, ...]:
        return tuple(f for f in self.forbidden if f.where in ("all", function))


@dataclass(frozen=True)
class LatePolicy:
    """course.yaml `term.late`: after `due` + `grace_minutes`, each started day late costs
    `percent_per_day` % of the score, at most `cap_percent` %; later than `last_day` days the
    submission gets no points (and is still graded, for the student's feedback)."""
    grace_minutes: int = 0
    percent_per_day: float = 0.0
    cap_percent: float = 100.0
    last_day: int | None = None

    def days_late(self, submitted: dt.datetime, due: dt.datetime) -> int:
        """Started days past the deadline, 0 within the grace period."""
        over = submitted - due
        if over <= dt.timedelta(minutes=self.grace_minutes):
            return 0
        return -(-over // dt.timedelta(days=1))      # ceiling: 1 minute late is 1 day late

    def percent(self, days: int) -> float:
        """Share of the points taken for `days` started days late."""
        if days <= 0:
            return 0.0
        if self.last_day is not None and days > self.last_day:
            return 100.0
        return min(self.cap_percent, days * self.percent_per_day)

    def describe(self) -> str:
        last = (f"; more than {self.last_day} day(s) late: no points" if self.last_day is not None else "")
        return (f"{self.grace_minutes} min grace, then {self.percent_per_day:g}% of the score per started day "
                f"late, at most {self.cap_percent:g}%{last}")


@dataclass(frozen=True)
class Course:
    title: str
    seed: int                               # grading.seed: the default seed of the hidden inputs
    startup_timeout: float                  # grading.startup_timeout: seconds a worker may take to start
    milestones: tuple[Milestone, ...]       # in course.yaml's order
    root: Path                              # the folder holding course.yaml
    timezone: str = "UTC"                   # `term.timezone`: how dates without an offset are read
    late: LatePolicy = field(default_factory=LatePolicy)

    @property
    def tz(self) -> dt.tzinfo:
        return ZoneInfo(self.timezone)

    def late_window_end(self, m: Milestone) -> dt.datetime | None:
        """The last moment a submission of m can still earn points (None: no due date)."""
        if m.due is None:
            return None
        if self.late.last_day is not None:
            return m.due + dt.timedelta(days=self.late.last_day, minutes=self.late.grace_minutes)
        return m.due + dt.timedelta(minutes=self.late.grace_minutes)

    def milestone(self, mid: str) -> Milestone:
        for m in self.milestones:
            if m.id == mid:
                return m
        known = ", ".join(m.id for m in self.milestones)
        raise ConfigError(f"unknown milestone {mid!r}; course.yaml defines: {known}")

    def dependencies(self, m: Milestone) -> list[Milestone]:
        """Every earlier milestone m imports, directly or through another, in course order."""
        wanted: set[str] = set()
        todo = list(m.depends_on)
        while todo:
            d = todo.pop()
            if d not in wanted:
                wanted.add(d)
                todo.extend(self.milestone(d).depends_on)
        return [x for x in self.milestones if x.id in wanted]


def _get(mapping: dict, key: str, kind, where: str):
    if not isinstance(mapping, dict) or key not in mapping:
        raise ConfigError(f"{where}: missing key {key!r}")
    value = mapping[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        name = getattr(kind, "__name__", str(kind))
        raise ConfigError(f"{where}.{key}: expected {name}, got {type(value).__name__} ({value!r})")
    return value


def _str_list(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def _forbidden(raw, where: str) -> tuple[Forbidden, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of {{in, names, plain}}")
    out = []
    for i, item in enumerate(raw):
        w = f"{where}[{i}]"
        out.append(Forbidden(_get(item, "in", str, w), _str_list(_get(item, "names", list, w), f"{w}.names"),
                             _get(item, "plain", str, w).strip()))
    return tuple(out)


def _checks(raw, where: str) -> tuple[dict[str, int], dict[str, str]]:
    """`name: {points, about}`: every group says what it checks, for the students' README."""
    if not raw:
        raise ConfigError(f"{where}: expected at least one check group")
    points, about = {}, {}
    for name, value in raw.items():
        if not isinstance(value, dict):
            raise ConfigError(f"{where}.{name}: expected {{points: N, about: \"what it checks\"}}, got {value!r}")
        pts = value.get("points")
        if not isinstance(pts, int) or isinstance(pts, bool) or pts <= 0:
            raise ConfigError(f"{where}.{name}.points: expected a positive whole number of points, got {pts!r}")
        points[str(name)] = pts
        about[str(name)] = _get(value, "about", str, f"{where}.{name}").strip()
    return points, about


def _milestone(raw, index: int, earlier: list[str], rules: dict[str, str], tz: dt.tzinfo = dt.timezone.utc) -> Milestone:
    where = f"milestones[{index}]"
    mid = _get(raw, "id", str, where)
    where = f"milestones[{index}] ({mid})"
    if not re.fullmatch(r"m\d+", mid):
        raise ConfigError(f"{where}.id: expected 'm' followed by a number, got {mid!r}")
    folder = _get(raw, "folder", str, where)
    if not re.fullmatch(r"[A-Za-z0-9_]+", folder):
        raise ConfigError(f"{where}.folder: expected letters, digits and '_', got {folder!r}")
    files = _str_list(_get(raw, "files", list, where), f"{where}.files")
    provided = _str_list(raw["provided"], f"{where}.provided") if raw.get("provided") else ()
    for f in files + provided:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.py", f):
            raise ConfigError(f"{where}.files: expected plain module file names like 'attention.py', got {f!r}")
    if set(files) & set(provided):
        raise ConfigError(f"{where}.provided: {sorted(set(files) & set(provided))} cannot be a student file too")
    deps = _str_list(raw.get("depends_on", []) or [], f"{where}.depends_on")
    for d in deps:
        if d not in earlier:
            raise ConfigError(f"{where}.depends_on: {d!r} is not an earlier milestone (earlier: {earlier})")
    limits = _get(raw, "time_limits", dict, where)
    probe = _get(limits, "probe", float, f"{where}.time_limits")
    total = _get(limits, "total", float, f"{where}.time_limits")
    if not 0 < probe <= total:
        raise ConfigError(f"{where}.time_limits: expected 0 < probe <= total, got probe={probe}, total={total}")
    forbidden = _forbidden(raw.get("forbidden", []) or [], f"{where}.forbidden")
    checks, about = _checks(_get(raw, "checks", dict, where), f"{where}.checks")
    title = raw.get("title", mid)
    written = _written(raw.get("written", []) or [], f"{where}.written", checks)
    rule_ids = _str_list(raw.get("rules", []) or [], f"{where}.rules") if raw.get("rules") else ()
    unknown = [r for r in rule_ids if r not in rules]
    if unknown:
        raise ConfigError(f"{where}.rules: {unknown} are not rules of course.yaml (known: {sorted(rules)})")
    release = _date(raw.get("release"), f"{where}.release", tz)
    due = _date(raw.get("due"), f"{where}.due", tz)
    if release and due and due <= release:
        raise ConfigError(f"{where}.due: {due.isoformat()} is not after the release {release.isoformat()}")
    return Milestone(mid, folder, str(title), files, deps, probe, total, forbidden, checks, written, about,
                     tuple(rules[r] for r in rule_ids), provided, release, due)


def _date(value, where: str, tz: dt.tzinfo) -> dt.datetime | None:
    """A date (`2026-10-05`: the end of that day) or a date and time; without an offset, in `tz`."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        d = value
    elif isinstance(value, dt.date):
        d = dt.datetime.combine(value, dt.time(23, 59))
    elif isinstance(value, str):
        try:
            d = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ConfigError(f"{where}: expected a date like 2026-10-05 or 2026-10-05T23:59, got {value!r}") from None
    else:
        raise ConfigError(f"{where}: expected a date like 2026-10-05 or 2026-10-05T23:59, got {value!r}")
    return d.replace(tzinfo=tz) if d.tzinfo is None else d


def _term(raw, where: str = "term") -> tuple[str, LatePolicy]:
    if raw is None:
        return "UTC", LatePolicy()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with timezone and late")
    tzname = str(raw.get("timezone", "UTC"))
    try:
        ZoneInfo(tzname)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where}.timezone: unknown time zone {tzname!r} (e.g. UTC, Europe/Berlin)") from None
    late = raw.get("late") or {}
    if not isinstance(late, dict):
        raise ConfigError(f"{where}.late: expected {{grace_minutes, percent_per_day, cap_percent, last_day}}")
    unknown = set(late) - {"grace_minutes", "percent_per_day", "cap_percent", "last_day"}
    if unknown:
        raise ConfigError(f"{where}.late: unknown key(s) {sorted(unknown)}")
    grace = int(_get(late, "grace_minutes", int, f"{where}.late")) if "grace_minutes" in late else 0
    per_day = _get(late, "percent_per_day", float, f"{where}.late") if "percent_per_day" in late else 0.0
    cap = _get(late, "cap_percent", float, f"{where}.late") if "cap_percent" in late else 100.0
    last = _get(late, "last_day", int, f"{where}.late") if late.get("last_day") is not None else None
    if grace < 0 or not 0 <= per_day <= 100 or not 0 <= cap <= 100 or (last is not None and last < 0):
        raise ConfigError(f"{where}.late: expected grace_minutes >= 0, 0 <= percent_per_day <= 100, "
                          f"0 <= cap_percent <= 100, last_day >= 0; got {late!r}")
    return tzname, LatePolicy(grace, per_day, cap, last)


def _written(items, where: str, checks: dict) -> tuple[Written, ...]:
    if not isinstance(items, list):
        raise ConfigError(f"{where}: expected a list of {{id, points, prompt}}")
    out: list[Written] = []
    for i, item in enumerate(items):
        w = f"{where}[{i}]"
        qid = _get(item, "id", str, w)
        if not re.fullmatch(r"[A-Za-z0-9_]+", qid) or qid in checks or any(x.id == qid for x in out):
            raise ConfigError(f"{w}.id: expected a unique name of letters, digits and '_' that is not a "
                              f"check group, got {qid!r}")
        points = _get(item, "points", int, w)
        if points <= 0:
            raise ConfigError(f"{w}.points: expected a positive whole number, got {points!r}")
        prompt = _get(item, "prompt", str, w).strip()
        if not prompt:
            raise ConfigError(f"{w}.prompt: expected the question's text")
        out.append(Written(qid, points, prompt))
    return tuple(out)


def load(path: Path | str = COURSE_FILE) -> Course:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    title = _get(raw, "title", str, "course")
    grading = _get(raw, "grading", dict, "course")
    seed = _get(grading, "seed", int, "grading")
    startup = _get(grading, "startup_timeout", float, "grading")
    items = _get(raw, "milestones", list, "course")
    rules_raw = raw.get("rules", {}) or {}
    if not isinstance(rules_raw, dict):
        raise ConfigError("course.rules: expected a mapping of rule id to text")
    rules = {str(k): " ".join(str(v).split()) for k, v in rules_raw.items()}
    tzname, late = _term(raw.get("term"))
    milestones: list[Milestone] = []
    for i, item in enumerate(items):
        m = _milestone(item, i, [x.id for x in milestones], rules, ZoneInfo(tzname))
        if any(x.id == m.id or x.folder == m.folder for x in milestones):
            raise ConfigError(f"milestones[{i}]: duplicate id or folder ({m.id}, {m.folder})")
        milestones.append(m)
    if not milestones:
        raise ConfigError("course.milestones: expected at least one milestone")
    course = Course(title, seed, startup, tuple(milestones), path.resolve().parent, tzname, late)
    _check_release_order(course)
    return course


def _check_release_order(course: Course) -> None:
    """A milestone's folder holds the reference of every milestone it builds on: it may be released
    only once no submission of those can still earn points (their due date plus the late window)."""
    for m in course.milestones:
        if m.release is None:
            continue
        for d in course.dependencies(m):
            end = course.late_window_end(d)
            if end is not None and m.release < end:
                raise ConfigError(
                    f"{m.id}.release: {m.release.isoformat()} is before {d.id}'s last late submission "
                    f"({end.isoformat()}), but assignments/{m.folder}/ holds {d.id}'s reference solution: "
                    f"release {m.id} after that, or shorten the late policy's last_day")
