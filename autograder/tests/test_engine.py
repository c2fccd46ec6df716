"""The engine survives broken submissions and reports what happened, in the student's terms.

Every submission here is harmless code (a loop, an exit, an exception); hostile code is only ever
graded through the batch grader's sandbox (see test_batch*.py).
"""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from autograder import cli
from autograder.grading import report
from autograder.grading.grade import grade
from conftest import COURSE
from derived import TESTS, find, subject_text


def hostile(name: str) -> str:
    """The whole text of a file of the hostile corpus (stored as what it adds to the reference or stub)."""
    return subject_text(find(TESTS / "hostile" / "m1", name), COURSE, "m1")

REFERENCE = (COURSE.root / "solutions" / "m1_attention" / "attention.py").read_text()
FAST = dataclasses.replace(COURSE, milestones=tuple(
    dataclasses.replace(m, probe_timeout=6.0) for m in COURSE.milestones))


def by_name(result):
    return {c.name: c for c in result.checks}


def test_hang_in_one_function_fails_only_its_checks(grade_text):
    text = REFERENCE.replace("def padding_mask(tokens, pad_id):", "def padding_mask(tokens, pad_id):\n    while True:\n        pass\n", 1)
    r = grade_text("m1", text, course=FAST, name="hang")
    checks = by_name(r)
    assert checks["mask_helpers"].score == 0
    assert "did not finish within 6 s" in checks["mask_helpers"].message
    assert all(c.passed for n, c in checks.items() if n != "mask_helpers"), report.feedback(r)


def test_exit_at_import_is_reported(grade_text):
    r = grade_text("m1", "import os\nos._exit(3)\n" + REFERENCE, name="exit")
    assert r.score == 0
    for c in r.checks:
        assert "importing your file" in c.message and "exited with status 3" in c.message, c.message


def test_sys_exit_in_function_is_reported(grade_text):
    text = REFERENCE.replace('    x_max = x.amax(dim=dim, keepdim=True)', '    raise SystemExit(1)', 1)
    r = grade_text("m1", text, name="sysexit")
    assert by_name(r)["softmax"].score == 0
    assert "sys.exit" in by_name(r)["softmax"].message
    assert by_name(r)["mask_helpers"].passed


def test_syntax_error_is_explained(grade_text):
    r = grade_text("m1", REFERENCE.replace("def causal_mask(size, device=None):", "def causal_mask(size, device=None)", 1),
                   name="syntax")
    assert r.score == 0
    message = by_name(r)["softmax"].message
    assert "could not be imported" in message and "SyntaxError" in message


def test_exception_shows_only_student_frames(grade_text):
    text = REFERENCE.replace("    x_max = x.amax(dim=dim, keepdim=True)", "    x_max = helper(x)", 1)
    text += "\n\ndef helper(x):\n    return x.amax(dim=7)\n"
    message = by_name(grade_text("m1", text, name="exc"))["softmax"].message
    assert "IndexError" in message and 'File "attention.py"' in message and "in helper" in message
    assert "autograder" not in message and "worker" not in message and "site-packages" not in message
    assert "<string>" not in message and "op_call" not in message


def test_missing_function_is_named(grade_text):
    text = REFERENCE.replace("def causal_mask(", "def causal_mask_(", 1)
    message = by_name(grade_text("m1", text, name="missing"))["mask_helpers"].message
    assert "has no function causal_mask" in message


def test_printing_does_not_break_grading(grade_text):
    text = REFERENCE.replace('    x_max = x.amax(dim=dim, keepdim=True)',
                             '    print("debug " * 2000)\n    x_max = x.amax(dim=dim, keepdim=True)', 1)
    r = grade_text("m1", text, name="print")
    assert r.score == r.max_score


def test_wrong_return_value_is_described(grade_text):
    text = REFERENCE.replace("    return output, weights\n", "    return output\n", 1)
    message = by_name(grade_text("m1", text, name="single"))["shapes"].message
    assert "should return a pair (output, weights)" in message


def test_total_time_limit_stops_grading(grade_text):
    slow = dataclasses.replace(COURSE, milestones=tuple(
        dataclasses.replace(m, probe_timeout=2.0, total_timeout=3.0) for m in COURSE.milestones))
    text = REFERENCE.replace("def softmax(x, dim=-1):", "def softmax(x, dim=-1):\n    import time\n    time.sleep(5)\n", 1)
    r = grade_text("m1", text, course=slow, name="slow")
    assert any("total time limit" in c.message for c in r.checks)
    assert r.score < r.max_score


