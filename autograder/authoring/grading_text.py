"""What a student must know about grading, written once from course.yaml: the README of each milestone
folder and the "How you are graded" cell of its notebook both show exactly this text."""
from __future__ import annotations

from autograder.config import Course, Milestone


def code_list(files) -> str:
    """`a.py`, `b.py`: file names as a README shows them."""
    return ", ".join(f"`{f}`" for f in files)


def bullets(*items: tuple[object, str]) -> list[str]:
    """A README list's optional lines: "- text" for each (condition, text) whose condition holds, in order."""
    return [f"- {text}" for wanted, text in items if wanted]


def _where(f) -> str:
    return "in every function" if f.where == "all" else f"in `{f.where}`"


def grading_markdown(course: Course, m: Milestone, notebook_name: str | None) -> str:
    written = sum(w.points for w in m.written)
    lines = [
        "## How you are graded",
        "",
        f"Hidden checks run on your {code_list(m.files)}: {m.max_score} points in these groups "
        f"(all or nothing per group). The public tests in this folder are a quick subset of them: a failing "
        f"test names the group that checks the same thing. One mistake can fail tests of several groups; the "
        f"grader charges it once, where it is (see the rules below), so it may cost fewer groups than fail there.",
        "",
        "| check | points | what it checks |",
        "|---|---|---|",
        *[f"| `{name}` | {pts} | {m.about.get(name, '')} |" for name, pts in m.checks.items()],
    ]
    if m.written:
        lines += ["", f"Written questions in the notebook, graded by hand: {written} points.", "",
                  "| question | points |", "|---|---|",
                  *[f"| `{w.id}` | {w.points} |" for w in m.written]]
    lines += ["", f"**Total: {m.max_score + written} points** ({m.max_score} from the checks"
                  + (f", {written} from the written answers)." if m.written else ").")]
    rules = list(m.rules) + [f"Do not use {f.plain} ({_where(f)})." for f in m.forbidden]
    if rules:
        lines += ["", "### Rules that cost points", "", *[f"- {r}" for r in rules]]
    carried = [f for d in course.dependencies(m) for f in d.files]
    provided = [f for d in [*course.dependencies(m), m] for f in d.provided]
    lines += ["", "### What to hand in", ""]
    lines += [f"- `{f}` (graded automatically)." for f in m.files]
    lines += bullets(
        (notebook_name and m.written, f"`{notebook_name}`, with your answers to the written questions (graded by hand)."),
        (carried, f"Not {code_list(carried)}: grading always uses the course's reference copy, so a mistake in an "
                  f"earlier milestone never costs points twice."),
        (provided, f"Not {code_list(provided)}: provided by the course; grading uses the course's copy."))
    return "\n".join(lines)
