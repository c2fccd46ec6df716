"""The adversarial corpus: every hostile submission in tests/hostile/m1/ (each stored as what it adds to the
reference or the stub, see derived.py) graded in ONE parallel batch,
once in the default sandbox (bubblewrap when it works) and once in resource-limits mode on purpose.

SAFETY: each corpus file is harmless even if run unsandboxed as root (the memory bomb stops at 6 GB,
the fork bomb at 300 children that sleep 20 s, the network attempt is a 2 s connect to
10.255.255.1:9, the "delete files" one deletes only files it created itself inside a temp folder).
They are only ever run through `grade_class`, which copies each into a fresh temp folder, never
with a working directory inside the repository.

Each entry: the exact score (never more than the honest work earns), the groups that must fail,
and words the student's message must contain. The reference, graded in the same batch, must keep
full marks: one hostile submission never affects another.
"""
from __future__ import annotations

import csv
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder import config
from autograder.integrations.batch.run import grade_class
from autograder.sandbox.bwrap import works as bwrap_works
from autograder.sandbox.slot import files_restricted
from derived import subject_files, subject_text

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "hostile" / "m1"
COURSE = config.load()
ALL = set(COURSE.milestone("m1").checks)

# name: (score, groups that fail, text in the first failure's message, needs file isolation: bubblewrap or Landlock)
EXPECTED = {
    "infinite_loop":    (18, {"mask_helpers"}, "did not finish within", False),
    "memory_bomb":      (18, {"mask_helpers"}, "allocate memory", False),
    "fork_bomb":        (18, {"mask_helpers"}, "Resource temporarily unavailable", False),
    "sys_exit_import":  (0, ALL, "SystemExit: 3", False),
    "os_exit_import":   (0, ALL, "exited with status 7", False),
    "syntax_error":     (0, ALL, "SyntaxError", False),
    "import_exception": (0, ALL, "configuration file not found", False),
    "missing_function": (18, {"mask_helpers"}, "has no function causal_mask", False),
    # Code that computes nothing right earns nothing for how it is written either.
    "wrong_types":      (2, ALL - {"mask_helpers"}, "should be a tensor", False),
    "wrong_shapes":     (8, {"mask_helpers", "shapes", "masking", "parity", "stability", "dropout"}, "shape", False),
    # Its softmax gives NaN: charged in softmax; attention is graded with a correct stand-in.
    "nan_outputs":      (12, {"softmax", "stability", "vectorization", "from_scratch", "dtype_inplace"}, "NaN", False),
    # No network: a namespace under bubblewrap, the system-call filter (no sockets) without it.
    "network":          (0, ALL, "could not reach the answer server", False),
    # Its own work is the stub: 0. The repository is out of reach (bubblewrap's mounts, or Landlock).
    "read_solution":    (0, ALL, "not implemented yet", True),
    # Patching torch/numpy in the worker cannot touch the judge: scored like its naive softmax.
    "monkeypatch":      (16, {"softmax", "stability"}, "NaN", False),
    "fake_results":     (0, ALL, "not implemented yet", False),
    "print_100mb":      (18, {"mask_helpers"}, "printed more than", False),
    # Workers may not write files (the syscall filter refuses every write), so its import fails.
    "delete_files":     (0, ALL, "Permission denied", False),
    # It also ignores dropout_p (F.scaled_dot_product_attention is called without it).
    "forbidden_api":    (18, {"from_scratch", "dropout"}, "scaled_dot_product_attention", False),
    "stdlib_imports":   (20, set(), "", False),
}
SANDBOXED = bwrap_works()[0]


@pytest.fixture(scope="module", params=["auto", "rlimits"])
def batch(request):
    """The whole corpus in one batch: in the default sandbox, and in resource-limits mode on purpose
    (the mode every machine without bubblewrap uses: correct code must still get full marks there)."""
    work = Path(tempfile.mkdtemp(prefix="corpus-test-"))
    try:
        subs = work / "subs"
        for path in subject_files(CORPUS):           # one student folder each, with the file's whole text
            (subs / path.stem).mkdir(parents=True)
            (subs / path.stem / "attention.py").write_text(subject_text(path, COURSE, "m1"))
        (subs / "reference").mkdir()
        shutil.copy(COURSE.root / "solutions" / "m1_attention" / "attention.py", subs / "reference")
        run = grade_class(subs, "m1", work / "out", jobs=2, course=COURSE, progress=False, sandbox=request.param)
        yield run, work / "out"
    finally:
        assert work.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
        shutil.rmtree(work, ignore_errors=True)


def test_every_corpus_entry_has_an_expectation():
    assert {p.stem for p in subject_files(CORPUS)} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_submission_outcome(batch, name):
    run, out = batch
    score, failing, words, needs_isolation = EXPECTED[name]
    if needs_isolation and not (run.sandbox.mode == "bwrap" or files_restricted()):
        pytest.skip("neither bubblewrap nor Landlock on this kernel: files are not isolated (the report says so)")
    r = run.results[name]
    assert {c.name for c in r.checks if not c.passed} == failing, [(c.name, c.message[:120]) for c in r.checks]
    assert r.score == score
    assert not r.internal_errors
    if failing:
        first = next(c for c in r.checks if not c.passed)
        assert words in first.message, first.message
    # What the platforms receive is the judge's score, whatever the submission wrote.
    data = json.loads((out / "results" / name / "results.json").read_text())
    assert data["score"] == score and data["max_score"] == 20
    assert any("NOT isolated" in n for n in r.notes) == (run.sandbox.mode != "bwrap")


def test_the_rest_of_the_batch_is_unaffected(batch):
    run, out = batch
    assert run.results["reference"].score == 20
    rows = {row["student"]: row for row in csv.DictReader(open(out / "grades.csv"))}
    assert set(rows) == set(EXPECTED) | {"reference"}
    assert rows["reference"]["score"] == "20"
    # The infinite loop cost one probe timeout, not the whole milestone time limit.
    assert run.results["infinite_loop"].elapsed < 60


def test_sandbox_mode_is_stated(batch):
    run, out = batch
    summary = (out / "summary.md").read_text()
    assert run.sandbox.mode in (("bwrap",) if SANDBOXED else ()) + ("rlimits",)
    assert ("NOT isolated" in summary) == (run.sandbox.mode != "bwrap")
