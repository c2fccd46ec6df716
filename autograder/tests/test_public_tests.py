"""The public tests students run: green on the reference, red (not crashing) on the stub."""
from __future__ import annotations

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
