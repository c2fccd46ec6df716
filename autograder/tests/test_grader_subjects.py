"""The grader is tested as hard as the students: reference, stub, mutants, correct variants."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import COURSE, subjects
from derived import base_of, base_text, chunks, code, subject_text

# Every milestone whose hidden checks exist (course.yaml lists them; engine/checks_<id>.py holds them).
MILESTONES = [m.id for m in COURSE.milestones if (COURSE.root / "autograder" / "milestones" / m.id / "checks.py").is_file()]

# Files with the right names, shapes and dtypes that compute nothing (tests/nothing/<mid>.py, below this
# helper; KIND: zeros, input or random).
_FAKE = """
import torch
def _fake(x, shape=None):
    shape = x.shape if shape is None else shape
    if KIND == "zeros":
        return torch.zeros(shape, dtype=x.dtype)
    if KIND == "random":
        return torch.rand(shape, dtype=x.dtype)
    return x if tuple(x.shape) == tuple(shape) else torch.zeros(shape, dtype=x.dtype) + x.mean()
"""
NOTHING = {p.stem: p.read_text() for p in sorted((Path(__file__).parent / "nothing").glob("m*.py"))}


def _listed(path, key) -> list[str]:
    m = re.search(rf"^{key}:\s*(.+)$", path.read_text(), re.M)
    assert m, f"{path.name} has no '{key}:' line in its docstring"
    return [g.strip() for g in m.group(1).split(",") if g.strip()]


def catches(path) -> list[str]:
    return _listed(path, "CATCHES")


def diagnosis(path) -> list[str]:
    """The causes the report may name: the first must be named; 'none' means none may be."""
    return _listed(path, "DIAGNOSIS")


def by_kind(milestone, kind):
    return {n: p for n, p in subjects(milestone).items() if n.startswith(kind + "/")}


def case(*values, grades):
    """A parametrize case that reads the results of the subjects `grades` ([(milestone, name)])."""
    return pytest.param(*values, marks=pytest.mark.grades(*grades))


def _per_milestone(name):
    return [case(m, grades=[(m, name)]) for m in MILESTONES]


def _samples_cases():
    return [case(m, grades=[(m, n) for n in by_kind(m, "samples")]) for m in MILESTONES]


def _cases(kind):
    return [case(m, n, grades=[(m, n)]) for m in MILESTONES for n in by_kind(m, kind)]


@pytest.mark.parametrize("milestone", _per_milestone("reference"))
def test_reference_gets_full_marks(milestone, graded):
    r = graded(milestone, "reference")
    assert r.score == r.max_score == COURSE.milestone(milestone).max_score, [
        (c.name, c.message) for c in r.checks if not c.passed]
    assert not r.internal_errors


@pytest.mark.parametrize("milestone", _per_milestone("stub"))
def test_stub_gets_zero_saying_not_implemented(milestone, graded):
    r = graded(milestone, "stub")
    assert r.score == 0
    for c in r.checks:
        assert "not implemented yet" in c.message, (c.name, c.message)
    assert not r.internal_errors


@pytest.mark.parametrize("milestone", MILESTONES)
def test_enough_subjects_and_every_group_is_caught(milestone):
    mutants, correct = by_kind(milestone, "mutants"), by_kind(milestone, "correct")
    assert len(mutants) >= 10 and len(correct) >= 2
    caught = {g for p in mutants.values() for g in catches(p)}
    groups = set(COURSE.milestone(milestone).checks)
    assert caught >= groups, f"no mutant proves these checks can fail: {sorted(groups - caught)}"
    assert caught <= groups, f"CATCHES names unknown groups: {sorted(caught - groups)}"


@pytest.mark.parametrize("milestone, name", _cases("mutants"))
def test_mutant_loses_points_where_expected(milestone, name, graded):
    """The mutant loses points in exactly its CATCHES groups: where its mistake is, plus the rules it
    breaks (a mistake is charged once; see grade.py)."""
    r = graded(milestone, name)
    path = subjects(milestone)[name]
    lost = {c.name for c in r.checks if c.score < c.max_score}
    assert lost == set(catches(path)), f"{name} loses points in {sorted(lost)}, CATCHES says {catches(path)}"
    for c in r.checks:
        if c.name in lost:
            assert c.message and "grader could not finish" not in c.message, (c.name, c.message)
    assert r.score < r.max_score
    assert not r.internal_errors, r.internal_errors


@pytest.mark.parametrize("milestone, name", _cases("correct"))
def test_correct_variant_gets_full_marks(milestone, name, graded):
    r = graded(milestone, name)
    assert r.score == r.max_score, [(c.name, c.message) for c in r.checks if not c.passed]


@pytest.mark.parametrize("milestone", _samples_cases())
def test_samples_get_partial_credit(milestone, graded):
    samples = graded.of(milestone, "samples/")
    assert samples, "the demo needs sample submissions"
    for name, r in samples.items():
        assert 0 < r.score < r.max_score, (name, r.score)
        assert not r.internal_errors


def named_causes(result) -> set[str]:
    return {c.cause for c in result.checks if not c.passed and c.cause}


@pytest.mark.parametrize("milestone, name", _cases("mutants"))
def test_mutant_gets_its_diagnosis_and_no_wrong_one(milestone, name, graded):
    """Feedback names the mistake (the first DIAGNOSIS entry) and never a cause the mutant does not have."""
    want = diagnosis(subjects(milestone)[name])
    named = named_causes(graded(milestone, name))
    if want == ["none"]:
        assert not named, f"{name}: named {named}, but no cause is known for this mistake"
        return
    assert want[0] in named, f"{name}: the report should name {want[0]}; it named {named or 'nothing'}"
    assert named <= set(want), f"{name}: the report names {named - set(want)}, which this mutant does not have"


def _derived_cases():
    return [(m, n) for m in MILESTONES for n, p in subjects(m).items() if "/" in n and base_of(p)]


@pytest.mark.parametrize("milestone, name", _derived_cases())
def test_a_derived_subject_replaces_code_of_its_base(milestone, name):
    """A file with a BASE line must change code of its base (not just docstrings). A .py one must replace at
    least one statement: had the base renamed that function, the file would be its base plus dead code (a
    .diff whose base changed there no longer applies, and says so)."""
    path = subjects(milestone)[name]
    base_code = base_text(path, COURSE, milestone)
    if path.suffix == ".diff":
        assert code(subject_text(path, COURSE, milestone)) != code(base_code), f"{name} changes no code of its base"
        return
    base = dict(chunks(base_code)[0])
    replaced = [k for k, t in chunks(path.read_text())[0]
                if k != "__doc__" and k in base and code(base[k].strip() + "\n") != code(t.strip() + "\n")]
    assert replaced, f"{name} replaces nothing of {base_of(path)}: does it still name the right functions?"


@pytest.mark.parametrize("milestone", MILESTONES)
def test_most_mutants_get_a_named_cause(milestone):
    """Issue goal: at least 90% of the suite's mutants get the right named cause."""
    mutants = by_kind(milestone, "mutants")
    named = [n for n, p in mutants.items() if diagnosis(p) != ["none"]]
    assert len(named) >= 0.9 * len(mutants), f"only {len(named)} of {len(mutants)} mutants have a named cause"


@pytest.mark.parametrize("milestone", MILESTONES)
def test_a_file_that_computes_nothing_scores_zero(milestone, grade_text):
    """Points for how code is written only when it works: zeros, the input, or noise earn nothing."""
    for kind in ("zeros", "input", "random"):
        r = grade_text(milestone, (_FAKE + NOTHING[milestone]).replace("KIND", repr(kind)), name=kind)
        assert r.score == 0, (kind, [(c.name, c.score) for c in r.checks if c.score])


def test_split_merge_names_both_functions_when_both_are_wrong(graded):
    """split_merge judges merge_heads even when split_heads already failed: the report names both mistakes."""
    from autograder.milestones.m2.mistakes import CATALOGUE
    check = next(c for c in graded("m2", "mutants/split_and_merge_plain_views").checks if c.name == "split_merge")
    said = CATALOGUE.mistakes()
    assert said["split_plain_view"].text in check.message and said["merge_no_transpose"].text in check.message
