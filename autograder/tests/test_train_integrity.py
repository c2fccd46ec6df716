"""`course train --from` / `course translate` stay honest and harmless whatever a student's files do
(found by a red team). Each test trains a realistic hostile student folder: the six reference files
with one of them made malicious, at a tiny size (a few steps), once under bubblewrap (when it works)
and once with bubblewrap switched off (resource limits, and an unprivileged uid when the tests run as
root).

- A module that rewrites the trainer's scoring and result printing to claim 100% changes nothing:
  the figures are computed by course code in the parent, from token ids.
- Links planted in the trainer's output folder never make the parent write (or read) a host file;
  `--out` receives regular files only.
- A checkpoint whose unpickling would run code is never unpickled that way: `course translate`
  refuses it, and no host file changes.
- Student code never runs as uid 0 nor with a capability.
- Without any isolation (no bubblewrap, not root) `course train --from` refuses unless the
  instructor passes --unsafe-no-sandbox.

Every hostile file here stays harmless even unsandboxed: it writes only inside temporary folders
the test made, and never uses the network.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from autograder import cli, config
from autograder.authoring import markers
from autograder.capstone import train
from autograder.sandbox import bwrap

COURSE = config.load()
ROOT = COURSE.root
# A few steps of a small model: an untrained model's figures (about 0% exact match) in seconds.
TINY = {"steps": 4, "eval_every": 4, "d_model": 32, "heads": 2, "layers": 1, "d_ff": 64, "batch": 16,
        "warmup": 10, "n_train": 400, "n_val": 40, "n_test": 60, "threads": 1, "beam": 2}


def reference(name: str) -> str:
    for m in COURSE.milestones:
        if name in m.files:
            return markers.make_reference((COURSE.root / "solutions" / m.folder / name).read_text(), name)
    raise KeyError(name)


def student(folder: Path, **extra: str) -> Path:
    """A student's folder: the six reference files, with `extra[file]` appended to some of them."""
    folder.mkdir()
    for m in COURSE.milestones:
        for f in m.files:
            (folder / f).write_text(reference(f) + extra.get(f.replace(".py", ""), ""))
    return folder


def snapshot(root: Path, skip: Path, ignore: tuple = ()) -> dict:
    """Every file under `root` (outside `skip`, but those in `ignore`) with a digest of its content."""
    seen = {}
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            continue
        for f in files:
            p = Path(dirpath) / f
            if p not in ignore:
                seen[str(p)] = "link" if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return seen


@pytest.fixture(params=["bwrap", "rlimits"])
def mode(request, monkeypatch):
    """Each test once under bubblewrap (skipped where it cannot run) and once with it switched off."""
    if request.param == "bwrap":
        ok, why = bwrap.works()
        if not ok:
            pytest.skip(f"bubblewrap cannot run here: {why}")
    else:
        monkeypatch.setattr(bwrap, "works", lambda: (False, "switched off by a test"))
    return request.param


def unsafe_if_needed(mode: str) -> dict:
    """Tests that run hostile files without bubblewrap as a normal user must say so (harmless files)."""
    return {"unsafe": True} if mode == "rlimits" and os.geteuid() != 0 else {}


# ---- 1. scoring is the course's, not the child's --------------------------------------------------

CLAIM_100 = '''

# --- hostile: claim 100% whatever the model does ---
import atexit as _atexit
import json as _json
import sys as _sys

_real_dumps = _json.dumps


def _fake_dumps(obj, *args, **kwargs):
    if isinstance(obj, dict):
        obj = {k: (1.0 if str(k).startswith("exact_match") else v) for k, v in obj.items()}
        if "cached_same_as_greedy" in obj and "test_size" in obj:
            obj["cached_same_as_greedy"] = obj["test_size"]
    return _real_dumps(obj, *args, **kwargs)


_json.dumps = _fake_dumps
_real_greedy = greedy_decode


def greedy_decode(*args, **kwargs):
    main = _sys.modules.get("__main__")
    if main is not None and hasattr(main, "exact_match"):
        main.exact_match = lambda *a, **k: (1.0, [], [])
    return _real_greedy(*args, **kwargs)


_FAKE = {"task": "reverse", "steps": 4, "best_step": 4, "train_seconds": 0.1, "test_size": 60,
         "exact_match_greedy": 1.0, "exact_match_beam": 1.0, "beam": 2, "cached_same_as_greedy": 60,
         "exact_match_cached": 1.0, "samples": [], "val": [], "seconds": {"greedy": 0, "beam": 0, "cached": 0},
         "attention_png": "not saved"}
_atexit.register(lambda: print("RESULT " + _real_dumps(_FAKE), flush=True))
'''


