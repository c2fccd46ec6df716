"""Subject files written as a base plus what differs from it.

Most mutants and many correct variants are a whole submission with one function changed. Instead of
carrying hundreds of copied lines each, such a file names its base in its docstring:

    BASE: reference                      the milestone's reference, solution markers removed
    BASE: correct/m6/blind_student.py    a whole file under autograder/tests/ (itself without BASE)

and holds only the top-level statements that differ, without their docstrings (they change no
grade). Assembling walks the base in order: each def, class or assignment of the file replaces the
base's one of the same name (imports and other statements match by their text); one the base lacks
goes just before the next replaced one, or at the end; the file's docstring replaces the base's.
A file without a BASE line is a whole submission.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from autograder.authoring import markers

TESTS = Path(__file__).resolve().parent
_BASE = re.compile(r"^BASE:\s*(\S+)\s*$", re.M)


def _key(index: int, node: ast.stmt) -> str:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return "__doc__" if index == 0 else f"string {index}"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return "= " + ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
    return ast.unparse(node)


def chunks(text: str) -> tuple[list[tuple[str, str]], str]:
    """Top-level statements as (key, text); comments and blank lines above one belong to it."""
    lines = text.splitlines(keepends=True)
    out, start = [], 0
    for i, node in enumerate(ast.parse(text).body):
        out.append((_key(i, node), "".join(lines[start:node.end_lineno])))
        start = node.end_lineno
    return out, "".join(lines[start:])


def assemble(base: str, override: str) -> str:
    base_chunks, tail = chunks(base)
    over_chunks, _ = chunks(override)
    replaced = dict(over_chunks)
    in_base = {k for k, _ in base_chunks}
    new_before: dict[str, list[str]] = {}
    pending: list[str] = []
    for key, text in over_chunks:
        if key in in_base:
            new_before[key], pending = pending, []
        else:
            pending.append(text)
    out = []
    for key, text in base_chunks:
        out += new_before.get(key, [])
        out.append(replaced.get(key, text))
    return "".join(out + pending) + tail


def code(text: str) -> str:
    """What runs: the syntax tree without docstrings or other bare strings (which derived files leave out)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                                 and isinstance(s.value.value, str))] or [ast.Pass()]
    return ast.dump(tree)


def base_of(path: Path) -> str | None:
    m = _BASE.search(path.read_text())
    return m.group(1) if m else None


def base_text(path: Path, course, milestone: str) -> str:
    """The whole file that a subject with a BASE line changes."""
    base = base_of(path)
    if base == "reference":
        m = course.milestone(milestone)
        ref = course.root / "solutions" / m.folder / m.files[0]
        return markers.make_reference(ref.read_text(), str(ref))
    base_path = TESTS / base
    assert base_of(base_path) is None, f"{path.name}: its base {base} must be a whole file"
    return base_path.read_text()


def subject_text(path: Path, course, milestone: str) -> str:
    """The whole submission a subject file stands for."""
    if base_of(path) is None:
        return path.read_text()
    return assemble(base_text(path, course, milestone), path.read_text())
