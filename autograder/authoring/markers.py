"""Solution markers: one reference file gives both the student stub and the clean reference.

In `solutions/`, each region a student writes sits between `### BEGIN SOLUTION` and
`### END SOLUTION`. Lines in the region starting with `### TODO:` are the hint the student sees.
"""
from __future__ import annotations

import re

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
TODO = "### TODO:"
# Anything that must never reach a student's folder.
LEAK_MARKERS = (BEGIN, END, "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS", TODO)

_DEF = re.compile(r"^\s*(?:async\s+)?(def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")


class MarkerError(ValueError):
    pass


def _regions(lines: list[str], name: str):
    """Yield (begin_index, end_index) of each solution region, validating nesting."""
    start = None
    for i, line in enumerate(lines):
        s = line.strip()
        if s == BEGIN:
            if start is not None:
                raise MarkerError(f"{name}:{i + 1}: {BEGIN} inside another region (opened at line {start + 1})")
            start = i
        elif s == END:
            if start is None:
                raise MarkerError(f"{name}:{i + 1}: {END} without a {BEGIN}")
            yield start, i
            start = None
    if start is not None:
        raise MarkerError(f"{name}:{start + 1}: {BEGIN} is never closed")


def _enclosing_name(lines: list[str], index: int) -> str:
    """The function or method enclosing line `index`, as `name` or `Class.method`."""
    names, indent = [], len(lines[index]) - len(lines[index].lstrip())
    for line in reversed(lines[:index]):
        m = _DEF.match(line)
        if m and len(line) - len(line.lstrip()) < indent:
            names.insert(0, m.group(2))
            indent = len(line) - len(line.lstrip())
            if indent == 0:
                break
    return ".".join(names) or "this part"


def make_stub(text: str, name: str = "<source>") -> str:
    """Replace each solution region by its TODO hint and `raise NotImplementedError`."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for b, e in _regions(lines, name):
        out.extend(lines[pos:b])
        pad = lines[b][: len(lines[b]) - len(lines[b].lstrip())]
        for line in lines[b + 1:e]:
            if line.strip().startswith(TODO):
                out.append(f"{pad}# TODO:{line.strip()[len(TODO):]}\n")
        func = _enclosing_name(lines, b)
        out.append(f'{pad}raise NotImplementedError("{func} is not implemented yet")\n')
        pos = e + 1
    out.extend(lines[pos:])
    return "".join(out)


def make_reference(text: str, name: str = "<source>") -> str:
    """Keep the solution, drop the markers and hint lines (for carried-forward modules)."""
    lines = text.splitlines(keepends=True)
    regions = list(_regions(lines, name))
    drop = {b for b, _ in regions} | {e for _, e in regions}
    inside = {i for b, e in regions for i in range(b + 1, e)}
    return "".join(
        line for i, line in enumerate(lines)
        if i not in drop and not (i in inside and line.strip().startswith(TODO))
    )


def leaks(text: str) -> list[str]:
    """Markers found in text that a student must never receive."""
    return [m for m in LEAK_MARKERS if m in text]
