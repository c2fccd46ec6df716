"""The hidden grader under plain pytest (autograder/integrations/pytest_plugin): same verdicts and messages as `course grade`."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from autograder import cli
from conftest import COURSE, subjects, text_of

GRADED = [m for m in COURSE.milestones if (COURSE.root / "autograder" / "milestones" / m.id / "checks.py").is_file()]


def hidden(tmp_path, submission, milestone, *args):
    """Run `pytest autograder/integrations/pytest_plugin ...` as an instructor would; return {group: (passed, message, properties)}."""
    xml = tmp_path / "junit.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "autograder/integrations/pytest_plugin", "--submission", str(submission),
                        "--milestone", milestone, "--junitxml", str(xml), "-p", "no:cacheprovider", *args],
                       cwd=COURSE.root, capture_output=True, text=True, timeout=600)
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        failure = case.find("failure")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[case.get("name")] = (failure is None, (failure.text or "") if failure is not None else "", props)
    return out, r


def _folder(tmp_path, milestone, source):
    m = COURSE.milestone(milestone)
    folder = tmp_path / "submission"
    folder.mkdir(exist_ok=True)
    (folder / m.files[0]).write_text(text_of(milestone, source))
    return folder


@pytest.mark.parametrize("m", GRADED, ids=lambda m: m.id)
def test_reference_passes_and_stub_fails_every_group(tmp_path, m):
    ref, r = hidden(tmp_path, COURSE.root / "solutions" / m.folder, m.id)
    assert list(ref) == list(m.checks), r.stdout[-2000:]
    assert all(passed for passed, _, _ in ref.values()), r.stdout[-3000:]
    assert {name: int(props["points"]) for name, (_, _, props) in ref.items()} == m.checks
    stub, r = hidden(tmp_path, COURSE.root / "assignments" / m.folder, m.id)
    for name, (passed, message, _) in stub.items():
        assert not passed and "not implemented" in message, (name, message)
        assert "Traceback" not in message and "autograder/" not in message and "checks_" not in message


@pytest.mark.parametrize("m", GRADED, ids=lambda m: m.id)
def test_verdicts_and_messages_equal_course_grade(tmp_path, m):
    mutant = sorted(p for n, p in subjects(m.id).items() if n.startswith("mutants/"))[0]
    folder = _folder(tmp_path, m.id, mutant)
    got, _ = hidden(tmp_path, folder, m.id)
    out = tmp_path / "results.json"
    assert cli.main(["grade", str(folder), "-m", m.id, "--json", str(out)]) == 0
    want = {t["name"]: t for t in json.loads(out.read_text())["tests"]}
    for name, (passed, message, props) in got.items():
        assert passed == (want[name]["score"] == want[name]["max_score"]), name
        if not passed:
            # results.json appends the stand-in note ("Graded with the course's correct ...") to a group's message
            assert message.strip() == want[name]["output"].split("\nGraded with")[0].strip(), name


def test_k_grades_only_that_group_and_what_it_depends_on(tmp_path):
    folder = _folder(tmp_path, "m2", subjects("m2")["mutants/split_interleaved"])
    got, r = hidden(tmp_path, folder, "m2", "-k", "parity")
    assert list(got) == ["parity"], r.stdout[-2000:]
    passed, _, props = got["parity"]
    assert passed       # graded with correct split/merge stand-ins, as course grade does
    assert props["graded_groups"].split(",") == ["split_merge", "parity"]


def test_x_stops_grading_at_the_first_failing_group(tmp_path):
    folder = _folder(tmp_path, "m1", subjects("m1")["mutants/softmax_ignores_dim"])
    got, _ = hidden(tmp_path, folder, "m1", "-x")
    assert list(got) == ["softmax"] and not got["softmax"][0]
