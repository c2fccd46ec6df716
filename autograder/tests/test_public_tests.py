"""The public tests students run: green on the reference, red (not crashing) on the stub."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import COURSE


def run_public_tests(tmp_path, m, use_reference):
    folder = tmp_path / m.folder
    shutil.copytree(COURSE.root / "assignments" / m.folder, folder,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    if use_reference:
        for f in m.files:
            shutil.copy(COURSE.root / "solutions" / m.folder / f, folder / f)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=folder,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("m", COURSE.milestones, ids=lambda m: m.id)
def test_public_tests_pass_on_reference(tmp_path, m):
    r = run_public_tests(tmp_path, m, use_reference=True)
    assert r.returncode == 0, r.stdout[-3000:]


@pytest.mark.parametrize("m", COURSE.milestones, ids=lambda m: m.id)
def test_public_tests_fail_on_stub_with_not_implemented(tmp_path, m):
    r = run_public_tests(tmp_path, m, use_reference=False)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "passed" not in r.stdout.splitlines()[-1], r.stdout[-1000:]
    assert "NotImplementedError" in r.stdout


def _notebook_check(folder, group):
    """What an Autograded cell prints: testkit.check(group) in the folder, as a colour-forcing kernel would."""
    code = f"import testkit; testkit.check({group!r})"
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FORCE_COLOR": "1", "PY_COLORS": "1"}).stdout


def test_an_autograded_cell_prints_one_plain_line_per_result(tmp_path):
    """Pass: the count. Fail: the failing test's own message, not pytest's markup (dots, colour codes, `E`)."""
    m = COURSE.milestone("m1")
    run_public_tests(tmp_path, m, use_reference=True)
    folder = tmp_path / m.folder
    out = _notebook_check(folder, "softmax")
    assert out.startswith("Public tests for `softmax` (2 points): ") and " passed.\n" in out, out
    assert "The hidden checks decide the points" in out and "\x1b[" not in out and "...." not in out, out
    source = (folder / "attention.py").read_text()
    (folder / "attention.py").write_text(source.replace("if dropout_p > 0.0:", "if False:", 1))
    out = _notebook_check(folder, "dropout")
    first = out.splitlines()[0]
    assert first.startswith("Public tests for `dropout` (1 point): FAILED test_"), out
    assert "\x1b[" not in out and "hidden check group `dropout`" in first and " E " not in first, out