def test_same_seed_same_result_and_seed_is_recorded(grade_text):
    text = REFERENCE.replace("/ math.sqrt(d_k)", "/ d_k", 1)
    a, b = (grade_text("m1", text, seed=7, name="det") for _ in range(2))
    assert a.seed == b.seed == 7
    assert [(c.name, c.score, c.message) for c in a.checks] == [(c.name, c.score, c.message) for c in b.checks]
    assert report.gradescope(a)["extra_data"]["seed"] == 7


def test_m2_ignores_a_broken_attention_in_the_submission(tmp_path):
    (tmp_path / "multihead.py").write_text((COURSE.root / "solutions/m2_multihead/multihead.py").read_text())
    (tmp_path / "attention.py").write_text("raise RuntimeError('my broken milestone 1')\n")
    r = grade(tmp_path, "m2", course=COURSE)
    assert r.score == r.max_score, report.feedback(r)
    assert [(f.name, f.source) for f in r.files] == [("multihead.py", "yours"), ("attention.py", "reference from m1")]
    assert "attention.py (reference from m1)" in report.feedback(r)


def test_cli_grade_writes_gradescope_json(tmp_path, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "attention.py").write_text(REFERENCE.replace("/ math.sqrt(d_k)", "", 1))
    out = tmp_path / "results.json"
    assert cli.main(["grade", str(sub), "-m", "m1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["max_score"] == 20 and 0 < data["score"] < 20
    assert {"name", "score", "max_score", "output", "visibility"} <= set(data["tests"][0])
    assert [t["name"] for t in data["tests"]] == list(COURSE.milestone("m1").checks)
    printed = capsys.readouterr().out
    assert "total" in printed and "Likely cause" in printed and "sqrt(d_k)" in printed


@pytest.mark.parametrize("args, needle", [
    (["grade", "/nonexistent/folder", "-m", "m1"], "is not a folder"),
    (["grade", ".", "-m", "m9"], "unknown milestone 'm9'"),
    (["grade", "autograder", "-m", "m1"], "has no attention.py"),
])
def test_cli_refuses_what_it_cannot_grade(args, needle, capsys):
    assert cli.main(args) == 2
    assert needle in capsys.readouterr().err


def test_course_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "autograder.cli", "--help"], capture_output=True, text=True,
                         cwd=COURSE.root).stdout
    for command in ("build", "grade", "demo"):
        assert command in out


def test_course_grade_runs_student_code_in_the_sandbox(tmp_path, capsys):
    """The steal-the-reference file: its own work is the stub; inside the sandbox it finds nothing."""
    from autograder.sandbox.bwrap import works as bwrap_works
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "attention.py").write_text(hostile("read_solution"))
    out = tmp_path / "r.json"
    assert cli.main(["grade", str(sub), "-m", "m1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    printed = capsys.readouterr().out
    if bwrap_works()[0]:
        assert data["score"] == 0, printed
        assert "NOT isolated" not in printed and "FOUND" not in printed
    else:
        assert printed.count("NOT isolated") == 1


def test_resource_limits_mode_is_said_once_and_correct_code_keeps_full_marks(tmp_path, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "attention.py").write_text(hostile("stdlib_imports"))
    assert cli.main(["grade", str(sub), "-m", "m1", "--sandbox", "rlimits"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("NOT isolated") == 1 and re.search(r"total +20 / 20", printed), printed


# ---- which student callables share a helper (grading/shared_code.py) -----------------------------

SHARED = '''
import torch

def _loop(model, pick):            # the helper both functions run
    return pick(model)

@staticmethod
def greedy_decode(model):
    return _loop(model, lambda m: m)

def sample_decode(model):
    return _loop(model, lambda m: m)

def beam_search(model):
    return model

class KVCache:
    def step(self):
        return beam_search(self)
'''


def test_shared_helpers_are_found_from_the_text_alone():
    from autograder.grading.shared_code import common_helper, shared_helpers
    reach = shared_helpers(SHARED, api={"greedy_decode", "sample_decode", "beam_search", "KVCache"})
    assert common_helper(reach, "greedy_decode", "sample_decode") == "_loop"
    assert common_helper(reach, "greedy_decode", "beam_search") is None
    assert common_helper(reach, "KVCache", "beam_search") is None        # an API function is not a helper


@pytest.mark.parametrize("source", ["x = " + "+".join(["1"] * 100_000), "def f(:\n  (", "'''unterminated", "\0\xff"])
def test_shared_helpers_of_any_text_is_a_plain_answer(source):
    """No student text makes the analysis raise or hang (it only tokenizes: no ast, which is not thread-safe)."""
    from autograder.grading.shared_code import shared_helpers
    assert isinstance(shared_helpers(source, set()), dict)
