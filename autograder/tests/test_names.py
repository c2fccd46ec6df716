"""Every name the course and the suite use for a check group or a mistake names something that exists.

- The groups a milestone registers in code are the groups course.yaml lists: a group in code but not in
  course.yaml is never run, and one in course.yaml but not in code cannot be graded.
- Every `CATCHES:` line of a mutant names groups of its milestone, and every `DIAGNOSIS:` id of a mutant
  or correct variant is a mistake the grader can name (or "none").

The grader names a mistake in several ways (catalogue entries, `Mistake(...)` objects, error patterns,
ids passed to `fail`); the ids are read from the catalogues and error patterns at run time and from the
sources of autograder/milestones/ and autograder/grading/, so the test holds whichever way they are written.
"""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from autograder.grading import checks
from conftest import COURSE, HERE
from derived import subject_files
from test_grader_subjects import MILESTONES, catches

GRADER = COURSE.root / "autograder"
_ID = re.compile(r"[a-z][a-z0-9_]*\Z")


def _module(mid: str):
    return importlib.import_module(f"autograder.milestones.{mid}.checks")


@pytest.mark.parametrize("milestone", MILESTONES)
def test_groups_in_code_are_the_groups_in_course_yaml(milestone):
    _module(milestone)
    in_code = set(checks.REGISTRY.get(milestone, {}))
    listed = set(COURSE.milestone(milestone).checks)
    assert not in_code - listed, f"registered in code but not in course.yaml (never run): {sorted(in_code - listed)}"
    assert not listed - in_code, f"listed in course.yaml but not registered in code: {sorted(listed - in_code)}"


# ---- the mistakes the grader can name ---------------------------------------------------------------

def _strings(node: ast.AST) -> list[str | re.Pattern]:
    """The ids an expression can evaluate to: "id", `"a" if c else "b"`, or f"{x}_id" (as a pattern)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    if isinstance(node, ast.JoinedStr):
        parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+" for v in node.values]
        return [re.compile("".join(parts) + r"\Z")]
    return []


def _bound_by(tree: ast.AST, call: ast.Call, name: str, module) -> list[str]:
    """Ids a comprehension feeds into `name` (`Mistake(k, ...) for k, (...) in TABLE.items()` or
    `for k, text, switches in TABLE`), read from the module's TABLE."""
    out = []
    for comp in ast.walk(tree):
        if not isinstance(comp, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            continue
        if not any(n is call for n in ast.walk(comp)):
            continue
        for gen in comp.generators:
            target, it = gen.target, gen.iter
            items = (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items"
                     and isinstance(it.func.value, ast.Name))
            table_name = it.func.value.id if items else (it.id if isinstance(it, ast.Name) else None)
            table = getattr(module, table_name, None) if table_name else None
            if table is None:
                continue
            rows = list(table.items()) if items else list(table)
            names = [e.id if isinstance(e, ast.Name) else None
                     for e in (target.elts if isinstance(target, ast.Tuple) else [target])]
            if name in names:
                pos = names.index(name)
                out += [row[pos] for row in rows if isinstance(row, tuple) and isinstance(row[pos], str)]
    return out


def _ids_in_source(path: Path, module) -> list[str | re.Pattern]:
    """Mistake("id", ...), fail(message, "id"), cause="id", entry(kind, "id", ...), and ids of a table a
    comprehension turns into Mistake objects."""
    tree = ast.parse(path.read_text())
    out: list[str | re.Pattern] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else "")
        arg = None
        if name == "Mistake" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Name) and module is not None:
                out += _bound_by(tree, node, arg.id, module)
        elif name in ("fail", "entry") and len(node.args) > 1:
            arg = node.args[1]
        if arg is not None:
            out += _strings(arg)
        for kw in node.keywords:
            if kw.arg == "cause":
                out += _strings(kw.value)
    return out


def _mistakes_in(value, seen=None) -> list[str]:
    """Ids of the Mistake objects held by a module-level value (a constant, list, tuple or dict of them)."""
    from autograder.grading.diagnosis import Mistake
    if isinstance(value, Mistake):
        return [value.id]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [i for v in value for i in _mistakes_in(v)]
    return []


