"""Batch grading stays whole whatever students hand in (found by a red team).

- Any text (lone surrogates, NUL, terminal escapes, right-to-left overrides, huge lines) in a
  student's messages or names gives valid UTF-8 files, parsable JSON and one CSV line per student.
- Every student in gives exactly one row out, under their own name (distinct names never merge).
- Zip files are read with hard caps (bombs, traversal, links, duplicates are refused, with a reason).
- A submitted file must be a regular file on every path (`course grade`, the pytest plugin,
  grade-class, Gradescope); anything else is refused with a message and still gets a row.
- The Gradescope bundle holds only what grading its milestone needs.
- grade-class never overwrites an earlier --out without --force.

Grading runs only m1, once per sandbox mode (bubblewrap when it works, and resource limits only).
"""
from __future__ import annotations

import concurrent.futures
import csv
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest

from autograder import cli, config
from autograder.integrations.batch import gradescope
from autograder.integrations.batch.collect import collect, unique_key
from autograder.integrations.batch.run import grade_class
from autograder.grading import report
from autograder.grading.checks import CheckResult
from autograder.grading.grade import Result
from autograder.grading.submission import GradedFile, SubmissionError, prepared, reference_files
from derived import find, subject_text

COURSE = config.load()
M1 = COURSE.milestone("m1")
REF = COURSE.root / "solutions" / "m1_attention" / "attention.py"
STUB = COURSE.root / "assignments" / "m1_attention" / "attention.py"
MUTANT = subject_text(find(COURSE.root / "autograder" / "tests" / "mutants" / "m1", "no_sqrt_scale"), COURSE, "m1")

# Text that broke the writers: a lone surrogate, NUL, a terminal escape, a right-to-left override,
# a line separator (str.splitlines splits there), a carriage return.
NASTY = "bad \udc80 byte, NUL \x00, escape \x1b[2J, rtl \u202e, sep \u2028, cr \r end"

# The reference, except that softmax raises an exception with NASTY text (and a 100,000-character
# source line shown in the traceback) and padding_mask prints NASTY and invalid UTF-8, then exits.
HOSTILE_TEXT = REF.read_text().replace(
    "    x_max = x.amax(dim=dim, keepdim=True)",
    f"    raise ValueError({NASTY!r})  # {'#' * 100_000}", 1).replace(
    "def padding_mask(tokens, pad_id):",
    "def padding_mask(tokens, pad_id):\n"
    f"    import os, sys\n    print({NASTY.replace(chr(0xDC80), '')!r}, flush=True)\n"
    "    sys.stderr.buffer.write(b'invalid \\xed\\xb2\\x80 \\xff utf-8\\n'); sys.stderr.flush()\n"
    "    os._exit(1)\n", 1)
assert HOSTILE_TEXT.count("raise ValueError") == 1 and "os._exit(1)" in HOSTILE_TEXT


@pytest.fixture
def tmp():
    d = Path(tempfile.mkdtemp(prefix="integrity-test-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def notebook(source: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "source": source}], "nbformat": 4, "nbformat_minor": 5,
                       "metadata": {}})


def strict_text(path: Path) -> str:
    """The file as UTF-8, failing on any invalid byte; no character that breaks a terminal or a line
    (CSV ends its lines with \\r\\n)."""
    text = path.read_bytes().decode("utf-8")
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e\u2028]|\r(?!\n)", text), (path, text[:300])
    return text


def strict_json(path: Path):
    """Parsed JSON whose every string is valid Unicode (Python's json accepts "\\udc80"; others do not)."""
    data = json.loads(strict_text(path))

    def strings(x):
        if isinstance(x, str):
            yield x
        elif isinstance(x, dict):
            for k, v in x.items():
                yield k
                yield from strings(v)
        elif isinstance(x, list):
            for v in x:
                yield from strings(v)
    for s in strings(data):
        s.encode("utf-8")          # raises on a lone surrogate
    return data


def make_zip(path: Path, members: dict[str, bytes | str], compression=zipfile.ZIP_DEFLATED) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # zipfile warns about duplicate names: they are the point
        with zipfile.ZipFile(path, "w", compression) as z:
            for name, data in members.items():
                z.writestr(name.split("#")[0], data)   # "name#2": the same member name a second time
    return path


