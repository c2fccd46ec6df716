"""The integrity corpus on the other paths that grade: `course grade`, the pytest plugin and Gradescope's
grading entry, each with bubblewrap (when it works) and in resource-limits mode on purpose. The batch
path grades the whole corpus (test_integrity_corpus.py); here one attack per path shows that the path
goes through the same guarded worker and reports what it found.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import config
from derived import find, subject_text

HERE = Path(__file__).resolve().parent
COURSE = config.load()
MODES = ["auto", "rlimits"]


def attack_folder(tmp_path: Path, name: str) -> Path:
    """tests/integrity/m1/<name>.py as a submission folder."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "attention.py").write_text(subject_text(find(HERE / "integrity" / "m1", name), COURSE, "m1"))
    return folder


@pytest.mark.parametrize("mode", MODES)
def test_course_grade_flags_a_frame_walk(tmp_path, mode):
    folder = attack_folder(tmp_path, "frame_walk_counts")
    out = tmp_path / "results.json"
    r = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", str(folder), "-m", "m1", "--sandbox", mode,
                        "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=COURSE.root)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stack frame" in r.stdout and "Not judged" in r.stdout, r.stdout[-3000:]
    data = json.loads(out.read_text())
    assert data["extra_data"]["integrity"]["flag"] == "tamper"
    assert {t["name"]: t["score"] for t in data["tests"]}["vectorization"] == 0


@pytest.mark.parametrize("mode", MODES)
def test_pytest_plugin_flags_switched_off_modes(tmp_path, mode):
    folder = attack_folder(tmp_path, "disable_modes_forbidden")
    r = subprocess.run([sys.executable, "-m", "pytest", str(COURSE.root / "autograder" / "integrations" / "pytest_plugin"), "-q",
                        "-p", "no:cacheprovider", "--submission", str(folder), "--milestone", "m1", "--sandbox", mode,
                        "-k", "parity or from_scratch"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1, r.stdout[-2000:]
    assert "torch._C.DisableTorchFunction" in r.stdout and "2 failed" in r.stdout, r.stdout[-3000:]


@pytest.mark.parametrize("mode", MODES)
def test_gradescope_flags_a_mode_probe(tmp_path, mode):
    from autograder.integrations.batch.gradescope import grade_submission
    folder = attack_folder(tmp_path, "probe_observed_loop")
    data = grade_submission("m1", folder, tmp_path / "results" / "results.json", mode)
    assert data["extra_data"]["integrity"]["flag"] == "tamper", data["extra_data"]
    assert "_get_current_dispatch_mode" in " ".join(data["extra_data"]["integrity"]["evidence"])
    assert data["score"] <= 12


def test_every_helper_of_the_worker_is_registered_as_the_workers_own_code():
    """guard.start marks as the worker's own code the functions worker_main returns; a helper missing from that
    list would count as the student's code wherever the guard asks whose frame did something."""
    import ast

    from autograder.sandbox import worker
    main = next(n for n in ast.parse(Path(worker.__file__).read_text()).body
                if isinstance(n, ast.FunctionDef) and n.name == "worker_main")
    defined = {n.name for n in main.body if isinstance(n, ast.FunctionDef)} | {
        f"{c.name}.{m.name}" for c in main.body if isinstance(c, ast.ClassDef)
        for m in c.body if isinstance(m, ast.FunctionDef)}
    returned = next(n.value for n in main.body if isinstance(n, ast.Return))
    listed = {ast.unparse(e) for e in returned.elts[1].elts}
    assert len(defined) > 30 and defined <= listed | {"worker_main"}, sorted(defined - listed)
