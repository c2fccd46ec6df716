"""The grader is tested as hard as the students: reference, stub, mutants, correct variants."""
from __future__ import annotations

import re

import pytest

from conftest import COURSE, graded, subjects

MILESTONES = ["m1", "m2"]


def catches(path) -> list[str]:
    m = re.search(r"^CATCHES:\s*(.+)$", path.read_text(), re.M)
    assert m, f"{path.name} has no 'CATCHES:' line in its docstring"
    return [g.strip() for g in m.group(1).split(",") if g.strip()]


def by_kind(milestone, kind):
    return {n: p for n, p in subjects(milestone).items() if n.startswith(kind + "/")}


@pytest.mark.parametrize("milestone", MILESTONES)
def test_reference_gets_full_marks(milestone):
    r = graded(milestone)["reference"]
    assert r.score == r.max_score == COURSE.milestone(milestone).max_score, [
        (c.name, c.message) for c in r.checks if not c.passed]
    assert not r.internal_errors


@pytest.mark.parametrize("milestone", MILESTONES)
def test_stub_gets_zero_saying_not_implemented(milestone):
    r = graded(milestone)["stub"]
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


def _mutant_cases():
    return [(m, n) for m in MILESTONES for n in by_kind(m, "mutants")]


@pytest.mark.parametrize("milestone, name", _mutant_cases())
def test_mutant_loses_points_where_expected(milestone, name):
    r = graded(milestone)[name]
    path = subjects(milestone)[name]
    scores = {c.name: c for c in r.checks}
    for g in catches(path):
        c = scores[g]
        assert c.score < c.max_score, f"{name} should lose points in {g}"
        assert c.message and "grader could not finish" not in c.message, (g, c.message)
    assert r.score < r.max_score
    assert not r.internal_errors, r.internal_errors


@pytest.mark.parametrize("milestone, name", [(m, n) for m in MILESTONES for n in by_kind(m, "correct")])
def test_correct_variant_gets_full_marks(milestone, name):
    r = graded(milestone)[name]
    assert r.score == r.max_score, [(c.name, c.message) for c in r.checks if not c.passed]


@pytest.mark.parametrize("milestone", MILESTONES)
def test_samples_get_partial_credit(milestone):
    samples = {n: r for n, r in graded(milestone).items() if n.startswith("samples/")}
    assert samples, "the demo needs sample submissions"
    for name, r in samples.items():
        assert 0 < r.score < r.max_score, (name, r.score)
        assert not r.internal_errors
