"""End to end with the real nbgrader: release m1 and m2, autograde a class of fake students, check every
student's per-cell scores, the per-check export, and that feedback shows no hidden code.

The m1 class: correct (written answers filled in), blank (the stub), partly wrong, corrupted notebook
JSON, a deleted graded cell, an infinite loop in one function, a student file named like the
grader's package, and seven hostile notebooks (HOSTILE below) whose files are the partly wrong ones:
each must score exactly what that code earns, and leave every course file as it was. The m2 class
has the first four: the other cases test nbgrader's mechanics, which do not depend on the milestone.

SAFETY: every fake submission is harmless even where nothing is sandboxed. The hostile cells only
read, open without writing, or patch objects inside their own kernel; the one that deletes files
deletes only inside a course copy under the temp folder that carries the marker file E2E_MARKER.
"""
from __future__ import annotations

import csv
import datetime as dt
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None,
                                 reason="nbgrader not installed (pip install -e '.[instructor]')")]

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
# The loop student's visible cells call causal_mask in the kernel itself, so one cell waits for this
# limit: keep it low. It must still cover the first hidden cell, which grades the whole milestone
# (about 10 s here; the engine's own 10 s probe limit stops the loop inside the grader).
CELL_TIMEOUT = 45

FAKE_GRADER = '''"""A student's file named like the grader: if it were imported, every check would pass."""
import sys
import types

def run_check(*args, **kwargs):
    print("check passed: full marks")

nbgrade = types.ModuleType("autograder.integrations.nbgrade")
nbgrade.run_check = run_check
sys.modules["autograder.integrations.nbgrade"] = nbgrade
__path__ = []
'''

E2E_MARKER = ".e2e-course-copy"
_FIND_COURSE = """
import os
from pathlib import Path
def _course_root():
    for up in [Path.cwd(), *Path.cwd().parents]:
        if (up / "course.yaml").exists() or (up / "solutions").exists():
            return up
    return None
"""
# name: the first cell of a hostile notebook. Each prints what it achieved.
HOSTILE = {
    "h_run_check": """
import builtins, sys, types
fake = lambda *args, **kwargs: print("check passed: full marks")
builtins.run_check = fake
run_check = fake
for name in ("autograder", "autograder.integrations.nbgrade"):
    sys.modules.setdefault(name, types.ModuleType(name)).run_check = fake
print("run_check replaced")
""",
    "h_fake_module": """
import sys, types
pkg = types.ModuleType("autograder")
pkg.__path__ = []
for name in ("autograder", "autograder.integrations.nbgrade", "autograder.grading", "autograder.grading.grade"):
    mod = sys.modules[name] = types.ModuleType(name)
    mod.run_check = mod.grade = lambda *a, **k: print("passed")
print("fake autograder installed")
""",
    "h_patch_torch": """
import torch, torch.testing
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
print("torch comparisons patched")
""",
    "h_read_solutions": _FIND_COURSE + """
root = _course_root()
src = root / "solutions" / "m1_attention" / "attention.py" if root else None
try:
    text = src.read_text()
    print("READ the reference solution")
    Path("attention.py").write_text(text)
    print("COPIED the reference over attention.py")
except Exception as e:
    print("solutions not reachable:", type(e).__name__)
""",
    "h_gradebook": _FIND_COURSE + """
root = _course_root()
try:
    with open(root / "gradebook.db", "ab"):
        print("OPENED gradebook.db for writing")
except Exception as e:
    print("gradebook.db not writable:", type(e).__name__)
try:
    (root / "planted.txt").write_text("x")
    print("WROTE a file in the course root")
except Exception as e:
    print("course root not writable:", type(e).__name__)
""",
    "h_privilege": """
import os
status = open("/proc/self/status").read()
caps = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
print(f"UID {os.getuid()} CAPEFF {caps}")
""",
    "h_delete": _FIND_COURSE + """
import shutil, tempfile
root = _course_root()
gone = []
if root is not None and (root / "MARKER").exists() and str(root.resolve()).startswith(
        os.path.realpath(tempfile.gettempdir())):
    for p in sorted(root.iterdir()):
        if p.name in ("submitted", "autograded"):
            continue
        try:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            gone.append(p.name)
        except Exception:
            pass
print("DELETED", gone if gone else "nothing")
""".replace("MARKER", E2E_MARKER),
}


