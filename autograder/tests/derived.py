"""Subject files written as a base plus what differs from it.

Most mutants and many correct variants are a whole submission with a few lines changed. Instead of
carrying hundreds of copied lines each, such a file names its base and holds only the difference. A base
is `reference` (the milestone's reference, solution markers removed), `stub` (the student folder's file),
another subject of the same milestone by its name under tests/ (e.g. `correct/m6/blind_student`) or a sample
of the demo class (`samples/m4/aiko`). The hostile corpus (tests/hostile/m1/) is stored the same way, as
what each attack adds to the reference or the stub (its only bases: an attack never rests on a mutant).
`python autograder/tests/derived.py show FILE` prints the whole submission. Two forms:

- `name.diff`: the subject's docstring (Mistake, CATCHES, DIAGNOSIS or ATTACK, EXPECT), then a unified
  diff of the code below it: `--- <base>`, `+++ name`, hunks. Write the subject whole, as a student
  would, then `python autograder/tests/derived.py store FILE.py` picks the base that gives the smallest
  diff, writes FILE.diff and checks that it gives back the file. Editing the docstring never breaks the
  diff; a diff whose base changed where it applies is an error that names the file: store it again.
- `name.py` with a `BASE: <base>` line in its docstring: only the top-level statements that differ,
  without their docstrings. Each def, class or assignment replaces the base's one of the same name
  (imports and other statements match by their text); one the base lacks goes just before the next
  replaced one, or at the end; the file's docstring replaces the base's.
A `.py` file without a BASE line is a whole submission.
"""
from __future__ import annotations

import ast
import difflib
import re
import sys
from pathlib import Path

from autograder.authoring import markers

TESTS = Path(__file__).resolve().parent
_BASE = re.compile(r"^BASE:\s*(\S+)\s*$", re.M)
_DIFF_START = re.compile(r"^--- .*\n\+\+\+ .*\n", re.M)
_DIFF_BASE = re.compile(r"^--- (\S+)\n\+\+\+ ", re.M)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")
SUFFIXES = (".py", ".diff")


def find_subject(name: str) -> Path:
    """The file of the subject called e.g. `correct/m6/blind_student` (or a sample of the course's demo class,
    `samples/m4/aiko`), whichever form it is stored in."""
    folder, _, stem = name.rpartition("/")
    if folder.startswith("samples/"):
        found = sorted((TESTS.parent / name).glob("*.py"))
        assert len(found) == 1, f"{name}: a sample folder holds one student file"
        return found[0]
    return find(TESTS / folder, stem)


def subject_files(folder: Path) -> list[Path]:
    """The subject files of a folder (`.py` and `.diff`), by name."""
    return sorted((p for p in folder.glob("*") if p.suffix in SUFFIXES and p.is_file()), key=lambda p: p.stem)


def find(folder: Path, stem: str) -> Path:
    """The subject file called `stem` in `folder`, whichever form it is stored in."""
    found = [folder / (stem + s) for s in SUFFIXES if (folder / (stem + s)).is_file()]
    assert len(found) == 1, f"{folder}/{stem}: expected one of {SUFFIXES}, found {found}"
    return found[0]


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
    """The base a subject is made from: a .diff names it in its `--- ` line, a .py in a BASE line."""
    m = (_DIFF_BASE if path.suffix == ".diff" else _BASE).search(path.read_text())
    return m.group(1) if m else None


def _split_diff(text: str) -> tuple[str, str]:
    """(the docstring written above the diff, the diff)."""
    m = _DIFF_START.search(text)
    assert m, "a .diff subject holds its docstring, then `--- base` and `+++ name` lines and hunks"
    return text[:m.start()], text[m.start():]


def apply_diff(base: str, diff: str, name: str = "subject") -> str:
    """The text a unified diff makes of `base`: each hunk's old lines must stand in the base as they are."""
    lines = base.splitlines(keepends=True)
    out, at = [], 0
    hunks = re.split(r"^(?=@@ )", diff, flags=re.M)[1:]
    for hunk in hunks:
        head, *body = hunk.splitlines(keepends=True)
        first, count = _HUNK.match(head).groups()
        start = int(first) - (count != "0")          # a hunk that only adds lines names the line before them
        old = [ln[1:] for ln in body if ln[:1] in (" ", "-")]
        new = [ln[1:] for ln in body if ln[:1] in (" ", "+")]
        if lines[start:start + len(old)] != old:
            raise ValueError(f"{name}: the diff no longer applies to its base at line {start + 1}: "
                             "the base changed there; store the subject again from its whole text")
        out += lines[at:start] + new
        at = start + len(old)
    return "".join(out + lines[at:])


