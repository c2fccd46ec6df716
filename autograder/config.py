"""Load and validate course.yaml, the single source of course facts.

Everything the build and the grader need to know about milestones (files, dependencies, points,
forbidden APIs, time limits) comes from here. A bad file fails loudly, naming the key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

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
    id: str
    folder: str
    title: str
    files: tuple[str, ...]
    depends_on: tuple[str, ...]
    probe_timeout: float
    total_timeout: float
    forbidden: tuple[Forbidden, ...]
    checks: dict[str, int]                  # group name -> points, in report order
    written: tuple[Written, ...] = ()       # hand-graded questions of the notebook
    about: dict[str, str] = field(default_factory=dict)   # group name -> what it checks, for students
    rules: tuple[str, ...] = ()             # the rules that cost points, in students' words
    provided: tuple[str, ...] = ()          # course files students receive as they are (e.g. data.py)

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
class Course:
    title: str
    seed: int
    startup_timeout: float
    milestones: tuple[Milestone, ...]
    root: Path

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


def _milestone(raw, index: int, earlier: list[str], rules: dict[str, str]) -> Milestone:
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
    return Milestone(mid, folder, str(title), files, deps, probe, total, forbidden, checks, written, about,
                     tuple(rules[r] for r in rule_ids), provided)


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
    milestones: list[Milestone] = []
    for i, item in enumerate(items):
        m = _milestone(item, i, [x.id for x in milestones], rules)
        if any(x.id == m.id or x.folder == m.folder for x in milestones):
            raise ConfigError(f"milestones[{i}]: duplicate id or folder ({m.id}, {m.folder})")
        milestones.append(m)
    if not milestones:
        raise ConfigError("course.milestones: expected at least one milestone")
    return Course(title, seed, startup, tuple(milestones), path.resolve().parent)
