"""Turn a Result into what people read: a table, a feedback report, Gradescope's results.json.

Student code decides much of this text (exception messages, printed output, file and folder names),
so every text leaving here goes through `clean`: valid UTF-8 whatever it held, no character that
breaks a terminal or a line, no line long enough to choke a viewer.
"""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from autograder.grading.grade import Result

MAX_LINE = 2000
# Lone surrogates (not encodable), control characters but tab and newline (NUL, terminal escapes,
# carriage return), Unicode line separators, and bidirectional marks and overrides (which reorder
# what a reader sees).
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_IN_TEXT = re.compile(f"[{_UNSAFE}]")
_UNSAFE_IN_A_FIELD = re.compile(f"[{_UNSAFE}\t\n]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str, one_line: bool = False) -> str:
    """`text` safe to write and show anywhere: unsafe characters become visible escapes (`\\x00`,
    `\\udc80`, `\\u202e`), so the student still sees what their code produced; lines longer than
    MAX_LINE are cut, saying by how much. `one_line`: newlines and tabs are escaped too (a CSV field)."""
    text = (_UNSAFE_IN_A_FIELD if one_line else _UNSAFE_IN_TEXT).sub(_escape, str(text))
    if len(text) <= MAX_LINE:
        return text
    keep = MAX_LINE - 50          # room for the note: a cut line is never cut again
    return "\n".join(line if len(line) <= MAX_LINE else f"{line[:keep]}... ({len(line) - keep} more characters)"
                     for line in text.split("\n"))


def cleaned(data):
    """A JSON-able value with every string in it (keys too) cleaned."""
    if isinstance(data, str):
        return clean(data)
    if isinstance(data, dict):
        return {clean(k) if isinstance(k, str) else k: cleaned(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [cleaned(v) for v in data]
    return data


def write_text(path, text: str) -> None:
    """Write cleaned text as UTF-8 (the encoder's replacement is a last resort clean makes unneeded)."""
    Path(path).write_text(clean(text), encoding="utf-8", errors="replace")


def write_json(path, data) -> None:
    """Write a value as UTF-8 JSON any parser accepts (no lone surrogates, which Python's json lets through)."""
    text = json.dumps(cleaned(data), indent=2, ensure_ascii=False) + "\n"
    Path(path).write_text(text, encoding="utf-8", errors="replace")


def _mark(c) -> str:
    return "ok  " if c.passed else ("----" if not c.judged else "FAIL")


def _shown(c) -> bool:
    """Groups whose message the report prints: failed ones, and those that kept their points because the
    failure they met is charged in another group (the student should know why)."""
    return not c.passed or bool(c.charged_in)


def table(result: Result, who: str = "") -> str:
    width = max(len(c.name) for c in result.checks) if result.checks else 10
    head = f"Milestone {result.milestone}" + (f" - {who}" if who else "") + f" (seed {result.seed})"
    lines = [head, "-" * max(len(head), width + 22)]
    for c in result.checks:
        lines.append(f"{_mark(c)}  {c.name:<{width}}  {c.score:>3} / {c.max_score}"
                     + (f"  (charged in {c.charged_in})" if c.charged_in else "  (not judged)" if not c.judged else "")
                     + ("  *" if c.stand_ins else ""))
    lines.append(f"{'':4}  {'total':<{width}}  {result.score:>3} / {result.max_score}")
    return clean("\n".join(lines))


def covers(result: Result) -> str:
    """What the total is, and what it leaves out."""
    text = f"This total is the hidden checks of your code ({result.max_score} points)"
    if result.written_points:
        text += (f"; the notebook's written questions ({result.written_points} points) are graded by hand "
                 f"and are not in it")
    return text + "."


def feedback(result: Result) -> str:
    files = ", ".join(f"{f.name} ({f.source})" for f in result.files) or "none"
    lines = [table(result), covers(result), "", f"Files graded: {files}"]
    lines += list(result.notes)
    starred = {c.note for c in result.checks if c.stand_ins}
    for note in sorted(starred):
        lines += [""] + textwrap.wrap(f"* {note}", 96, subsequent_indent="  ")
    if all(c.passed for c in result.checks):
        lines += ["", "Every check passed. Well done!"]
    for c in filter(_shown, result.checks):
        lines += ["", f"{c.name} ({c.score}/{c.max_score}):"]
        for para in clean(c.message).split("\n"):     # cleaned first: no huge line reaches textwrap
            if para.startswith("  "):          # traceback lines keep their layout
                lines.append("    " + para)
            else:
                lines += textwrap.wrap(para, 96, initial_indent="  ", subsequent_indent="  ") or [""]
    return clean("\n".join(lines))


def gradescope(result: Result) -> dict:
    """Gradescope's results.json: https://gradescope-autograders.readthedocs.io (specification)."""
    files = ", ".join(f"{f.name} ({f.source})" for f in result.files) or "none"
    return cleaned({
        "score": result.score,
        "max_score": result.max_score,
        "output": f"Milestone {result.milestone}, seed {result.seed}. {covers(result)} Files graded: {files}."
                  + "".join(f" {n}" for n in result.notes),
        "visibility": "visible",
        "tests": [
            {"name": c.name, "score": c.score, "max_score": c.max_score,
             "output": "\n".join(filter(None, [c.message if _shown(c) else "Passed.", c.note])),
             "visibility": "visible"}
            for c in result.checks
        ],
        "extra_data": {"seed": result.seed, "elapsed_seconds": round(result.elapsed, 3),
                       "internal_errors": result.internal_errors,
                       "integrity": {"flag": result.integrity, "evidence": result.tamper or result.unobserved}},
    })


def write_gradescope(result: Result, path) -> None:
    write_json(path, gradescope(result))