def _checks(mid: str) -> list[str]:
    sys.path.insert(0, str(ROOT))
    try:
        from autograder import config
    finally:
        sys.path.pop(0)
    return list(config.load(ROOT / "course.yaml").milestone(mid).checks)


M1_CHECKS, M2_CHECKS = _checks("m1"), _checks("m2")


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_PATH", "JUPYTER_CONFIG_DIR")}
    env["PATH"] = os.pathsep.join([str(Path(PY).parent), env.get("PATH", "")])
    env["MPLBACKEND"] = "Agg"
    return env


def run(cwd, *args, check=True):
    p = subprocess.run(list(args), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=900)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return p


# ---- fake students ----------------------------------------------------------------------------

def reference(course: Path, rel: str) -> str:
    sys.path.insert(0, str(course))
    try:
        from autograder.authoring import markers
    finally:
        sys.path.pop(0)
    return markers.make_reference((course / "solutions" / rel).read_text())


def mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"mutation anchor not found once: {old!r}"
    return text.replace(old, new)


def m1_code(course):
    ref = reference(course, "m1_attention/attention.py")
    stub = (course / "assignments/m1_attention/attention.py").read_text()
    wrong = mutate(ref, "e = torch.exp(x - x_max)", "e = torch.exp(x)")        # overflows: stability
    loop = mutate(ref, "    return torch.ones(size, size, dtype=torch.bool, device=device).tril()",
                  "    while True:\n        pass")                                  # causal_mask never returns
    return ref, stub, wrong, loop


def m2_code(course):
    ref = reference(course, "m2_multihead/multihead.py")
    stub = (course / "assignments/m2_multihead/multihead.py").read_text()
    wrong = mutate(ref, "return x.reshape(B, L, num_heads, d_k).transpose(1, 2)",
                   "return x.reshape(B, num_heads, L, d_k)")                      # mixes positions across heads
    return ref, stub, wrong, None                                    # m2 has no loop student


def answer_all(nb: dict) -> dict:
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution") and cell["cell_type"] == "markdown":
            cell["source"] = "My answer: the scores grow like sqrt(d_k), so the softmax saturates."
    return nb


def drop_cell(nb: dict, grade_id: str) -> dict:
    before = len(nb["cells"])
    nb["cells"] = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") != grade_id]
    assert len(nb["cells"]) == before - 1
    return nb


M1_CLASS = ("correct", "blank", "partly", "corrupt", "deleted", "loop", "shadow", *HOSTILE)
M2_CLASS = ("correct", "blank", "partly", "corrupt")


def make_class(course: Path, mid: str, folder: str, module: str, code, dropped: str, names) -> None:
    ref, stub, wrong, loop = code
    released = json.loads((course / "assignments" / folder / f"{folder}.ipynb").read_text())

    def student(name, source, nb, extra=None):
        if name not in names:
            return
        d = course / "submitted" / f"{mid}_{name}" / folder
        d.mkdir(parents=True)
        (d / module).write_text(source)
        (d / f"{folder}.ipynb").write_text(nb if isinstance(nb, str) else json.dumps(nb))
        for fname, text in (extra or {}).items():
            (d / fname).write_text(text)

    fresh = lambda: json.loads(json.dumps(released))   # noqa: E731
    student("correct", ref, answer_all(fresh()))
    student("blank", stub, fresh())
    student("partly", wrong, fresh())
    student("corrupt", ref, json.dumps(answer_all(fresh()))[:5000])
    student("deleted", ref, drop_cell(fresh(), dropped))
    student("loop", loop, fresh())
    student("shadow", wrong, fresh(), {"autograder.py": FAKE_GRADER})
    for name, cell in HOSTILE.items():
        student(name, wrong, hostile_notebook(fresh(), cell))


def hostile_notebook(nb: dict, code: str) -> dict:
    """The student deleted every cell nbgrader does not grade and put the attack first."""
    graded = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    attack = {"cell_type": "code", "execution_count": None, "id": "attack", "metadata": {}, "outputs": [],
              "source": code.strip()}
    nb["cells"] = [attack] + graded
    return nb