def make_bomb(path: Path, megabytes: int, declared: int | None = None) -> Path:
    """attention.py inflating to `megabytes` MB of zeros (about 1 KB of zip per MB); `declared`:
    the (false) size written in its headers, which a reader must not trust."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("attention.py", "w") as f:
        for _ in range(megabytes):
            f.write(bytes(1 << 20))
    if declared is not None:
        data = bytearray(path.read_bytes())
        struct.pack_into("<I", data, 22, declared)                            # local header
        struct.pack_into("<I", data, data.rfind(b"PK\x01\x02") + 24, declared)  # central directory
        path.write_bytes(bytes(data))
    return path


# --- 1. Any text survives every writer -----------------------------------------------------------

def test_reports_of_any_text_are_valid_utf8_json_and_lines(tmp):
    long_line = "x" * 200_000
    r = Result("m1", 7, [CheckResult("softmax", 2, 0, f"{NASTY}\n{long_line}\n  File \"attention.py\", line 1",
                                     internal_error=NASTY),
                         CheckResult("shapes", 1, 1, note=NASTY)],
               [GradedFile("attention.py", "yours")], notes=[NASTY])
    text = report.feedback(r)
    text.encode("utf-8")
    assert "\\udc80" in text and "\\x00" in text and "\\x1b" in text and "\\u202e" in text
    assert max(len(line) for line in text.splitlines()) < 5000 and re.search(r"\(\d+ more\s+characters\)", text)
    assert report.table(r, who=NASTY).encode("utf-8")
    report.write_gradescope(r, tmp / "r.json")
    data = strict_json(tmp / "r.json")
    assert "\\udc80" in data["tests"][0]["output"] and data["score"] == 1


@pytest.fixture(scope="module", params=["auto", "rlimits"])
def graded_class(request):
    """One class with every kind of trouble, graded once per sandbox mode."""
    root = Path(tempfile.mkdtemp(prefix="integrity-class-"))
    subs = root / "class"
    subs.mkdir()

    def put(folder: str, text: str, name: str = "attention.py"):
        (subs / folder).mkdir(parents=True, exist_ok=True)
        (subs / folder / name).write_text(text)
    put("bob", notebook(REF.read_text()), "attention.ipynb")        # bob and bob_ used to share a key
    put("bob_", notebook(STUB.read_text()), "attention.ipynb")
    put("Zoë Ångström/m1_attention", REF.read_text())
    put("李雷", MUTANT)
    put("nasty", HOSTILE_TEXT)
    (subs / "linked").mkdir()
    os.symlink(REF, subs / "linked" / "attention.py")                # 20/20 if a link is followed
    (subs / "empty").mkdir()
    os.mkdir(bytes(subs) + b"/caf\xe9")                              # not UTF-8: a surrogate in the name
    make_zip(subs / "Мария_1234_5678_attention.zip", {"work/attention.py": REF.read_text()})
    make_bomb(subs / "bomb_99_1_attention.zip", 64, declared=1000)
    run = grade_class(subs, "m1", root / "out", jobs=2, sandbox=request.param, course=COURSE, progress=False)
    yield run, root / "out"
    shutil.rmtree(root, ignore_errors=True)


def test_every_student_gets_one_row_under_their_own_name(graded_class):
    run, out = graded_class
    text = strict_text(out / "grades.csv")
    rows = {r["student"]: r for r in csv.DictReader(text.splitlines())}
    assert len(text.splitlines()) == len(rows) + 1 == 11
    assert set(rows) == {"bob", "bob_", "Zoë Ångström", "李雷", "nasty", "linked", "empty", "caf\\udce9",
                         "Мария", "bomb"}
    assert len({r["key"] for r in rows.values()}) == 10
    score = {s: int(r["score"]) for s, r in rows.items()}
    status = {s: r["status"] for s, r in rows.items()}
    assert score["bob"] == 20 and score["bob_"] == 0 and score["Zoë Ångström"] == 20 and score["Мария"] == 20
    assert 0 < score["李雷"] < 20
    assert status == {**{s: "graded" for s in rows}, "linked": "refused", "bomb": "refused", "empty": "missing",
                      "caf\\udce9": "missing"}
    assert score["linked"] == 0 and score["bomb"] == 0
    for s, row in rows.items():
        feedback = strict_text(out / "feedback" / f"{row['key']}.txt")
        results = strict_json(out / "results" / row["key"] / "results.json")
        assert results["score"] == int(row["score"])
        if s == "linked":
            assert "symbolic link" in feedback
        if s == "bomb":
            assert "larger than" in feedback or "damaged" in feedback, feedback
    assert strict_json(out / "summary.json")["students"] == 10
    strict_text(out / "summary.md")


def test_hostile_text_is_shown_escaped_to_the_student(graded_class):
    run, out = graded_class
    (key,) = [k for k, f in run.students.items() if f.student == "nasty"]
    feedback = strict_text(out / "feedback" / f"{key}.txt")
    assert "ValueError: bad \\udc80 byte, NUL \\x00, escape \\x1b[2J, rtl \\u202e" in feedback
    assert "exited with status 1" in feedback and re.search(r"\(\d+ more\s+characters\)", feedback)
    assert 0 < run.results[key].score < 20


@pytest.mark.parametrize("sandbox", ["auto", "rlimits"])
def test_course_grade_prints_and_writes_any_text(tmp, sandbox):
    sub = tmp / "sub"
    sub.mkdir()
    (sub / "attention.py").write_text(HOSTILE_TEXT)
    env = dict(os.environ, PYTHONIOENCODING="utf-8")       # strict, as under an en_US.UTF-8 locale
    r = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", str(sub), "-m", "m1", "--json",
                        str(tmp / "r.json"), "--sandbox", sandbox], capture_output=True, cwd=COURSE.root, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    assert "\\udc80" in r.stdout.decode("utf-8")
    assert 0 < strict_json(tmp / "r.json")["score"] < 20


# --- 2. Names: one row per student, never merged ---------------------------------------------------

NAMES = ["bob", "bob_", "Bob", "Zoë Ångström", "李雷", "Мария", ".hidden_not", "a/b"]


def test_unique_keys_are_safe_distinct_and_stable():
    taken: set[str] = set()
    long = "Ж" * 300
    keys = [unique_key(n, taken) for n in [*NAMES, "caf\udce9", long, "..", "-rf", "bob"]]
    assert len({k.casefold() for k in keys}) == len(keys)
    for k in keys:
        assert re.fullmatch(r"[\w.@-]+", k) and not k.startswith((".", "-")) and k not in (".", "..")
        assert len(k.encode("utf-8")) <= 120
    assert keys[0] == "bob" and keys[3] == "Zoë_Ångström-" + keys[3].rsplit("-", 1)[1]
    assert keys[4] == "李雷" and keys[5] == "Мария"
    assert unique_key("bob_", set()) == keys[1]                       # the same name, the same key


def _assert_one_each(found, expected_texts):
    assert sorted(f.student for f in found) == sorted(expected_texts)
    assert len({f.key.casefold() for f in found}) == len(found)
    for f in found:
        assert (f.path / "attention.py").read_text() == expected_texts[f.student], f.student


def test_distinct_folders_stay_distinct_even_when_their_names_look_alike(tmp):
    texts = {}
    for i, name in enumerate(n for n in NAMES if "/" not in n and not n.startswith(".")):
        (tmp / "subs" / name).mkdir(parents=True)
        texts[name] = f"# student {i}\n"
        # notebooks go through the staging folder, where bob and bob_ used to overwrite each other
        (tmp / "subs" / name / "attention.ipynb").write_text(notebook(texts[name]))
    _assert_one_each(collect(tmp / "subs", M1, tmp / "stage"), texts)


def test_nbgrader_tree_keeps_every_student(tmp):
    texts = {}
    for i, name in enumerate(["bob", "bob_", "Zoë Ångström", "李雷", "Мария"]):
        folder = tmp / "course" / "submitted" / name / "m1_attention"
        folder.mkdir(parents=True)
        texts[name] = f"# student {i}\n"
        (folder / "attention.py").write_text(texts[name])
    _assert_one_each(collect(tmp / "course", M1, tmp / "stage"), texts)


def test_zips_of_look_alike_and_non_latin_names_stay_distinct(tmp):
    zips = tmp / "zips"
    zips.mkdir()
    texts = {}
    for i, (file, student) in enumerate([("bob.zip", "bob"), ("bob_.zip", "bob_"),
                                         ("李雷_12_34_attention.zip", "李雷"), ("Мария_56_78_attention.zip", "Мария"),
                                         ("Zoë Ångström_9_10_attention.zip", "Zoë Ångström")]):
        texts[student] = f"# student {i}\n"
        make_zip(zips / file, {"attention.py": texts[student]})
    _assert_one_each(collect(zips, M1, tmp / "stage"), texts)
    # Two submissions of one student (Canvas keeps both): two rows, both named after her.
    make_zip(zips / "ann_1_2_attention.zip", {"attention.py": "# one\n"})
    make_zip(zips / "ann_1_3_attention-1.zip", {"attention.py": "# two\n"})
    anns = [f for f in collect(zips, M1, tmp / "stage2") if f.student == "ann"]
    assert len(anns) == 2 and anns[0].key != anns[1].key


# --- 3. Zip files: bounded reads, tricks refused -------------------------------------------------

@pytest.mark.parametrize("declared", [None, 1000], ids=["honest_header", "lying_header"])
def test_zip_bomb_is_refused_without_inflating_it(tmp, declared):
    (tmp / "subs").mkdir()
    make_bomb(tmp / "subs" / "bomb.zip", 200, declared)
    tracemalloc.start()
    try:
        (found,) = collect(tmp / "subs", M1, tmp / "stage")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 30_000_000, f"{peak / 1e6:.0f} MB to refuse a bomb"
    assert found.path is None and found.status == "refused" and found.student == "bomb"
    # An honest header is refused before reading; a lying one stops at the size it declared (then
    # its checksum fails): either way no more than the cap is ever inflated.
    assert "attention.py" in found.problem and ("larger than" if declared is None else "damaged") in found.problem


@pytest.mark.parametrize("members, why", [
    ({"../attention.py": "x"}, "outside"),
    ({"/tmp/attention.py": "x"}, "outside"),
    ({"attention.py": "x", "attention.py#2": "y"}, "twice"),
    ({f"f{i}.txt": "" for i in range(6000)} | {"attention.py": "x"}, "files"),
], ids=["dotdot", "absolute", "duplicate", "too_many_members"])
def test_zip_tricks_are_refused_with_a_reason(tmp, members, why):
    (tmp / "subs").mkdir()
    make_zip(tmp / "subs" / "eve.zip", members)
    (found,) = collect(tmp / "subs", M1, tmp / "stage")
    assert found.path is None and found.status == "refused" and why in found.problem, found.problem


def test_zip_symlink_member_and_exotic_compression_are_refused(tmp):
    (tmp / "subs").mkdir()
    with zipfile.ZipFile(tmp / "subs" / "link.zip", "w") as z:
        info = zipfile.ZipInfo("attention.py")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(info, "../../solutions/m1_attention/attention.py")
    make_zip(tmp / "subs" / "bz.zip", {"attention.py": "x = 1\n"}, zipfile.ZIP_BZIP2)
    found = {f.student: f for f in collect(tmp / "subs", M1, tmp / "stage")}
    assert found["link"].status == "refused" and "symbolic link" in found["link"].problem
    assert found["bz"].status == "refused" and "compression" in found["bz"].problem


# --- 4. One rule for submitted files on every path -------------------------------------------------

def _special(folder: Path, kind: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "attention.py"
    if kind == "symlink":
        os.symlink(REF, f)
    elif kind == "dangling":
        os.symlink(folder / "nowhere.py", f)
    elif kind == "fifo":
        os.mkfifo(f)                               # reading it would block forever
    elif kind == "directory":
        f.mkdir()
    elif kind == "huge":
        f.write_bytes(b"#" * 3_000_000)
    return folder


@pytest.mark.parametrize("kind, needle", [("symlink", "symbolic link"), ("dangling", "symbolic link"),
                                          ("fifo", "not a regular file"), ("directory", "not a regular file"),
                                          ("huge", "larger than")])
def test_prepared_refuses_anything_but_a_regular_file(tmp, kind, needle):
    sub = _special(tmp / "class" / "sub", kind)
    with pytest.raises(SubmissionError, match=needle) as e, prepared(COURSE, M1, sub):
        pass
    assert e.value.status == "refused"
    (found,) = collect(tmp / "class", M1, tmp / "stage")             # grade-class: the same rule, the same words
    assert found.status == "refused" and needle in found.problem


def test_course_grade_refuses_a_symlinked_file(tmp, capsys):
    sub = _special(tmp / "sub", "symlink")
    assert cli.main(["grade", str(sub), "-m", "m1"]) == 2
    assert "attention.py is a symbolic link" in capsys.readouterr().err


def test_pytest_plugin_refuses_a_symlinked_file(tmp):
    sub = _special(tmp / "sub", "symlink")
    r = subprocess.run([sys.executable, "-m", "pytest", "autograder/integrations/pytest_plugin", "--submission", str(sub),
                        "--milestone", "m1", "-p", "no:cacheprovider", "-q"],
                       cwd=COURSE.root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and " passed" not in r.stdout and "symbolic link" in r.stdout, r.stdout[-2000:]


def test_gradescope_refuses_a_symlinked_file(tmp):
    sub = _special(tmp / "submission" / "m1_attention", "symlink").parent
    data = gradescope.grade_submission("m1", sub, tmp / "results" / "results.json")
    assert data["score"] == 0 and "symbolic link" in data["tests"][0]["output"]
    assert strict_json(tmp / "results" / "results.json")["score"] == 0


# --- 5. The Gradescope bundle: only what grading its milestone needs -------------------------------

@pytest.mark.parametrize("m", COURSE.milestones, ids=lambda m: m.id)
def test_gradescope_bundle_holds_no_solution_test_sample_or_later_milestone(tmp, m):
    names = zipfile.ZipFile(gradescope.write_bundle(COURSE, m.id, tmp / "gs.zip")).namelist()
    solutions = {n for n in names if n.startswith("source/solutions/")}
    assert solutions == {f"source/solutions/{rel}" for rel, _ in reference_files(COURSE, m)}
    assert not any(f"source/solutions/{m.folder}/{f}" in names for f in m.files)   # what it grades
    assert not any(re.search(r"(^|/)(tests|samples|pytest_plugin)/|(^|/)test_[^/]*\.py$|\.ipynb$|notebook\.md$", n)
                   for n in names), names
    later = [x for x in COURSE.milestones if COURSE.milestones.index(x) > COURSE.milestones.index(m)]
    for x in later:
        assert not any(x.folder in n or f"milestones/{x.id}/" in n for n in names), x.id
    assert f"source/autograder/milestones/{m.id}/checks.py" in names


def test_gradescope_bundles_have_every_check_group_they_grade(tmp):
    """Each bundle, unpacked alone, loads every check group of its milestone (no missing module)."""
    def load(m):
        root = tmp / m.id
        zipfile.ZipFile(gradescope.write_bundle(COURSE, m.id, tmp / f"{m.id}.zip")).extractall(root)
        code = ("import sys; from autograder import config; from autograder.grading.grade import check_groups; "
                "m = config.load().milestone(sys.argv[1]); missing = set(m.checks) - set(check_groups(m.id)); "
                "sys.exit(f'missing: {missing}' if missing else 0)")
        return subprocess.run([sys.executable, "-c", code, m.id], cwd=root / "source", capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(root / "source")))
    with concurrent.futures.ThreadPoolExecutor(len(COURSE.milestones)) as pool:
        for m, r in zip(COURSE.milestones, pool.map(load, COURSE.milestones)):
            assert r.returncode == 0, (m.id, r.stderr[-2000:])


def test_batch_grading_doc_says_what_the_bundle_holds():
    doc = (COURSE.root / "docs" / "batch-grading.md").read_text()
    assert "What the Gradescope bundle contains" in doc and "setup.sh" in doc


# --- 6. An earlier --out is never overwritten without --force ---------------------------------------

def test_grade_class_refuses_an_existing_out_unless_forced(tmp, capsys):
    (tmp / "subs" / "ann").mkdir(parents=True)
    shutil.copy(REF, tmp / "subs" / "ann" / "attention.py")
    out = tmp / "out"
    (out / "feedback").mkdir(parents=True)
    (out / "grades.csv").write_text("student,score\nold,20\n")
    (out / "feedback" / "old.txt").write_text("an earlier run")
    with pytest.raises(FileExistsError, match="--force"):
        grade_class(tmp / "subs", "m1", out, course=COURSE, progress=False)
    assert cli.main(["grade-class", str(tmp / "subs"), "-m", "m1", "--out", str(out), "--quiet"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (out / "grades.csv").read_text() == "student,score\nold,20\n"
    assert cli.main(["grade-class", str(tmp / "subs"), "-m", "m1", "--out", str(out), "--quiet", "--force"]) == 0
    rows = list(csv.DictReader(open(out / "grades.csv", encoding="utf-8")))
    assert [(r["student"], r["score"]) for r in rows] == [("ann", "20")]
    assert not (out / "feedback" / "old.txt").exists()
