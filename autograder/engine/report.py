"""Turn a Result into what people read: a table, a feedback report, Gradescope's results.json."""
from __future__ import annotations

import json
import textwrap

from .grade import Result


def _mark(c) -> str:
    return "ok  " if c.passed else ("----" if not c.judged else "FAIL")


def table(result: Result, who: str = "") -> str:
    width = max(len(c.name) for c in result.checks) if result.checks else 10
    head = f"Milestone {result.milestone}" + (f" - {who}" if who else "") + f" (seed {result.seed})"
    lines = [head, "-" * max(len(head), width + 22)]
    for c in result.checks:
        lines.append(f"{_mark(c)}  {c.name:<{width}}  {c.score:>3} / {c.max_score}"
                     + ("  (not judged)" if not c.judged else "") + ("  *" if c.stand_ins else ""))
    lines.append(f"{'':4}  {'total':<{width}}  {result.score:>3} / {result.max_score}")
    return "\n".join(lines)


def feedback(result: Result) -> str:
    files = ", ".join(f"{f.name} ({f.source})" for f in result.files)
    lines = [table(result), "", f"Files graded: {files}"]
    lines += list(result.notes)
    starred = {c.note for c in result.checks if c.stand_ins}
    for note in sorted(starred):
        lines += [""] + textwrap.wrap(f"* {note}", 96, subsequent_indent="  ")
    failed = [c for c in result.checks if not c.passed]
    if not failed:
        lines += ["", "Every check passed. Well done!"]
    for c in failed:
        lines += ["", f"{c.name} ({c.score}/{c.max_score}):"]
        for para in c.message.splitlines() or [""]:
            if para.startswith("  "):          # traceback lines keep their layout
                lines.append("    " + para)
            else:
                lines += textwrap.wrap(para, 96, initial_indent="  ", subsequent_indent="  ") or [""]
    return "\n".join(lines)


def gradescope(result: Result) -> dict:
    """Gradescope's results.json: https://gradescope-autograders.readthedocs.io (specification)."""
    files = ", ".join(f"{f.name} ({f.source})" for f in result.files)
    return {
        "score": result.score,
        "max_score": result.max_score,
        "output": f"Milestone {result.milestone}, seed {result.seed}. Files graded: {files}."
                  + "".join(f" {n}" for n in result.notes),
        "visibility": "visible",
        "tests": [
            {"name": c.name, "score": c.score, "max_score": c.max_score,
             "output": "\n".join(filter(None, [c.message if not c.passed else "Passed.", c.note])),
             "visibility": "visible"}
            for c in result.checks
        ],
        "extra_data": {"seed": result.seed, "elapsed_seconds": round(result.elapsed, 3),
                       "internal_errors": result.internal_errors},
    }


def write_gradescope(result: Result, path) -> None:
    with open(path, "w") as f:
        json.dump(gradescope(result), f, indent=2)
