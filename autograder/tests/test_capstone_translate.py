"""The translation capstone (issue 22): English -> French with the six files, scored with sacrebleu.

Fast tests: the shipped data and its attribution, the split by English sentence, the course's word
tokenizer, multi-reference sacrebleu scores, and that the child's job never holds a French reference
of a held-out sentence.

Slow tests (run by `make test`, so by CI; `make test-fast` leaves them out):
- CI's short run: the reference trained for a fixed number of steps (520: about 3 minutes with its
  decoding on 2 quiet cores, estimated from the CPU time measured) reaches BLEU >= 12 on the 500 test
  sentences, and the KV-cached greedy writes exactly greedy's tokens on every one of them;
  `course translate` uses the checkpoint (a sentence, standard input, --beam).
- A hostile decoding.py (fake progress and validation lines, a result.json claiming perfect scores,
  links planted in its output folder) gets its real figures and touches no host file. It writes only
  into the temporary folders the test made, and never uses the network, so it is harmless unsandboxed.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from autograder import cli, config
from autograder.authoring import markers
from autograder.capstone import train as toy
from autograder.capstone import translating, translation

COURSE = config.load()
ROOT = Path(__file__).resolve().parents[2]

# CI's short run: the reference's default model, a fixed number of steps (a step count, not a time,
# so a busy machine makes the test slower, never flaky), with a generous time cap. Measured: six correct
# student files written elsewhere reach BLEU 12.8 / beam 14.6 at 450 steps; 520 leave a margin. Two torch
# threads on an idle machine, else one: on a machine busier than its cores two threads spin-wait and a
# step can take ten times longer.
SHORT = {"steps": 520, "minutes": 20, "eval_seconds": 1e9, "threads": 2 if os.getloadavg()[0] < 1.0 else 1}
# A few steps of a small model on a small test set: an untrained model's figures in seconds.
TINY = {"steps": 3, "minutes": 5, "eval_seconds": 1e9, "d_model": 32, "heads": 2, "layers": 1, "d_ff": 64,
        "batch": 16, "n_val": 20, "n_test": 40, "threads": 1, "beam": 2}


# ---- data, split, tokenizer, scores (fast) -----------------------------------------------------------

@pytest.fixture(scope="module")
def splits():
    return translation.split(translation.load_pairs(), n_val=translating.DEFAULTS["n_val"],
                             n_test=translating.DEFAULTS["n_test"], max_chars=translating.DEFAULTS["max_chars"])


def test_data_ships_once_with_its_attribution():
    data = translation.DATA
    assert data.is_file() and data.parent == ROOT / "autograder" / "capstone" / "data"
    assert list(ROOT.rglob("tatoeba-eng-fra.tsv.gz")) == [data], "one copy of the data in the repository"
    assert translation.ATTRIBUTION == "Sentence pairs from the Tatoeba Project (tatoeba.org), CC-BY 2.0 FR"
    for readme in (data.parent / "README.md", ROOT / "README.md"):
        assert translation.ATTRIBUTION in readme.read_text(), readme
    pairs = translation.load_pairs()
    assert len(pairs) == 76_038 and pairs[0] == ("Go.", "Va !")


def test_split_keeps_every_translation_of_a_held_out_sentence_out_of_training(splits):
    assert len(splits.test) >= 500 and len(splits.val) > 0
    train_en = {e for e, _ in splits.train}
    train_fr = {tuple(translation.pieces(f)) for _, f in splits.pairs("train")}
    everything = {}
    for e, f in translation.load_pairs():
        everything.setdefault(e, []).append(f)
    for e, refs in splits.test + splits.val:
        assert e not in train_en
        assert refs == everything[e], "every French translation is a reference"
        assert not any(tuple(translation.pieces(f)) in train_fr for f in refs), e
    assert len({e for e, _ in splits.test} & {e for e, _ in splits.val}) == 0
    assert any(len(refs) > 1 for _, refs in splits.test), "multi-reference"
    again = translation.split(translation.load_pairs(), n_val=len(splits.val), n_test=len(splits.test))
    assert again == splits, "fixed and seeded"


def test_the_tokenizer_is_reversible_and_keeps_the_special_ids(splits):
    for _, refs in splits.test:
        for f in refs:
            assert translation.detokenize(translation.pieces(f)) == re.sub(r"\s+", " ", f.lower()).strip()
    assert translation.pieces("C'est-à-dire ?") == ["c", "'", "\u2581est", "-", "\u2581à", "-", "\u2581dire", "\u2581?"]
    pairs = splits.pairs("train")
    tok = translation.WordTokenizer.train([e for e, _ in pairs], [f for _, f in pairs])
    assert tok.src.itos[:4] == tok.tgt.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    ids = tok.encode_src("I am cold.")
    assert 3 not in ids and min(ids) >= 4
    assert tok.encode_src("zzyzzyx")[0] == translation.UNK
    french = tok.encode_tgt("Je suis fatigué.")
    assert tok.translation([1] + french + [2, 0, 0]) == "Je suis fatigué."
    assert translation.WordTokenizer.from_json(tok.to_json()).translation(french) == "Je suis fatigué."


def test_scores_are_sacrebleu_multi_reference_case_insensitive():
    groups = [("I am cold.", ["J'ai froid.", "Je suis gelé."]), ("Thanks.", ["Merci !"])]
    assert translation.references(groups) == [["J'ai froid.", "Merci !"], ["Je suis gelé.", None]]
    s = translation.scores(["je suis gelé.", "Merci !"], groups)    # the SECOND reference of the first
    assert s["bleu"] == 100.0 and s["chrf"] == 100.0
    assert "nrefs:var" in s["bleu_signature"] and "case:lc" in s["bleu_signature"]
    assert "tok:13a" in s["bleu_signature"] and "version:2.6.0" in s["bleu_signature"]
    assert translation.scores(["Bonjour.", "Au revoir."], groups)["bleu"] < 10


def test_the_child_job_holds_no_french_reference_of_a_held_out_sentence():
    splits, tok, job = translating._job(dict(translating.DEFAULTS))
    assert set(job) == {"conf", "train", "val", "test", "vocab", "max_out"}
    assert job["test"] == [tok.encode_src(e) for e, _ in splits.test]       # sources only
    assert job["val"] == [tok.encode_src(e) for e, _ in splits.val]
    targets = {tuple(t) for _, t in job["train"]}
    held = [tok.encode_tgt(f) for _, refs in splits.test + splits.val for f in refs]
    assert not any(tuple(h) in targets for h in held if translation.UNK not in h)


def test_dependencies_are_pinned_and_torch_stays():
    text = (ROOT / "pyproject.toml").read_text()
    for pin in ("torch==2.13.0", "sacrebleu==2.6.0"):
        assert f'"{pin}"' in text
    deps = re.search(r"dependencies = \[(.*?)\]", text, re.S).group(1)
    assert all("==" in d for d in re.findall(r'"([^"]+)"', deps)), deps


# ---- CI's short run (slow) ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("translate")
    log = io.StringIO()
    result = translating.train(COURSE, None, out, SHORT, stream=log)
    return out, result, log.getvalue()


@pytest.mark.slow
def test_short_run_learns_to_translate_and_the_kv_cache_agrees(short_run):
    out, result, log = short_run
    assert result["test_size"] == 500 and result["steps"] == SHORT["steps"], log
    assert result["bleu_greedy"] >= 12, log
    assert result["chrf_greedy"] > 28, log
    assert result["bleu_beam"] >= 12, log
    # Real sentences: the KV cache changes the cost, never the tokens.
    assert result["cached_same_as_greedy"] == result["test_size"], log
    for f in ("model.pt", "training.png", "attention.png", "summary.json"):
        assert (out / f).is_file() and not (out / f).is_symlink(), f
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bleu_greedy"] == result["bleu_greedy"] and summary["data"] == translation.ATTRIBUTION
    assert result["attention_png"].startswith("saved"), result["attention_png"]
    text = io.StringIO()
    translating.report(result, text)
    text = text.getvalue()
    assert re.search(r"^BLEU \(greedy\): \d+\.\d$", text, re.M), text
    assert re.search(r"^chrF \(beam 4\): \d+\.\d$", text, re.M), text
    assert "nrefs:var|case:lc" in text and "KV-cached greedy: identical outputs on 500 of 500" in text


@pytest.mark.slow
def test_course_translate_a_sentence_stdin_and_beam(short_run, capsys, monkeypatch):
    out, _, _ = short_run
    assert cli.main(["translate", str(out / "model.pt"), "I am cold."]) == 0
    one = capsys.readouterr().out.splitlines()
    assert len(one) == 1 and one[0].strip() and one[0] != "I am cold.", one
    monkeypatch.setattr(sys, "stdin", io.StringIO("I am cold.\nWhere is the station?\nThank you.\n"))
    assert cli.main(["translate", str(out / "model.pt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0] == one[0], lines
    assert cli.main(["translate", str(out / "model.pt"), "I am cold.", "--beam", "4"]) == 0
    assert capsys.readouterr().out.strip()


# ---- a hostile decoding.py (slow: trains a few steps) -----------------------------------------------

HOSTILE = '''

# --- hostile: fake progress and validation lines, a forged result.json, links in the output folder ---
import atexit as _atexit
import json as _json
import os as _os

print("VALIDATION " + _json.dumps({{"step": 1, "elapsed": 1.0, "ids": "all correct"}}), flush=True)
print("PROGRESS " + _json.dumps({{"step": "x", "loss": None}}), flush=True)
print("\\x1b[2J\\xff\\xfe odd bytes", flush=True)
for _name, _target in (("training.png", {victim!r}), ("summary.json", {victim!r})):
    try:
        _os.symlink(_target, _name)          # in the working folder: the trainer's private output folder
    except OSError:
        pass


def _forge():
    try:
        with open("result.json") as f:
            r = _json.load(f)
        r["greedy"] = r["beam"] = r["cached"] = [[4, 5, 6, 2]] * len(r["greedy"])
        r["bleu_greedy"] = 100.0
        with open("result.json", "w") as f:
            _json.dump(r, f)
    except Exception:
        pass


_atexit.register(_forge)
'''


@pytest.mark.slow
def test_a_hostile_decoding_gets_its_real_figures_and_touches_no_host_file(tmp_path):
    victim = tmp_path / "host" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("the instructor's file\n")
    digest = hashlib.sha256(victim.read_bytes()).hexdigest()
    folder = tmp_path / "mine"
    folder.mkdir()
    for m in COURSE.milestones:
        for f in m.files:
            text = markers.make_reference((COURSE.root / "solutions" / m.folder / f).read_text(), f)
            (folder / f).write_text(text + (HOSTILE.format(victim=str(victim)) if f == "decoding.py" else ""))
    out = tmp_path / "out"
    log = io.StringIO()
    result = translating.train(COURSE, folder, out, TINY, stream=log)
    assert result["test_size"] == TINY["n_test"] and result["steps"] == TINY["steps"]
    # Three steps of a tiny model: an untrained model's score, whatever the module wrote.
    assert result["bleu_greedy"] < 5 and result["bleu_beam"] < 5, result
    assert all(v[2] < 5 for v in result["val_bleu"]), result["val_bleu"]
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == digest
    for f in out.iterdir():
        assert f.is_file() and not f.is_symlink(), f
    assert json.loads((out / "summary.json").read_text())["bleu_greedy"] == result["bleu_greedy"]


@pytest.mark.slow
def test_course_translate_still_decodes_a_toy_checkpoint(tmp_path, capsys):
    toy.train(COURSE, None, tmp_path, {"steps": 4, "eval_every": 4, "d_model": 32, "heads": 2, "layers": 1,
                                       "d_ff": 64, "batch": 16, "n_train": 400, "n_val": 40, "n_test": 40,
                                       "threads": 1, "beam": 2}, stream=io.StringIO())
    assert cli.main(["translate", str(tmp_path / "model.pt"), "abcde"]) == 0
    got = capsys.readouterr().out.splitlines()
    assert len(got) == 1 and set(got[0]) <= set("abcdefghij<unk>"), got
