"""testkit.py: what the public tests of a folder share with the hidden grader, rendered by `course build`.

One source for every word a public test and the grader both say:
- GROUPS: each hidden check group of the milestone with its points and one-line description (course.yaml),
  so a failing public test names the group that would lose points;
- CAUSES: the likely-cause texts of the grader's mistake catalogue (autograder/milestones/<mid>/checks.py,
  `CATALOGUE.mistakes()`), only those the milestone's public tests cite as `cause("id")`: the same
  sentence the student's report would show for that mistake. Texts only: no check code leaves the grader.
- FORBIDDEN: the forbidden API patterns and their plain words (course.yaml);
- `TorchCalls`, a context manager that counts the torch functions called inside it (to see a loop: a
  count that grows with the batch), and `MEASURED_SECONDS`, the cold `pytest -q` time stated in the
  README and the test file's docstring (measured with autograder/tests/public_catch.py --time).
"""
from __future__ import annotations

import importlib
import re

from autograder.config import Course, Milestone

# Cold `pytest -q` in the built folder with the reference file, median of 3, 2 cores, nothing else running.
# Re-measure with `python autograder/tests/public_catch.py all --time` after changing the public tests.
MEASURED_SECONDS = {"m1": 2.0, "m2": 2.5, "m3": 3.0, "m4": 3.5, "m5": 3.5, "m6": 4.0}
PLACEHOLDER = "@MEASURED_SECONDS@"

_CITED = re.compile(r"""\bcause\(\s*["'](\w+)["']""")


def cited_causes(course: Course, m: Milestone) -> list[str]:
    folder = course.root / "solutions" / m.folder
    return sorted({c for p in folder.glob("test_*.py") for c in _CITED.findall(p.read_text())})


def catalogue_texts(m: Milestone) -> dict[str, str]:
    checks = importlib.import_module(f"autograder.milestones.{m.id}.checks")
    return {mid: mistake.text for mid, mistake in checks.CATALOGUE.mistakes().items()}


def seconds(m: Milestone) -> str:
    return f"{MEASURED_SECONDS[m.id]:.1f}"


def render(course: Course, m: Milestone) -> str:
    texts = catalogue_texts(m)
    cited = cited_causes(course, m)
    missing = [c for c in cited if c not in texts]
    if missing:
        raise ValueError(f"solutions/{m.folder}: the public tests cite cause(s) {missing} that the {m.id} "
                         f"grader's catalogue does not have")
    lines = [
        f'"""Helpers of the public tests of milestone {m.id[1:]}: the words they share with the hidden grader.',
        "",
        "Generated from the course's sources (your edits here would be overwritten by the next release).",
        "GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own",
        "sentence for each likely mistake the public tests recognise: the same words your report shows.",
        '"""',
        "from torch.overrides import TorchFunctionMode",
        "",
        f"MEASURED_SECONDS = {seconds(m)}   # cold `pytest -q` here, reference files, 2 cores, nothing else running",
        "",
        "GROUPS = {",
        *[f"    {g!r}: ({pts}, {m.about[g]!r})," for g, pts in m.checks.items()],
        "}",
        "",
        "CAUSES = {",
        *[f"    {c!r}: {texts[c]!r}," for c in cited],
        "}",
        "",
        "FORBIDDEN = [",
        *[f"    ({f.where!r}, {list(f.names)!r}, {f.plain!r})," for f in m.forbidden],
        "]",
        "",
        "",
        "def group(name):",
        '    """The words for a hidden check group: "hidden check group `dropout` (2 points)"."""',
        "    return f\"hidden check group `{name}` ({GROUPS[name][0]} points: {GROUPS[name][1]})\"",
        "",
        "",
        "def cause(mistake_id):",
        '    """The grader\'s likely-cause sentence for one known mistake."""',
        "    return \"Likely cause: \" + CAUSES[mistake_id]",
        "",
        "",
        "class TorchCalls(TorchFunctionMode):",
        '    """Counts the torch functions called inside `with TorchCalls() as calls:`; calls.names lists them."""',
        "",
        "    def __enter__(self):",
        "        self.names = []",
        "        return super().__enter__()",
        "",
        "    def __torch_function__(self, func, types, args=(), kwargs=None):",
        "        self.names.append(getattr(func, '__name__', str(func)))",
        "        return func(*args, **(kwargs or {}))",
        "",
        "    @property",
        "    def count(self):",
        "        return len(self.names)",
        "",
    ]
    return "\n".join(lines)