def test_a_module_claiming_100_percent_gets_its_real_figure(tmp_path, mode):
    folder = student(tmp_path / "mine", decoding=CLAIM_100)
    out = tmp_path / "out"
    result = train.train(COURSE, folder, out, TINY, stream=io.StringIO(), **unsafe_if_needed(mode))
    assert result["test_size"] == TINY["n_test"]
    # Four steps of training: an untrained model, whatever the module prints.
    assert result["exact_match_greedy"] < 0.2, result
    assert result["exact_match_beam"] < 0.2, result
    assert json.loads((out / "summary.json").read_text())["exact_match_greedy"] == result["exact_match_greedy"]
    text = io.StringIO()
    train.report(result, text)
    assert "exact match (greedy): 100.0%" not in text.getvalue()


# ---- 2. links in the output folder, a checkpoint that runs code ---------------------------------

PLANT = '''

# --- hostile: links to host files in the output folder, a checkpoint that runs code when loaded ---
import atexit as _atexit
import os as _os

import torch as _torch


def _plant(links):
    for name, target in links:          # in the working folder: the trainer's output folder
        try:
            _os.remove(name)
        except OSError:
            pass
        try:
            _os.symlink(target, name)
        except OSError:
            pass


_plant([("attention.png", {picture!r})])                     # followed by the trainer's own writes
_atexit.register(_plant, [("summary.json", {summary!r})])   # followed by whatever writes it next


class _Payload:
    def __reduce__(self):
        return (exec, ("open({victim!r}, 'w').write('pwned by a checkpoint')",))


_real_save = _torch.save


def _save(obj, f, *args, **kwargs):
    if isinstance(obj, dict):
        obj = {{**obj, "extra": _Payload()}}
    return _real_save(obj, f, *args, **kwargs)


_torch.save = _save
'''


def test_planted_links_and_a_code_running_checkpoint_touch_no_host_file(tmp_path, mode):
    host = tmp_path / "host"
    host.mkdir()
    victims = {name: host / name for name in ("summary-target.txt", "picture-target.txt", "payload-target.txt")}
    for v in victims.values():
        v.write_text("the instructor's file\n")
    folder = student(tmp_path / "mine", training=PLANT.format(
        summary=str(victims["summary-target.txt"]), picture=str(victims["picture-target.txt"]),
        victim=str(victims["payload-target.txt"])))
    out = tmp_path / "out"
    ignore = ()
    if unsafe_if_needed(mode):
        # --unsafe-no-sandbox as a normal user: the child may write whatever that user may (here, through
        # its own attention.png link); what is checked is that THIS process never follows a planted link.
        ignore = (victims.pop("picture-target.txt"),)
    before = snapshot(tmp_path, out, ignore)
    result = None
    try:
        result = train.train(COURSE, folder, out, TINY, stream=io.StringIO(), **unsafe_if_needed(mode))
    except train.TrainError:
        pass                      # refusing the run is safe too; what matters is the host files
    assert snapshot(tmp_path, out, ignore) == before
    for v in victims.values():
        assert v.read_text() == "the instructor's file\n", v
    for entry in out.iterdir():
        assert entry.is_file() and not entry.is_symlink(), entry
    if result is not None and (out / "model.pt").is_file():
        try:
            said = train.translate(COURSE, out / "model.pt", "abcde", folder, **unsafe_if_needed(mode))
        except train.TrainError as e:
            said = str(e)
        assert isinstance(said, str)
        assert snapshot(tmp_path, out, ignore) == before
        assert victims["payload-target.txt"].read_text() == "the instructor's file\n"


def test_links_already_in_out_are_replaced_never_followed(tmp_path, mode):
    """--out holding links from an earlier run (of the old trainer, which let the sandbox write there):
    symbolic links and a hard link to host files are replaced by new files; their targets stay as they were."""
    host = tmp_path / "host"
    host.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    targets = {}
    for name in ("summary.json", "model.pt", "training.png", "attention.png"):
        targets[name] = host / f"{name}.target"
        targets[name].write_text("the instructor's file\n")
        if name == "training.png":
            os.link(targets[name], out / name)
        else:
            (out / name).symlink_to(targets[name])
    train.train(COURSE, None, out, TINY, stream=io.StringIO())
    for name, target in targets.items():
        assert target.read_text() == "the instructor's file\n", name
        assert (out / name).is_file() and not (out / name).is_symlink(), name
        assert os.stat(out / name).st_nlink == 1, name
    assert json.loads((out / "summary.json").read_text())["test_size"] == TINY["n_test"]


def test_translate_never_unpickles_code(tmp_path, mode):
    """A model.pt made by hand (not by a trainer) whose unpickling writes a file: refused, nothing written."""
    import torch
    victim = tmp_path / "payload-target.txt"
    victim.write_text("the instructor's file\n")

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(victim)!r}, 'w').write('pwned by a checkpoint')",))

    ckpt = tmp_path / "run" / "model.pt"
    ckpt.parent.mkdir()
    torch.save({"state_dict": {}, "config": dict(train.DEFAULTS), "texts": ["abcdefghij"], "x": Payload()}, ckpt)
    with pytest.raises(train.TrainError, match="could not decode"):
        train.translate(COURSE, ckpt, "abcde", **unsafe_if_needed(mode))
    assert victim.read_text() == "the instructor's file\n"


