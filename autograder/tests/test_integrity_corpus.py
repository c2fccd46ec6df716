"""The integrity corpus: submissions that try to fool, read or escape the grader (tests/integrity/<mid>/),
graded in one batch per milestone, with bubblewrap (when it works) and in resource-limits mode on purpose.

Each file says what it tries (ATTACK) and what must come of it (EXPECT):
  flag=tamper|unobserved   the result carries that integrity flag, with evidence, and every check that
                           rests on the grader's observers scores 0;
  fails=g1,g2              these checks lose their points;
  score_at_most=N          never more than the honest part of the work earns;
  words="..."              words found in the report;
  absent="a|b"             none of these words in the report (hidden material that must not leak).
The files whose ATTACK line says so were written by a red team that saw neither these tests nor the
fixes; their score_at_most is what the same code without the trick earned there (its honest twin).
Whatever the file does, the course's reference graded in the same batch keeps full marks, and no file of
the repository changes.

SAFETY: every file is harmless even unsandboxed: none writes, deletes or sends anything (the worker's
syscall filter refuses it anyway), the fork and thread attempts start at most one of each.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder import config
from autograder.authoring import markers
from autograder.integrations.batch.run import grade_class
from autograder.grading.grade import check_groups
from derived import subject_files, subject_text

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "integrity"
COURSE = config.load()
_EXPECT = re.compile(r"^EXPECT:(.*)$", re.M)
_FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')


def expectation(path: Path) -> dict:
    line = _EXPECT.search(path.read_text())
    assert line, f"{path.name} has no EXPECT line"
    return {k: v.strip('"') for k, v in _FIELD.findall(line.group(1))}


def attacks() -> list[tuple[str, Path]]:
    return [(d.name, p) for d in sorted(CORPUS.glob("m*")) for p in subject_files(d)]


def repo_state() -> dict:
    """Every file of the repository that a submission could try to change, with its size and time."""
    out = {}
    for top in ("solutions", "autograder", "assignments", "course.yaml"):
        for p in [COURSE.root / top] if (COURSE.root / top).is_file() else (COURSE.root / top).rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts:
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module", params=["auto", "rlimits"])
def graded(request):
    """{(mid, name): Result} for the whole corpus plus each milestone's reference, in one mode."""
    before = repo_state()
    work = Path(tempfile.mkdtemp(prefix="integrity-"))
    results = {}
    try:
        for mid in sorted({mid for mid, _ in attacks()}):
            m = COURSE.milestone(mid)
            subs = work / mid / "class"
            for name, text in [(p.stem, subject_text(p, COURSE, mid)) for m_, p in attacks() if m_ == mid] + [
                    ("reference", markers.make_reference((COURSE.root / "solutions" / m.folder / m.files[0]).read_text(),
                                                         m.files[0]))]:
                (subs / name).mkdir(parents=True)
                (subs / name / m.files[0]).write_text(text)
            run = grade_class(subs, mid, work / mid / "out", jobs=2, course=COURSE, progress=False,
                              sandbox=request.param)
            results.update({(mid, name): r for name, r in run.results.items()})
        yield results
    finally:
        assert work.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
        shutil.rmtree(work, ignore_errors=True)
        assert repo_state() == before, "a submission changed a file of the repository"


def test_every_attack_says_what_it_tries_and_expects():
    assert attacks()
    for _, path in attacks():
        text = path.read_text()
        assert "ATTACK" in text.split("\n", 1)[0], path.name
        assert set(expectation(path)) <= {"flag", "fails", "score_at_most", "words", "absent"}, path.name


@pytest.mark.parametrize("mid,path", attacks(), ids=[f"{m}/{p.stem}" for m, p in attacks()])
def test_attack_outcome(graded, mid, path):
    want = expectation(path)
    r = graded[(mid, path.stem)]
    report = "\n".join(c.message for c in r.checks)
    assert not r.internal_errors, r.internal_errors
    if "flag" in want:
        assert r.integrity == want["flag"], (r.integrity, r.tamper, r.unobserved, report[:600])
        observers = [name for name, g in check_groups(mid).items() if g.observes]
        assert all(c.score == 0 for c in r.checks if c.name in observers), [(c.name, c.score) for c in r.checks]
    for name in filter(None, want.get("fails", "").split(",")):
        assert next(c for c in r.checks if c.name == name).score == 0, (name, report[:600])
    if "score_at_most" in want:
        assert r.score <= int(want["score_at_most"]), (r.score, report[:600])
    assert want.get("words", "") in report + " ".join(r.tamper), report[:1500]
    for secret in filter(None, want.get("absent", "").split("|")):
        assert secret not in report, secret


def test_the_reference_keeps_full_marks_beside_the_attacks(graded):
    for mid in {mid for mid, _ in attacks()}:
        r = graded[(mid, "reference")]
        assert r.score == r.max_score and r.integrity == "", (mid, [(c.name, c.message[:100]) for c in r.checks])
