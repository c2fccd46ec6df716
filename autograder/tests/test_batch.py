"""Batch grading: submission layouts, a small class end to end (twice: same seed, same scores),
the Gradescope bundle run against a simulated /autograder tree, the GitHub Classroom workflow."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml

from autograder import config
from autograder.integrations.batch import classroom, gradescope
from autograder.integrations.batch.collect import collect
from autograder.integrations.batch.progress import Progress
from autograder.integrations.batch.run import grade_class
from autograder.sandbox.bwrap import works as bwrap_works
from autograder.sandbox.slot import _wipe
from derived import find, subject_text

COURSE = config.load()
M1 = COURSE.milestone("m1")
REF = COURSE.root / "solutions" / "m1_attention" / "attention.py"
STUB = COURSE.root / "assignments" / "m1_attention" / "attention.py"
# A mutant is written as the reference plus what differs (derived.py): its whole text is what is graded.
MUTANT = subject_text(find(COURSE.root / "autograder" / "tests" / "mutants" / "m1", "no_sqrt_scale"), COURSE, "m1")


@pytest.fixture
def tmp():
    d = Path(tempfile.mkdtemp(prefix="batch-test-"))
    yield d
    assert d.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    shutil.rmtree(d, ignore_errors=True)


def test_collect_accepts_folders_nbgrader_and_zips(tmp):
    (tmp / "a" / "ann" / "m1_attention").mkdir(parents=True)
    shutil.copy(REF, tmp / "a" / "ann" / "m1_attention" / "attention.py")
    (tmp / "a" / "bo").mkdir()
    shutil.copy(REF, tmp / "a" / "bo" / "attention.py")
    (tmp / "a" / "cy").mkdir()                                 # nothing to grade
    (tmp / "a" / "di").mkdir()
    os.symlink(REF, tmp / "a" / "di" / "attention.py")           # a link to the solution: refused
    found = {f.student: f for f in collect(tmp / "a", M1, tmp / "stage")}
    assert found["ann"].path.name == "m1_attention" and found["bo"].path is not None
    assert found["cy"].path is None and "no attention.py" in found["cy"].problem
    assert found["di"].path is None and "symbolic link" in found["di"].problem

    nb = tmp / "course" / "submitted" / "eve" / "m1_attention"
    nb.mkdir(parents=True)
    cells = [{"cell_type": "code", "source": ["%matplotlib inline\n", "x = 1\n"]},
             {"cell_type": "markdown", "source": "text"}, {"cell_type": "code", "source": REF.read_text()}]
    (nb / "attention.ipynb").write_text(json.dumps({"cells": cells}))
    (found_nb,) = collect(tmp / "course", M1, tmp / "stage")
    assert found_nb.student == "eve"
    text = (found_nb.path / "attention.py").read_text()
    assert "%matplotlib" not in text and "def scaled_dot_product_attention" in text

    zips = tmp / "zips"
    zips.mkdir()
    with zipfile.ZipFile(zips / "smithjane_1234_5678_attention.zip", "w") as z:
        z.writestr("work/attention.py", REF.read_text())
    with zipfile.ZipFile(zips / "mallory.zip", "w") as z:           # a path out of the archive: refused
        z.writestr("attention.py", REF.read_text())
        z.writestr("../evil.py", "x")
    with zipfile.ZipFile(zips / "kim.zip", "w") as z:
        z.writestr("notes.txt", "no code")
    (zips / "broken.zip").write_bytes(b"not a zip")
    found = {f.student: f for f in collect(zips, M1, tmp / "stage2")}
    assert (found["smithjane"].path / "attention.py").read_text() == REF.read_text()
    assert found["kim"].path is None and "holds no attention.py" in found["kim"].problem
    assert found["broken"].path is None
    assert found["mallory"].path is None and "outside the archive" in found["mallory"].problem
    assert not (tmp / "evil.py").exists()


def test_wipe_refuses_paths_outside_a_batch_folder(tmp):
    with pytest.raises(RuntimeError):
        _wipe(tmp, tmp.parent)
    with pytest.raises(RuntimeError):
        _wipe(COURSE.root / "solutions", COURSE.root)


def test_small_class_end_to_end_and_regrade_reproduces_scores(tmp):
    subs = tmp / "subs"
    for name, text in (("ref", REF.read_text()), ("stub", STUB.read_text()), ("mutant", MUTANT)):
        (subs / name).mkdir(parents=True)
        (subs / name / "attention.py").write_text(text)
    err = io.StringIO()
    first = grade_class(subs, "m1", tmp / "out1", jobs=2, course=COURSE, stream=err)
    assert "3/3" in err.getvalue() and "left" in err.getvalue()
    assert first.results["ref"].score == 20 and first.results["stub"].score == 0
    assert 0 < first.results["mutant"].score < 20
    out = tmp / "out1"
    rows = list(csv.DictReader(open(out / "grades.csv")))
    assert [r["student"] for r in rows] == ["mutant", "ref", "stub"]
    assert set(M1.checks) <= set(rows[0]) and {r["seed"] for r in rows} == {str(COURSE.seed)}
    assert json.loads((out / "results" / "ref" / "results.json").read_text())["score"] == 20
    assert "Every check passed" in (out / "feedback" / "ref.txt").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["students"] == 3 and summary["full_marks"] == 1 and summary["most_failed"]
    assert "Checks the class fails most" in (out / "summary.md").read_text()

    again = grade_class(subs, "m1", tmp / "out2", jobs=1, course=COURSE, progress=False)
    def table(run):
        return {s: [(c.name, c.score, c.message) for c in r.checks] for s, r in run.results.items()}
    assert table(again) == table(first)


def test_progress_bar_plain_lines_when_not_a_tty():
    out = io.StringIO()
    p = Progress(20, "m1", out)
    for i in range(20):
        p.update(20 if i % 2 else 0, 20)
    lines = out.getvalue().splitlines()
    assert 10 <= len(lines) <= 11 and lines[-1].startswith("m1 [####") and "20/20" in lines[-1]
    assert "full marks 10, zero 10" in lines[-1]


def test_gradescope_bundle_runs_against_a_simulated_autograder_tree(tmp):
    bundle = gradescope.write_bundle(COURSE, "m1", tmp / "gs.zip")
    names = zipfile.ZipFile(bundle).namelist()
    assert {"setup.sh", "run_autograder", "source/course.yaml", "source/autograder/cli.py"} <= set(names)
    assert not any("/tests/" in n for n in names)
    setup = zipfile.ZipFile(bundle).read("setup.sh").decode()
    assert "torch==2.13.0" in setup and "download.pytorch.org/whl/cpu" in setup
    root = tmp / "autograder"
    (root / "source").mkdir(parents=True)
    zipfile.ZipFile(bundle).extractall(root / "source")
    for f in ("setup.sh", "run_autograder"):
        shutil.move(root / "source" / f, root / f)
        os.chmod(root / f, 0o755)
    (root / "submission" / "nested").mkdir(parents=True)
    (root / "submission" / "nested" / "attention.py").write_text(MUTANT)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    r = subprocess.run([str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300,
                       cwd=str(tmp))
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads((root / "results" / "results.json").read_text())
    assert 0 < data["score"] < data["max_score"] == 20
    assert {t["name"] for t in data["tests"]} == set(M1.checks)
    # The isolation is mentioned only where it did not work.
    assert ("NOT isolated" in data["output"]) == (not bwrap_works()[0])


@pytest.mark.parametrize("mid", [m.id for m in COURSE.milestones])
def test_gradescope_bundle_loads_the_milestones_checks_and_their_tables(tmp, mid):
    """The bundle carries what its checks read at import (deviations.yaml), not only the .py files."""
    with zipfile.ZipFile(gradescope.write_bundle(COURSE, mid, tmp / "gs.zip")) as z:
        z.extractall(tmp)
    r = subprocess.run([sys.executable, "-c", f"import autograder.milestones.{mid}.checks"], cwd=tmp / "source",
                       env=dict(os.environ, PYTHONPATH=str(tmp / "source")), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_classroom_workflow_runs_every_public_test_with_the_milestone_points(tmp):
    path = classroom.write_workflow(COURSE, "m1", tmp)
    wf = yaml.safe_load(path.read_text())
    steps = wf["jobs"]["run-autograding-tests"]["steps"]
    graders = [s for s in steps if "autograding-command-grader" in s.get("uses", "")]
    tests = classroom.public_tests(COURSE, "m1")
    assert [s["with"]["test-name"] for s in graders] == [t for _, t in tests]
    assert sum(s["with"]["max-score"] for s in graders) == M1.max_score
    reporter = steps[-1]
    assert reporter["with"]["runners"].split(",") == [s["id"] for s in graders]
    assert all(f"{s['id'].upper()}_RESULTS" in reporter["env"] for s in graders)
