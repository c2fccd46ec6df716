"""testkit.py: what the public tests of a folder share with the hidden grader, rendered by `course build`.

One source for every word a public test and the grader both say:
- GROUPS: each hidden check group of the milestone with its points and one-line description (course.yaml),
  so a failing public test names the group that checks the same thing;
- CAUSES: the likely-cause texts of the grader's mistake catalogue (autograder/milestones/<mid>/,
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

# Cold `pytest -q` in the built folder with the reference files: median of 3 (after one warm-up run) on 2 cores,
# re-measured 2026-11-26 after the public tests grew, on a quiet machine (load 0.3). Under load it grows: with a grading job on the
# same 2 cores, expect two to five times this. Re-measure after changing the public tests
# (farm-bench -n 3 -- python -m pytest -q, in a copy of the built folder).
MEASURED_SECONDS = {"m1": 1.2, "m2": 1.3, "m3": 1.4, "m4": 1.3, "m5": 2.3, "m6": 1.5}
PLACEHOLDER = "@MEASURED_SECONDS@"

_CITED = re.compile(r"""\bcause\(\s*["'](\w+)["']""")


def cited_causes(course: Course, m: Milestone) -> list[str]:
    folder = course.root / "solutions" / m.folder
    return sorted({c for p in folder.glob("test_*.py") for c in _CITED.findall(p.read_text())})


def tests_of_groups(course: Course, m: Milestone) -> dict[str, list[str]]:
    """group -> the public test functions whose messages name it (group("...") in their body)."""
    import ast
    out: dict[str, list[str]] = {}
    for path in sorted((course.root / "solutions" / m.folder).glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "group" and sub.args:
                        # every name the call can give: group("x"), or group("x" if decoder else "y")
                        for name in (c.value for c in ast.walk(sub.args[0])
                                     if isinstance(c, ast.Constant) and isinstance(c.value, str)):
                            if node.name not in out.get(name, []):
                                out.setdefault(name, []).append(node.name)
    return out


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
    tested = tests_of_groups(course, m)
    unknown = sorted(set(tested) - set(m.checks))
    if unknown:
        raise ValueError(f"solutions/{m.folder}: the public tests name groups {unknown} that {m.id} does not have")
    lines = [
        f'"""Helpers of the public tests of milestone {m.id[1:]}: the words they share with the hidden grader.',
        "",
        "Generated from the course's sources (your edits here would be overwritten by the next release).",
        "GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own",
        "sentence for each likely mistake the public tests recognise: the same words your report shows.",
        '"""',
        "import contextlib",
        "import functools",
        "import inspect",
        "",
        "import torch",
        "from torch.overrides import TorchFunctionMode",
        "",
        f"MEASURED_SECONDS = {seconds(m)}   # cold `pytest -q` here, reference files, 2 cores (median of 3)",
        "",
        "GROUPS = {",
        *[f"    {g!r}: ({pts}, {m.about[g]!r})," for g, pts in m.checks.items()],
        "}",
        "",
        "CAUSES = {",
        *[f"    {c!r}: {texts[c]!r}," for c in cited],
        "}",
        "",
        "# the public tests whose failure messages name each group (what check(group) runs)",
        "TESTS_OF_GROUP = {",
        *[f"    {g!r}: {tested[g]!r}," for g in m.checks if g in tested],
        "}",
        "",
        "FORBIDDEN = [",
        *[f"    ({f.where!r}, {list(f.names)!r}, {f.plain!r})," for f in m.forbidden],
        "]",
        "",
        "",
        "def group(name):",
        '    """The words for a hidden check group: its name, points and what it checks (course.yaml), e.g.',
        '    "hidden check group `shapes` (1 point: ...)"."""',
        "    points = GROUPS[name][0]",
        "    return f\"hidden check group `{name}` ({points} point{'s' if points != 1 else ''}: {GROUPS[name][1]})\"",
        "",
        "",
        "def cause(mistake_id):",
        '    """The grader\'s likely-cause sentence for one known mistake."""',
        "    return \"Likely cause: \" + CAUSES[mistake_id]",
        "",
        "",
        "def check(group_name):",
        '    """Run the public tests of one hidden check group on the files of this folder (the notebook\'s',
        '    Autograded cells call this) and print: passed, or the first failure\'s message. The tests run in a',
        '    fresh Python process: they see your files as saved now, and nothing they do stays in your notebook."""',
        "    import os",
        "    import subprocess",
        "    import sys",
        "    folder = os.path.dirname(os.path.abspath(__file__))",
        "    done = subprocess.run([sys.executable, '-c', f'import testkit; testkit._check_here({group_name!r})'],",
        "                          cwd=folder, capture_output=True, text=True)",
        "    print(done.stdout.rstrip() or 'The public tests could not run: ' + (done.stderr.strip().splitlines() or",
        "                                                                        ['no output'])[-1])",
        "",
        "",
        "def _check_here(group_name):",
        "    import os",
        "    import pytest",
        "",
        "    class _Collect:",
        "        def __init__(self):",
        "            self.passed, self.failed = 0, []",
        "",
        "        def pytest_collectreport(self, report):",
        "            if report.failed:",
        "                self.failed.append(report)",
        "",
        "        def pytest_runtest_logreport(self, report):",
        "            if report.failed:",
        "                self.failed.append(report)",
        "            elif report.when == 'call' and report.passed:",
        "                self.passed += 1",
        "",
        "    names = TESTS_OF_GROUP.get(group_name, [])",
        "    points = GROUPS[group_name][0]",
        "    print(f\"Public tests for `{group_name}` ({points} point{'s' if points != 1 else ''}): \", end='')",
        "    if not names:",
        "        print('no public test names this group yet; run `pytest -q` in this folder for all of them.')",
        "    else:",
        "        folder = os.path.dirname(os.path.abspath(__file__))",
        "        collect = _Collect()",
        "        # pytest's own report off (no dots, no colour codes): this cell prints one plain line.",
        "        code = pytest.main(['-x', '-p', 'no:cacheprovider', '-p', 'no:terminal', '-k', ' or '.join(names),",
        "                            folder], plugins=[collect])",
        "        if collect.failed:",
        "            print(f'FAILED {collect.failed[0].nodeid.split(\"::\")[-1] or \"(collecting the tests)\"}:',",
        "                  _message(collect.failed[0]))",
        "        elif code != 0 or not collect.passed:",
        "            print(f'the tests did not run (pytest exit code {int(code)}); run `pytest -q` in this folder to see why.')",
        "        else:",
        "            print(f'{collect.passed} passed.')",
        "    print('The hidden checks decide the points for this group when your work is graded: they test more than the',",
        "          'public tests do, so a pass here is a good sign, not a promise.')",
        "",
        "",
        "def _message(report):",
        "    \"\"\"A failed test's own message (the assertion's text, or the exception), without pytest's markup.\"\"\"",
        "    crash = getattr(report.longrepr, 'reprcrash', None)",
        "    text = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]",
        "    text = text.split('\\nassert ')[0]",
        "    text = text[len('E '):].strip() if text.startswith('E ') else text",
        "    return text[len('AssertionError: '):] if text.startswith('AssertionError: ') else text",
        "",
        "",
        "_EXPECTED = []   # (exception type, where) a test expects, inside `expecting`: they pass through `guarded`",
        "",
        "",
        "def describe(value):",
        '    """A value in a few words: a tensor as its shape and dtype."""',
        "    if isinstance(value, torch.Tensor):",
        "        return f\"[{', '.join(map(str, value.shape))}] {str(value.dtype).replace('torch.', '')}\"",
        "    return repr(value)",
        "",
        "",
        "def guarded(fn, copies=False):",
        '    """Your function or method, called as usual; if it raises, the test fails with one sentence saying which',
        '    call failed with which inputs (the original traceback is printed above it). With copies=True your code gets',
        '    copies of the tensor arguments, so an input changed in place fails only the test that looks for that."""',
        "    @functools.wraps(fn)",
        "    def call(*args, **kwargs):",
        "        if copies:",
        "            args, kwargs = _copied(args), dict(zip(kwargs, _copied(kwargs.values())))",
        "        try:",
        "            return fn(*args, **kwargs)",
        "        except Exception as e:",
        "            if any(isinstance(e, error) for error, _ in _EXPECTED):",
        "                raise",
        "            import pytest",
        "            try:",
        "                items = inspect.signature(fn).bind(*args, **kwargs).arguments.items()",
        "            except TypeError:",
        "                items = [*((None, a) for a in args), *kwargs.items()]",
        "            inputs = ', '.join(describe(v) if k is None else f'{k}={describe(v)}' for k, v in items if k != 'self')",
        "            wanted = ''.join(f' ({error.__name__} expected here) {where}'.rstrip() for error, where in _EXPECTED[-1:])",
        "            raise pytest.fail.Exception(f'{fn.__qualname__}({inputs}) raised {type(e).__name__}: {e}{wanted}') from e",
        "    return call",
        "",
        "",
        "def _copied(values):",
        '    """The values with every tensor cloned (still connected to autograd), not counted by TorchCalls."""',
        "    global _COPYING",
        "    _COPYING = True",
        "    try:",
        "        return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]",
        "    finally:",
        "        _COPYING = False",
        "",
        "",
        "_COPYING = False",
        "",
        "",
        "@contextlib.contextmanager",
        "def expecting(error, where=''):",
        '    """Inside `with expecting(ValueError, where):`, that error passes through `guarded`; another one fails the',
        '    test saying that `error` was expected, and `where` (the hidden check group)."""',
        "    _EXPECTED.append((error, where))",
        "    try:",
        "        yield",
        "    finally:",
        "        _EXPECTED.pop()",
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
        "        if not _COPYING:",
        "            self.names.append(getattr(func, '__name__', str(func)))",
        "        return func(*args, **(kwargs or {}))",
        "",
        "    @property",
        "    def count(self):",
        "        return len(self.names)",
        "",
    ]
    return "\n".join(lines)