# ---- 3. never root, never a capability ------------------------------------------------------------

IDENTITY = '''

# --- hostile: report who this process is (by failing with it) ---
def _status():
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return {"uid": [int(x) for x in fields["Uid"]], "gid": [int(x) for x in fields["Gid"]],
            "cap_eff": int(fields["CapEff"][0], 16), "cap_prm": int(fields["CapPrm"][0], 16),
            "no_new_privs": int(fields.get("NoNewPrivs", ["-1"])[0]), "seccomp": int(fields.get("Seccomp", ["-1"])[0])}


raise RuntimeError("IDENTITY " + __import__("json").dumps(_status()))
'''


def test_student_code_never_runs_as_root_nor_with_a_capability(tmp_path, mode):
    folder = student(tmp_path / "mine", attention=IDENTITY)
    with pytest.raises(train.TrainError, match="IDENTITY") as e:
        train.train(COURSE, folder, tmp_path / "out", TINY, stream=io.StringIO(), **unsafe_if_needed(mode))
    who = json.loads(re.search(r"IDENTITY (\{.*?\})", str(e.value)).group(1))
    assert 0 not in who["uid"], who
    assert who["cap_eff"] == 0 and who["cap_prm"] == 0, who
    assert who["no_new_privs"] == 1 and who["seccomp"] == 2, who      # confined: the syscall filter is on
    if mode == "rlimits" and os.geteuid() == 0:
        assert who["uid"] == [train.TRAIN_UID] * 4, who
    if mode == "bwrap":
        assert who["uid"][0] == bwrap.SANDBOX_UID, who


READ_DATA = '''

# --- hostile: read what the trainer must not see (the course's data with the test references, the grader) ---
def _try(path):
    try:
        with open(path, "rb") as f:
            return "read %d bytes" % len(f.read(64))
    except OSError as e:
        return "refused: %s" % type(e).__name__


raise RuntimeError("READ " + __import__("json").dumps({p: _try(p) for p in PATHS}))
'''


def test_the_trainer_reads_neither_the_shipped_data_nor_the_grader(tmp_path, mode):
    """The test references of the capstone's data and the grader's source are readable by any user on this
    machine: the trainer's student code must still not read them (bubblewrap binds, or Landlock)."""
    from autograder.sandbox.slot import files_restricted
    if mode == "rlimits" and not files_restricted():
        pytest.skip("no Landlock on this kernel: without bubblewrap files are not isolated (train says so)")
    data = sorted((ROOT / "autograder" / "capstone" / "data").glob("*.gz"))[0]
    paths = [str(data), str(ROOT / "autograder" / "grading" / "grade.py"), str(ROOT / "course.yaml")]
    folder = student(tmp_path / "mine", attention=f"\nPATHS = {paths!r}\n" + READ_DATA)
    with pytest.raises(train.TrainError, match="READ") as e:
        train.train(COURSE, folder, tmp_path / "out", TINY, stream=io.StringIO(), **unsafe_if_needed(mode))
    seen = json.loads(re.search(r"READ (\{.*?\})", str(e.value)).group(1))
    assert all(v.startswith("refused") for v in seen.values()), seen


# ---- 4. no isolation at all: refuse student files unless told ---------------------------------------

def test_without_isolation_train_from_refuses_without_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bwrap, "works", lambda: (False, "switched off by a test"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    folder = student(tmp_path / "mine")
    out = tmp_path / "out"
    with pytest.raises(train.TrainError, match="--unsafe-no-sandbox") as e:
        train.train(COURSE, folder, out, TINY, stream=io.StringIO())
    assert "\n" not in str(e.value)
    assert not (out / "model.pt").exists()
    with pytest.raises(train.TrainError, match="--unsafe-no-sandbox"):
        train.translate(COURSE, tmp_path / "model.pt", "abcde", folder)
    # The command line: one line on stderr, exit status 1.
    assert cli.main(["train", "--from", str(folder), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--unsafe-no-sandbox" in err, err
    assert not (out / "model.pt").exists()


def test_without_isolation_the_flag_or_the_references_go_on(tmp_path, monkeypatch):
    """With --unsafe-no-sandbox (or the course's own files) training starts, saying once it is not isolated.
    (When the tests really run as root, the child itself still refuses to keep root's capabilities.)"""
    monkeypatch.setattr(bwrap, "works", lambda: (False, "switched off by a test"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for source, kw in ((student(tmp_path / "mine"), {"unsafe": True}), (None, {})):
        log = io.StringIO()
        out = tmp_path / f"out-{bool(source)}"
        try:
            result = train.train(COURSE, source, out, TINY, stream=log, **kw)
            assert result["test_size"] == TINY["n_test"]
        except train.TrainError as e:
            assert "--unsafe-no-sandbox" not in str(e)
            assert os.getuid() == 0 and "root" in str(e), e          # only the child's own refusal
        notes = [line for line in log.getvalue().splitlines() if "NOT isolated" in line]
        assert len(notes) == 1, log.getvalue()