def course_files(root: Path) -> dict[str, str]:
    """Digest of every course file nbgrader itself never changes."""
    skip = {"submitted", "autograded", "feedback", "gradebook.db", "autograde.log", "__pycache__"}
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not skip.intersection(rel.parts) and not rel.name.startswith("gradebook.db"):
            out[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def expected(checks, lost):
    return {c: 0 if c in lost else None for c in checks}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A fresh course directory built and released the way the README tells instructors to."""
    t0 = time.monotonic()
    root = tmp_path_factory.mktemp("course")
    ignore = shutil.ignore_patterns("__pycache__", "tests", "samples")
    shutil.copytree(ROOT / "autograder", root / "autograder", ignore=ignore)
    shutil.copytree(ROOT / "solutions", root / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("course.yaml", "nbgrader_config.py"):
        shutil.copy(ROOT / f, root / f)
    # Every milestone with a notebook is released, as an instructor does, so that `build --check` is clean.
    for mid in sorted(p.parent.name.split("_")[0] for p in (root / "solutions").glob("m*/notebook.md")):
        run(root, PY, "-m", "autograder.cli", "release", mid, "--before-deadlines")
    run(root, PY, "-m", "autograder.cli", "build", "--check")
    (root / E2E_MARKER).write_text("the hostile notebook h_delete may delete inside this folder only\n")
    t_release = time.monotonic()
    make_class(root, "m1", "m1_attention", "attention.py", m1_code(root), dropped="masking", names=M1_CLASS)
    make_class(root, "m2", "m2_multihead", "multihead.py", m2_code(root), dropped="parity", names=M2_CLASS)
    before = course_files(root)
    # The two milestones are graded by two nbgrader processes at once (one gradebook), as an
    # instructor may; each is nbgrader's usual sequential loop over students.
    procs = [subprocess.Popen([PY, "-m", "nbgrader", "autograde", folder, "--force",
                               f"--Execute.timeout={CELL_TIMEOUT}"], cwd=root, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for folder in ("m1_attention", "m2_multihead")]
    logs = [p.communicate(timeout=1200)[0] for p in procs]
    codes = [p.returncode for p in procs]
    (root / "autograde.log").write_text("\n".join(logs))
    t1 = time.monotonic()
    run(root, PY, "-m", "nbgrader", "generate_feedback", "m1_attention", "--force")
    run(root, PY, "-m", "nbgrader", "generate_feedback", "m2_multihead", "--force")
    t2 = time.monotonic()
    print(f"\nnbgrader e2e: release {t_release - t0:.1f} s, autograde {t1 - t_release:.1f} s, "
          f"feedback {t2 - t1:.1f} s")
    # Compared in a test below; taken now, before other tests write exports into the course folder.
    (root / "course-files.json").write_text(json.dumps({"before": before, "after": course_files(root)}))
    return root, codes, logs


def cell_scores(root: Path, folder: str, student: str) -> dict:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(folder, folder, student)
        return {g.name: (g.score, g.needs_manual_grade) for g in nb.grades}


CASES = {
    # student: (milestone, folder, auto-graded cells that lose their points)
    "m1_correct": ("m1_attention", M1_CHECKS, set()),
    "m1_blank": ("m1_attention", M1_CHECKS, set(M1_CHECKS)),
    "m1_partly": ("m1_attention", M1_CHECKS, {"stability"}),
    "m1_deleted": ("m1_attention", M1_CHECKS, set()),
    "m1_loop": ("m1_attention", M1_CHECKS, {"mask_helpers"}),
    "m1_shadow": ("m1_attention", M1_CHECKS, {"stability"}),
    **{f"m1_{name}": ("m1_attention", M1_CHECKS, {"stability"}) for name in HOSTILE},
    "m2_correct": ("m2_multihead", M2_CHECKS, set()),
    "m2_blank": ("m2_multihead", M2_CHECKS, set(M2_CHECKS)),
    "m2_partly": ("m2_multihead", M2_CHECKS, None),   # filled in below from the engine itself
}


def _points(root: Path, folder: str) -> tuple[dict, list]:
    sys.path.insert(0, str(root))
    try:
        from autograder import config
    finally:
        sys.path.pop(0)
    m = next(x for x in config.load(root / "course.yaml").milestones if x.folder == folder)
    return dict(m.checks), [w.id for w in m.written]


def test_autograde_scores_every_student_exactly(course):
    root, codes, logs = course
    # Some students failed (corrupted notebooks), so nbgrader exits 1; it must still grade the others.
    assert codes == [1, 1], logs
    for name, (folder, checks, lost) in CASES.items():
        if lost is None:
            continue
        points, written = _points(root, folder)
        got = cell_scores(root, folder, name)
        want = {c: (0.0 if c in lost else float(points[c]), False) for c in checks}
        for w in written:
            # Filled-in answers wait for a human; untouched "YOUR ANSWER HERE" cells score 0 at once.
            want[w] = (0.0, name.endswith("_correct"))
        assert got == want, f"{name}: {got}"


def test_partly_wrong_m2_matches_course_grade(course):
    """The nbgrader cell scores equal what `course grade` gives the same file, group by group."""
    root, _, _ = course
    sub = root / "submitted" / "m2_partly" / "m2_multihead"
    out = run(root, PY, "-m", "autograder.cli", "grade", str(sub), "-m", "m2", "--json", str(root / "r.json"))
    engine = {t["name"]: float(t["score"]) for t in json.loads((root / "r.json").read_text())["tests"]}
    assert 0 < sum(engine.values()) < sum(_points(root, "m2_multihead")[0].values()), out.stdout
    got = cell_scores(root, "m2_multihead", "m2_partly")
    assert {k: got[k][0] for k in engine} == engine


def test_corrupted_notebook_gets_no_autograde(course):
    root, _, logs = course
    for folder, name in (("m1_attention", "m1_corrupt"), ("m2_multihead", "m2_corrupt")):
        scores = cell_scores(root, folder, name)
        assert all(score in (None, 0, 0.0) for score, _ in scores.values()), scores
    assert "m1_corrupt" in logs[0] and "m2_corrupt" in logs[1]


def test_deleted_cell_is_restored_and_graded(course):
    root, _, _ = course
    nb = json.loads((root / "autograded/m1_deleted/m1_attention/m1_attention.ipynb").read_text())
    restored = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "masking"]
    assert len(restored) == 1 and "was missing from the submission" in "".join(restored[0]["source"])


def test_export_per_check_scores(course):
    root, _, _ = course
    run(root, PY, "-m", "autograder.cli", "export-scores", "m1", "-o", "m1.csv")
    rows = {r["student_id"]: r for r in csv.DictReader((root / "m1.csv").open())}
    assert set(rows) >= {f"m1_{s}" for s in ("correct", "blank", "partly", "corrupt", "deleted", "loop", "shadow")}
    assert rows["m1_correct"]["autograded"] == "20" and rows["m1_correct"]["softmax"] == "2"
    assert "needs manual grading: why_scale" in rows["m1_correct"]["status"] or \
        "needs manual grading" in rows["m1_correct"]["status"]
    assert rows["m1_partly"]["stability"] == "0" and rows["m1_partly"]["total"] == "18"
    assert rows["m1_loop"]["mask_helpers"] == "0"
    assert rows["m1_corrupt"]["total"] == "0" and "not autograded" in rows["m1_corrupt"]["status"]
    # nbgrader's own export command uses the same per-check plugin (nbgrader_config.py).
    run(root, PY, "-m", "nbgrader", "export", "--to", "all")
    header = next(csv.reader((root / "all-m2_multihead.csv").open()))
    assert header[:1 + len(M2_CHECKS)] == ["student_id", *M2_CHECKS]


def test_hand_grades_and_the_batch_route_meet_in_one_gradebook(course, tmp_path):
    """A term's second route, for real: written answers graded by hand in nbgrader's gradebook (where Formgrader
    stores them), exported by `course export-scores`, joined with a `grade-class` run of the same students'
    code in one gradebook; both routes agree on the autograded points."""
    from nbgrader.api import Gradebook
    from autograder import config
    from autograder.integrations import gradebook
    from autograder.integrations.batch.run import grade_class
    root, _, _ = course
    cfg = config.load(root / "course.yaml")
    m = cfg.milestone("m1")
    hand = {"m1_correct": {w.id: w.points for w in m.written},
            "m1_partly": {w.id: max(w.points - 1, 0) for w in m.written}}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for student, marks in hand.items():
            for qid, score in marks.items():
                grade = gb.find_grade(qid, m.folder, m.folder, student)
                grade.manual_score, grade.needs_manual_grade = score, False     # what Formgrader's save does
        gb.db.commit()
    run(root, PY, "-m", "autograder.cli", "export-scores", "m1", "-o", "m1-hand.csv")
    for student in hand:
        (tmp_path / "class" / student).mkdir(parents=True)
        shutil.copy(root / "submitted" / student / m.folder / "attention.py", tmp_path / "class" / student)
        on_time = (m.due - dt.timedelta(days=1)).timestamp()           # handed in a day before the deadline
        os.utime(tmp_path / "class" / student / "attention.py", (on_time, on_time))
    grade_class(tmp_path / "class", "m1", tmp_path / "graded", jobs=1, course=cfg, progress=False)
    book = {r["student"]: r for r in gradebook.rows(gradebook.build([tmp_path / "graded", root / "m1-hand.csv"], cfg))}
    for student, marks in hand.items():
        row = book[student]
        assert row["m1 written"] == sum(marks.values()), row
        assert "routes disagree" not in row["m1 flags"] and "needs manual grading" not in row["m1 flags"], row
    assert book["m1_correct"]["m1 autograded"] == 20 and book["m1_partly"]["m1 autograded"] == 18
    assert book["m1_correct"]["m1 total"] == 20 + sum(hand["m1_correct"].values())


FORBIDDEN_IN_FEEDBACK = ["HIDDEN TESTS", "run_check", "find_spec", "autograder.integrations.nbgrade", "INSTRUCTOR",
                         "most recent call last", "grading/", "milestones/", "checks_m1", "checks_m2", "expected_weights"]


def test_feedback_shows_no_hidden_code_or_grader_traceback(course):
    root, _, _ = course
    pages = sorted((root / "feedback").rglob("*.html"))
    assert len(pages) >= 9, pages   # every student but the corrupted ones (6 for m1, 3 for m2)
    for page in pages:
        html = page.read_text()
        own = HOSTILE.get(page.parts[-3].removeprefix("m1_"), "")     # a hostile student's own cell
        leaked = [s for s in FORBIDDEN_IN_FEEDBACK if s in html and s not in own]
        assert not leaked, f"{page.relative_to(root)} shows {leaked}"
    partly = (root / "feedback/m1_partly/m1_attention/m1_attention.html").read_text()
    assert "check `stability` failed" in partly      # the student still learns what went wrong


def test_released_folders_hold_no_solution(course):
    root, _, _ = course
    for f in (root / "assignments").rglob("*"):
        if f.is_file():
            text = f.read_text()
            assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, f


def _kernel_isolated() -> bool:
    sys.path.insert(0, str(ROOT))
    try:
        from autograder.sandbox.bwrap import works as bwrap_works
    finally:
        sys.path.pop(0)
    return bwrap_works()[0]


def test_hostile_notebooks_change_no_course_file(course):
    """Whatever the cells tried, the course folder is as it was (nbgrader's own folders aside)."""
    root, _, _ = course
    if not _kernel_isolated() and os.geteuid() != 0:
        pytest.skip("no bubblewrap and not root: the kernel runs as the grader's own user, unisolated")
    files = json.loads((root / "course-files.json").read_text())
    before, after = files["before"], files["after"]
    assert after == before, {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


def test_hostile_cells_reach_nothing_in_the_sandbox(course):
    """With bubblewrap, the kernel cannot even see the course: no solutions, no gradebook, no root."""
    root, _, _ = course
    if not _kernel_isolated():
        pytest.skip("bubblewrap cannot run here: the notebook kernel is not isolated (the verdicts say so)")
    said = {}
    for name in HOSTILE:
        nb = json.loads((root / f"autograded/m1_{name}/m1_attention/m1_attention.ipynb").read_text())
        attack = next(c for c in nb["cells"] if c.get("id") == "attack")
        said[name] = "".join("".join(o.get("text", "")) for o in attack["outputs"] if o.get("output_type") == "stream")
    assert "not reachable" in said["h_read_solutions"] and "READ" not in said["h_read_solutions"], said
    assert "OPENED" not in said["h_gradebook"] and "WROTE" not in said["h_gradebook"], said
    assert "DELETED nothing" in said["h_delete"], said


def test_the_notebook_kernel_has_no_privilege(course):
    """With bubblewrap or without: never root, never a capability (as root, an unprivileged uid)."""
    root, _, _ = course
    nb = json.loads((root / "autograded/m1_h_privilege/m1_attention/m1_attention.ipynb").read_text())
    attack = next(c for c in nb["cells"] if c.get("id") == "attack")
    said = "".join("".join(o.get("text", "")) for o in attack["outputs"] if o.get("output_type") == "stream")
    uid, caps = said.split()[1], said.split()[3]
    assert uid != "0" and int(caps, 16) == 0, said
