"""course.yaml validation, stub generation, and the derived tree being up to date and leak-free."""
from __future__ import annotations

import ast
import json
import re
import textwrap

import pytest

from autograder.authoring import build, markers
from autograder import config
from conftest import COURSE


def test_build_check_is_clean():
    assert build.check(COURSE) == [], "run `course build` and commit the result"


def test_nothing_hidden_reaches_students():
    hidden = ["BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "### TODO:", "checks_m1", "checks_m2", "REGISTRY"]
    for path in (COURSE.root / "assignments").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and ".pytest_cache" not in path.parts:
            text = path.read_text(errors="replace")
            for needle in hidden:
                assert needle not in text, f"{path} contains {needle!r}"


@pytest.mark.parametrize("m", COURSE.milestones, ids=lambda m: m.id)
def test_stub_keeps_the_api_and_solves_nothing(m):
    for f in m.files:
        ref = ast.parse((COURSE.root / "solutions" / m.folder / f).read_text())
        stub_text = (COURSE.root / "assignments" / m.folder / f).read_text()
        stub = ast.parse(stub_text)

        def signatures(tree):
            """Module-level functions and class methods (helpers nested in a solution are the student's to write)."""
            tops = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
            tops += [f for c in tree.body if isinstance(c, ast.ClassDef) for f in c.body
                     if isinstance(f, ast.FunctionDef)]
            return {n.name: ast.dump(n.args) for n in tops}

        assert signatures(ref) == signatures(stub), "the stub must keep every name and signature"
        ref_text = (COURSE.root / "solutions" / m.folder / f).read_text()
        # Functions the student writes (a solution block inside) are stubs; helpers the course gives as
        # they are (no solution block, e.g. m6's length_penalty_score) stay.
        to_write = {n.name for n in ast.walk(ref) if isinstance(n, ast.FunctionDef)
                    and "### BEGIN SOLUTION" in (ast.get_source_segment(ref_text, n) or "")}
        assert to_write, "the reference has no solution block"
        for node in ast.walk(stub):
            if isinstance(node, ast.FunctionDef) and node.name in to_write:
                assert "NotImplementedError" in ast.unparse(node), f"{node.name} in the stub solves something"
        assert "# TODO:" in stub_text


def test_markers_round_trip():
    src = textwrap.dedent('''\
        def f(x):
            """Doc."""
            ### BEGIN SOLUTION
            ### TODO: return twice x
            return 2 * x
            ### END SOLUTION
        ''')
    stub = markers.make_stub(src)
    assert "# TODO: return twice x" in stub and 'raise NotImplementedError("f is not implemented yet")' in stub
    assert "2 * x" not in stub
    ref = markers.make_reference(src)
    assert "return 2 * x" in ref and "###" not in ref


@pytest.mark.parametrize("src, needle", [
    ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
    ("x = 1\n### END SOLUTION\n", "without a"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another region"),
])
def test_bad_markers_are_reported(src, needle):
    with pytest.raises(markers.MarkerError, match=needle):
        markers.make_stub(src, "x.py")


BASE = """
title: T
grading: {seed: 1, startup_timeout: 30}
milestones:
  - id: m1
    folder: m1_a
    files: [a.py]
    time_limits: {probe: 5, total: 50}
    checks: {shapes: {points: 2, about: "the shapes"}}
"""


@pytest.mark.parametrize("change, needle", [
    (("seed: 1", "seed: one"), "grading.seed: expected int"),
    (("    files: [a.py]\n", ""), "milestones[0] (m1): missing key 'files'"),
    (("points: 2", "points: 0"), "checks.shapes.points: expected a positive whole number"),
    (('{points: 2, about: "the shapes"}', "2"), "checks.shapes: expected {points: N, about"),
    (("files: [a.py]", "files: [a.py]\n    rules: [nope]"), "rules: ['nope'] are not rules of course.yaml"),
    (("probe: 5", "probe: 500"), "expected 0 < probe <= total"),
    (("files: [a.py]", "files: [a.py]\n    depends_on: [m7]"), "depends_on: 'm7' is not an earlier milestone"),
    (("id: m1", "id: first"), "expected 'm' followed by a number"),
    (("title: T\n", "title: [T\n"), "not valid YAML"),
])
def test_bad_course_yaml_names_the_key(tmp_path, change, needle):
    p = tmp_path / "course.yaml"
    p.write_text(BASE.replace(*change))
    with pytest.raises(config.ConfigError) as e:
        config.load(p)
    assert needle in str(e.value)


def test_course_facts_come_from_course_yaml():
    m2 = COURSE.milestone("m2")
    assert [d.id for d in COURSE.dependencies(m2)] == ["m1"]
    assert COURSE.milestone("m1").max_score == sum(COURSE.milestone("m1").checks.values())
    readme = (COURSE.root / "assignments" / m2.folder / "README.md").read_text()
    for name, points in m2.checks.items():
        assert f"| `{name}` | {points} | {m2.about[name]} |" in readme


@pytest.mark.parametrize("m", COURSE.milestones, ids=lambda m: m.id)
def test_every_rule_that_costs_points_is_written_where_students_read(m):
    """README and notebook: groups with points, written questions, forbidden APIs in plain words,
    the rules (loops, inputs, dtype), what to hand in; one text, from course.yaml."""
    readme = (COURSE.root / "assignments" / m.folder / "README.md").read_text()
    nb = json.loads((COURSE.root / "source_notebooks" / m.folder / f"{m.folder}.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"]]
    (grading,) = [c for c in cells if c.startswith("## How you are graded")]
    assert grading in readme
    written = sum(w.points for w in m.written)
    assert f"**Total: {m.max_score + written} points**" in grading
    for w in m.written:
        assert f"| `{w.id}` | {w.points} |" in grading
    for f in m.forbidden:
        assert f.plain in grading and not any(n in grading for n in f.names if n.startswith("aten::"))
    for rule in m.rules:
        assert rule in grading
    for f in m.files:
        assert f"- `{f}` (graded automatically)." in grading
    assert f"`{m.folder}.ipynb`, with your answers" in grading


@pytest.mark.parametrize("m", COURSE.milestones, ids=lambda m: m.id)
def test_written_questions_are_listed_in_the_notebook_order(m):
    """The README lists the written questions in course.yaml's order; the notebook asks them in its own."""
    asked = re.findall(r"<!-- written: (\w+) -->", (COURSE.root / "solutions" / m.folder / "notebook.md").read_text())
    assert [w.id for w in m.written] == asked