def body(text: str) -> str:
    """A file without its docstring (the part a .diff changes: editing the docstring never breaks a diff)."""
    try:
        first = chunks(text)[0][:1]
    except SyntaxError:                   # a subject that does not parse, on purpose: its docstring by its quotes
        m = re.match(r'"""[\s\S]*?"""\n', text)
        return text[m.end():] if m else text
    return text[len(first[0][1]):] if first and first[0][0] == "__doc__" else text


def make_diff(base: str, text: str, base_name: str, name: str) -> str:
    return "".join(difflib.unified_diff(base.splitlines(keepends=True), text.splitlines(keepends=True),
                                        base_name, name, n=2))


def base_text(path: Path, course, milestone: str) -> str:
    """The whole file that a subject with a BASE line changes."""
    return base_text_of(base_of(path), course, milestone)


def base_text_of(base: str, course, milestone: str) -> str:
    m = course.milestone(milestone)
    if base == "reference":
        ref = course.root / "solutions" / m.folder / m.files[0]
        return markers.make_reference(ref.read_text(), str(ref))
    if base == "stub":
        return (course.root / "assignments" / m.folder / m.files[0]).read_text()
    return subject_text(find_subject(base), course, milestone)


def chain(path: Path) -> list[Path]:
    """The files a subject is made from: itself, its base, that one's base ... (the reference not listed)."""
    out = [path]
    while (base := base_of(out[-1])) not in (None, "reference", "stub"):
        out.append(find_subject(base))
        assert len(out) < 20 and out[-1] not in out[:-1], f"{path.name}: its BASE lines go round in a circle"
    return out


def subject_text(path: Path, course, milestone: str) -> str:
    """The whole submission a subject file stands for."""
    if path.suffix == ".diff":
        doc, diff = _split_diff(path.read_text())
        return doc + apply_diff(body(base_text(path, course, milestone)), diff, path.name)
    if base_of(path) is None:
        return path.read_text()
    return assemble(base_text(path, course, milestone), path.read_text())


def without_base(doc: str) -> str:
    """A docstring without its BASE line (a .diff names its base in its `--- ` line)."""
    return re.sub(r"\n*^BASE:.*$", "", doc, flags=re.M)


def store(path: Path, course, milestone: str, bases: list[str]) -> Path | None:
    """Rewrite the subject `path` as a .diff from whichever of `bases` gives the smallest diff; None (nothing
    written) when no diff is much smaller than the whole file."""
    text = subject_text(path, course, milestone)
    doc = text[:len(text) - len(body(text))]
    if not doc or not text.endswith("\n"):
        return None
    best = None
    for base in bases:
        try:
            start = body(base_text_of(base, course, milestone))
        except (AssertionError, OSError, SyntaxError, ValueError):
            continue
        diff = make_diff(start, body(text), base, path.stem)
        if apply_diff(start, diff, path.name) == body(text) and (best is None or len(diff) < len(best[1])):
            best = (without_base(doc), diff)
    if best is None or len(best[1]) >= len(text):
        return None
    out = path.with_suffix(".diff")
    out.write_text(best[0] + best[1])
    if out != path:
        path.unlink()
    return out


def main(argv: list[str]) -> None:
    """`derived.py store FILE...`: store subjects as diffs from the reference, another subject of the same
    milestone or a sample, whichever gives the smallest diff. `derived.py show FILE`: the whole submission."""
    from autograder import config
    course = config.load()
    assert argv[:1] in (["store"], ["show"]), "usage: derived.py store FILE... | derived.py show FILE"
    if argv[0] == "show":
        path = Path(argv[1]).resolve()
        print(subject_text(path, course, path.parent.name), end="")
        return
    for arg in argv[1:]:
        path = Path(arg).resolve()
        milestone = path.parent.name
        others = [str(q.relative_to(TESTS).with_suffix("")) for kind in ("mutants", "correct", "integrity")
                  for q in subject_files(TESTS / kind / milestone) if q.stem != path.stem and path not in chain(q)]
        samples = [f"samples/{milestone}/{d.name}" for d in sorted((TESTS.parent / "samples" / milestone).glob("*"))]
        hostile = path.parent.parent.name == "hostile"
        out = store(path, course, milestone, ["reference", "stub"] + ([] if hostile else others + samples))
        print(f"{path.name}: {'stored as ' + out.name if out else 'kept whole (no diff is much smaller)'}")


if __name__ == "__main__":
    sys.path.insert(0, str(TESTS.parents[1]))
    main(sys.argv[1:])