def known_mistakes() -> tuple[set[str], list[re.Pattern]]:
    """(ids, patterns of ids built at run time) of every mistake the grader can name."""
    from autograder.grading.diagnosis import ERROR_PATTERNS, Catalogue
    ids, patterns = {"none"}, []
    ids |= {mistake.id for _, mistake in ERROR_PATTERNS}
    modules = {}
    for mid in MILESTONES:
        module = _module(mid)
        modules[Path(module.__file__).resolve()] = module
        for value in vars(module).values():
            if isinstance(value, Catalogue):
                ids |= set(value.mistakes())
            ids |= set(_mistakes_in(value))
    sources = sorted((GRADER / "milestones").rglob("*.py")) + sorted((GRADER / "grading").rglob("*.py"))
    for path in sources:
        for found in _ids_in_source(path, modules.get(path.resolve())):
            if isinstance(found, str):
                ids.add(found)
            else:
                patterns.append(found)
    return ids, patterns


def _subject_files(milestone: str) -> list[Path]:
    return [p for kind in ("mutants", "correct") for p in subject_files(HERE / kind / milestone)]


@pytest.fixture(scope="module")
def mistakes():
    return known_mistakes()


def test_mistake_ids_are_found():
    """The reading above finds the grader's mistakes (if it found none, the next test would prove nothing)."""
    ids, _ = known_mistakes()
    assert len(ids) > 100 and {"divide_by_dk", "forbidden_api", "none"} <= ids


@pytest.mark.parametrize("milestone", MILESTONES)
def test_every_diagnosis_id_names_a_known_mistake(milestone, mistakes):
    ids, patterns = mistakes
    unknown = {}
    for path in _subject_files(milestone):
        line = re.search(r"^DIAGNOSIS:\s*(.+)$", path.read_text(), re.M)
        for cause in (g.strip() for g in line.group(1).split(",") if g.strip()) if line else ():
            if cause not in ids and not any(p.match(cause) for p in patterns):
                unknown.setdefault(cause, []).append(f"{path.parent.parent.name}/{path.name}")
    assert not unknown, f"DIAGNOSIS ids the grader never names: {unknown}"


@pytest.mark.parametrize("milestone", MILESTONES)
def test_every_catches_id_names_a_group_of_the_milestone(milestone):
    _module(milestone)
    groups = set(COURSE.milestone(milestone).checks) | set(checks.REGISTRY.get(milestone, {}))
    unknown = {f"mutants/{p.name}": sorted(set(catches(p)) - groups)
               for p in subject_files(HERE / "mutants" / milestone) if set(catches(p)) - groups}
    assert not unknown, f"CATCHES names groups that do not exist: {unknown}"


def test_a_malformed_row_of_deviations_yaml_is_refused(tmp_path):
    """A row that cannot be what it says is refused when the milestone is imported: a typo'd key or switch would
    make the mistake the right computation, which proves nothing and is never named."""
    from autograder.grading.diagnosis import Catalogue

    def judge(x, shift=False):
        return x

    def rows(text, **kw):
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text("t:\n" + text)
        catalogue = Catalogue("m_test", path)
        catalogue.plain("silent")
        return [(r.id, r.text, r.switches) for r in catalogue.table("t", **kw)]

    assert rows("- id: x\n  text: a sentence\n  switches: {shift: true}\n", judge=judge) == [
        ("x", "a sentence", {"shift": True})]
    for bad, kw, words in [
            ("- id: x\n  text: a sentence\n  swiches: {shift: true}\n", {}, "unknown keys"),
            ("- id: x\n  text: a sentence\n  switches: {shfit: true}\n", {"judge": judge}, "no such switch"),
            ("- id: x\n  text: a sentence\n  switches: {shift: true}\n  only: pre\n", {}, "unknown keys"),
            ("- id: x\n  text: a sentence\n  switches: {shift: true}\n  only: both\n", {"layouts": True}, "pre or post"),
            ("- id: silent\n  switches: {shift: true}\n", {}, "no sentence")]:
        with pytest.raises(ValueError, match=words):
            rows(bad, **kw)
