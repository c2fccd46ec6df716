"""Milestone notebooks: a readable text source in, an nbgrader source notebook out.

`solutions/<folder>/notebook.md` is plain Markdown split into cells by marker lines:

    <!-- markdown -->              a markdown cell (the default before any marker)
    <!-- code -->                  a code cell; its body is one ```python fenced block
    <!-- autograded: GROUP -->     the autograded cell of check group GROUP of course.yaml (points from
                                   there), with an optional ```python block shown to students; at
                                   autograde its outputs are replaced by the engine's verdict (nbgrade.py)
    <!-- grading -->               "How you are graded" (grading_text.py: groups, points, rules, what to
                                   hand in), the same text as the milestone's README; once per notebook
    <!-- written: ID -->           written question ID of course.yaml: the prompt (from course.yaml) and
                                   a hand-graded answer cell; the body is the model answer for graders,
                                   removed from what students receive

Every check group and written question of the milestone appears exactly once. `render` gives the
nbgrader *source* notebook (nbformat 4, nbgrader metadata schema 3); `nbgrader generate_assignment`
makes the student version. `student_view` reduces a notebook to what `course build --check` compares.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.config import Course, Milestone
from autograder.authoring.grading_text import grading_markdown

SOURCE_NAME = "notebook.md"
ANSWER_STUB = "YOUR ANSWER HERE"     # nbgrader's ClearSolutions.text_stub
_MARKER = re.compile(r"^<!--\s*(markdown|code|autograded|written|grading)\s*(?::\s*([A-Za-z0-9_]+))?\s*-->\s*$")
_FENCE = re.compile(r"\A```python\n(.*?)\n?```\Z", re.S)
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

class NotebookError(ValueError):
    pass


@dataclass
class Cell:
    kind: str          # markdown | code | autograded | written
    arg: str           # group or question id ("" for markdown/code)
    body: str
    line: int          # where the cell starts in notebook.md


def source_path(course: Course, m: Milestone) -> Path:
    return course.root / "solutions" / m.folder / SOURCE_NAME


def notebook_name(m: Milestone) -> str:
    return f"{m.folder}.ipynb"


def parse(text: str, where: str) -> list[Cell]:
    cells: list[Cell] = []
    kind, arg, start, buf = "markdown", "", 1, []

    def flush():
        body = "\n".join(buf).strip("\n")
        if kind in ("code", "autograded") and body:
            fenced = _FENCE.match(body.strip())
            if not fenced:
                raise NotebookError(f"{where}:{start}: a {kind} cell's body must be one ```python fenced block")
            body = fenced.group(1).rstrip()
        if body or kind in ("autograded", "written", "grading"):
            cells.append(Cell(kind, arg, body, start))

    for i, line in enumerate(text.splitlines(), 1):
        m = _MARKER.match(line)
        if m:
            flush()
            kind, arg, start, buf = m.group(1), m.group(2) or "", i, []
            if (kind in ("autograded", "written")) != bool(arg):
                raise NotebookError(f"{where}:{i}: `{kind}` takes a name only for autograded/written cells")
        else:
            buf.append(line)
    flush()
    return cells


def validate(cells: list[Cell], m: Milestone, where: str) -> None:
    if sum(c.kind == "grading" for c in cells) != 1:
        raise NotebookError(f"{where}: a notebook needs exactly one <!-- grading --> cell (how students are graded)")
    for kind, known in (("autograded", list(m.checks)), ("written", [w.id for w in m.written])):
        seen = [c.arg for c in cells if c.kind == kind]
        unknown = [(c.line, c.arg) for c in cells if c.kind == kind and c.arg not in known]
        if unknown:
            line, name = unknown[0]
            raise NotebookError(f"{where}:{line}: {kind} {name!r} is not in course.yaml for {m.id} ({known})")
        dup = sorted({a for a in seen if seen.count(a) > 1})
        missing = [k for k in known if k not in seen]
        if dup or missing:
            raise NotebookError(f"{where}: every {kind} item of {m.id} must appear once "
                                f"(twice: {dup or 'none'}; missing: {missing or 'none'})")


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _nbgrader(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: int | None = None) -> dict:
    meta = {"schema_version": 3, "grade": grade, "grade_id": grade_id, "locked": locked, "solution": solution}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _cell(cell_type: str, cid: str, source: str, metadata: dict | None = None) -> dict:
    cell = {"cell_type": cell_type, "id": cid, "metadata": metadata or {}, "source": _lines(source)}
    if cell_type == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def autograded_source(m: Milestone, group: str, visible: str) -> str:
    points = m.checks[group]
    head = (f"# Autograded: check group `{group}` ({points} point{'s' if points != 1 else ''}). Run now, this cell "
            f"runs the public tests of this group\n# on your {', '.join(m.files)}. When your work is graded, the "
            f"course's hidden checks for this group decide the points\n# (they run outside this notebook; where "
            f"notebooks are graded with nbgrader, this cell shows their verdict in the copy returned to you).")
    run = f"import testkit\ntestkit.check({group!r})"
    return "\n".join(part for part in (head, visible, run) if part)


def render(course: Course, m: Milestone) -> str:
    """The nbgrader source notebook for milestone m, as nbformat JSON text."""
    path = source_path(course, m)
    where = str(path.relative_to(course.root))
    cells = parse(path.read_text(), where)
    validate(cells, m, where)
    written = {w.id: w for w in m.written}
    out = []
    for i, c in enumerate(cells):
        if c.kind == "markdown":
            out.append(_cell("markdown", f"md-{i:03d}", c.body))
        elif c.kind == "code":
            out.append(_cell("code", f"code-{i:03d}", c.body))
        elif c.kind == "grading":
            out.append(_cell("markdown", f"grading-{i:03d}", grading_markdown(course, m, notebook_name(m))))
        elif c.kind == "autograded":
            out.append(_cell("code", c.arg, autograded_source(m, c.arg, c.body),
                             _nbgrader(c.arg, grade=True, solution=False, locked=True, points=m.checks[c.arg])))
        else:
            w = written[c.arg]
            s = "s" if w.points != 1 else ""
            out.append(_cell("markdown", f"q-{i:03d}", f"**Question `{w.id}` ({w.points} point{s}, graded by "
                                                        f"hand).** {w.prompt}\n\nWrite your answer in the next cell."))
            # The body (a model answer for graders) is replaced by ANSWER_STUB in the release.
            out.append(_cell("markdown", w.id, c.body or ANSWER_STUB,
                             _nbgrader(w.id, grade=True, solution=True, locked=False, points=w.points)))
    nb = {"cells": out, "metadata": {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _norm(source) -> str:
    text = "".join(source) if isinstance(source, list) else str(source)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def student_view(nb_text: str, release: bool = False) -> list[tuple]:
    """(cell type, grade id, points, normalised source) per cell. With release=True, turn a source
    notebook into what students receive: written answers cleared."""
    nb = json.loads(nb_text)
    view = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = "".join(cell.get("source", []))
        if release:
            source = ANSWER_STUB if meta.get("solution") else source
        view.append((cell.get("cell_type"), meta.get("grade_id"), meta.get("points"), _norm(source)))
    return view


def release_problems(source_text: str, released_text: str) -> list[str]:
    """Why a released notebook does not match its source (empty when it does)."""
    try:
        got = student_view(released_text)
    except (ValueError, TypeError) as e:
        return [f"not a readable notebook ({e})"]
    want = student_view(source_text, release=True)
    if got == want:
        return []
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return [f"cell {i} ({w[1] or w[0]}) differs from the source notebook"]
    return [f"has {len(got)} cells, the source notebook {len(want)}"]
