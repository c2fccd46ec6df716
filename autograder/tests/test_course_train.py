"""The course's promise, end to end: the six reference files, assembled and trained by `course train` in
the sandbox, learn the toy task; the KV cache and beam search work on the trained model; a broken
student file stops training with a sentence naming that file and line.

The training test takes about a minute on 2 cores (CI); `make test-fast` leaves it out."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from autograder import config
from autograder.authoring import markers
from autograder.capstone import train

COURSE = config.load()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    log = io.StringIO()
    result = train.train(COURSE, None, out, stream=log)
    return out, result, log.getvalue()


def test_reference_learns_reverse_on_unseen_inputs(trained):
    out, result, log = trained
    assert result["test_size"] == train.DEFAULTS["n_test"]
    assert result["exact_match_greedy"] >= 0.99, log
    assert result["exact_match_beam"] >= 0.99, log
    # The KV cache changes the cost, never the tokens.
    assert result["cached_same_as_greedy"] == result["test_size"], log
    assert result["steps"] <= train.DEFAULTS["steps"]
    for f in ("model.pt", "training.png", "attention.png", "summary.json"):
        assert (out / f).is_file(), f
    assert result["attention_png"].startswith("saved for"), result["attention_png"]


def test_report_says_what_a_student_needs(trained):
    _, result, _ = trained
    text = io.StringIO()
    train.report(result, text)
    text = text.getvalue()
    assert "exact match (greedy): " in text and f"exact match (beam {train.DEFAULTS['beam']})" in text
    assert "KV-cached greedy: identical outputs" in text
    assert "did not reach 99%" not in text


def test_translate_with_the_checkpoint(trained):
    out, _, _ = trained
    for beam in (None, 3):
        assert train.translate(COURSE, out / "model.pt", "abcde", beam=beam) == "edcba"


def test_a_crash_in_a_student_file_names_the_file_and_line(tmp_path):
    """`course train --from` with a model.py whose forward fails: the error names model.py and its line."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for m in COURSE.milestones:
        for f in m.files:
            text = markers.make_reference((COURSE.root / "solutions" / m.folder / f).read_text(), f)
            if f == "model.py":
                text = text.replace("    def forward(self, src, tgt, src_mask=None, tgt_mask=None):",
                                    "    def forward(self, src, tgt, src_mask=None, tgt_mask=None):\n"
                                    "        raise RuntimeError('my forward is not done')", 1)
                assert "my forward is not done" in text, "the reference's forward signature changed"
            (folder / f).write_text(text)
    with pytest.raises(train.TrainError, match=r"model\.py, line \d+: my forward is not done"):
        train.train(COURSE, folder, tmp_path / "out", {"steps": 5}, stream=io.StringIO())


def test_missing_files_are_named(tmp_path):
    (tmp_path / "attention.py").write_text("")
    with pytest.raises(train.TrainError, match="has no multihead.py"):
        train.train(COURSE, tmp_path, tmp_path / "out", stream=io.StringIO())
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
