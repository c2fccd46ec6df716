"""Milestone notebooks: the text source renders to a valid nbgrader source notebook (fast, no nbgrader)."""
from __future__ import annotations

import json

import pytest

from autograder import config
from autograder.authoring import notebook

COURSE = config.load()


@pytest.mark.parametrize("m", [m for m in COURSE.milestones if notebook.source_path(COURSE, m).is_file()],
                         ids=lambda m: m.id)
def test_rendered_notebook_has_one_graded_cell_per_check_and_question(m):
    text = notebook.render(COURSE, m)
    assert text == notebook.render(COURSE, m), "rendering must be deterministic"
    nb = json.loads(text)
    assert nb["metadata"]["kernelspec"]["name"] == "python3" and nb["nbformat"] == 4
    graded = {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"] if "nbgrader" in c["metadata"]}
    assert set(graded) == set(m.checks) | {w.id for w in m.written}
    for group, pts in m.checks.items():
        meta, src = graded[group]["metadata"]["nbgrader"], "".join(graded[group]["source"])
        assert meta == {"schema_version": 3, "grade": True, "grade_id": group, "locked": True,
                        "solution": False, "points": pts}
        # No hidden code: the verdict comes from the engine, outside the kernel (nbgrade.ApplyVerdicts).
        assert src.startswith(f"# Autograded: check group `{group}`") and "run_check" not in src
    for w in m.written:
        meta = graded[w.id]["metadata"]["nbgrader"]
        assert meta["solution"] and meta["grade"] and meta["points"] == w.points
        assert graded[w.id]["cell_type"] == "markdown"
    ids = [c["id"] for c in nb["cells"]]
    assert len(set(ids)) == len(ids)
    # What students receive: no model answer.
    released = notebook.student_view(text, release=True)
    assert all(src == notebook.ANSWER_STUB for kind, gid, _, src in released if gid in {w.id for w in m.written})


def test_notebook_source_errors_name_the_line():
    m = COURSE.milestone("m1")
    cells = notebook.parse("<!-- grading -->\n<!-- autograded: softmax -->\n<!-- autograded: nope -->\n", "x.md")
    with pytest.raises(notebook.NotebookError, match="x.md:3: autograded 'nope'"):
        notebook.validate(cells, m, "x.md")
    with pytest.raises(notebook.NotebookError, match="missing"):
        notebook.validate(notebook.parse("<!-- grading -->\n<!-- autograded: softmax -->\n", "x.md"), m, "x.md")
    with pytest.raises(notebook.NotebookError, match="exactly one <!-- grading -->"):
        notebook.validate(notebook.parse("<!-- autograded: softmax -->\n", "x.md"), m, "x.md")
    with pytest.raises(notebook.NotebookError, match="x.md:1: a code cell's body"):
        notebook.parse("<!-- code -->\nprint(1)\n", "x.md")


def test_written_questions_are_validated():
    raw = {"title": "t", "grading": {"seed": 1, "startup_timeout": 5}, "milestones": [
        {"id": "m1", "folder": "f", "files": ["a.py"], "time_limits": {"probe": 1, "total": 2},
         "checks": {"g": {"points": 1, "about": "g"}}, "written": [{"id": "g", "points": 1, "prompt": "why?"}]}]}
    with pytest.raises(config.ConfigError, match="written\\[0\\].id"):
        config._milestone(raw["milestones"][0], 0, [], {})
