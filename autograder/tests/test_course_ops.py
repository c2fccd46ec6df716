"""Running a term (issue 23): a generated class of 30 over m1-m3 on three layouts, graded once per
module; dates and the late policy of course.yaml, flags in every output, one gradebook with Canvas
and Moodle CSV and class.html (viewed in headless Chromium), a regrade diff after a changed check,
and a similarity report that ranks the two near copies first."""
from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from autograder import cli, config
from autograder.integrations import gradebook, late, lms_export, regrade, similarity, term_demo
from autograder.integrations.batch.run import grade_class

COURSE = config.load()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _rows(path: Path) -> dict[str, dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return {r.get("student") or r.get("student_id"): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def term():
    """The term's submissions and every milestone graded on its layout (jobs=2): about 45 s."""
    root = Path(tempfile.mkdtemp(prefix="term-test-"))
    info = term_demo.make_term(root / "subs", COURSE)
    for mid, where in (("m1", "m1"), ("m2", "m2"), ("m3", "m3")):
        grade_class(root / "subs" / where, mid, root / "graded" / mid, jobs=2, course=COURSE, progress=False)
    term_demo.written_scores(root / "graded" / "m3", root / "graded" / "scores-m3_blocks.csv", COURSE)
    yield root, info
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def book(term):
    root, _ = term
    g = root / "graded"
    gb = gradebook.build([g / "m1", g / "m2", g / "m3", g / "scores-m3_blocks.csv"], COURSE)
    gradebook.write(gb, COURSE, root / "book")
    return gb, root / "book"


# ---- course.yaml: dates and the late policy --------------------------------------------------

def test_course_yaml_dates_and_late_policy():
    m1, m3 = COURSE.milestone("m1"), COURSE.milestone("m3")
    assert m1.release < m1.due < m3.release and m1.due.tzinfo is not None
    pol = COURSE.late
    assert pol.days_late(m1.due + dt.timedelta(minutes=pol.grace_minutes), m1.due) == 0   # within grace
    assert pol.days_late(m1.due + dt.timedelta(minutes=pol.grace_minutes + 1), m1.due) == 1
    assert pol.days_late(m1.due + dt.timedelta(hours=49), m1.due) == 3
    assert pol.percent(1) == pol.percent_per_day and pol.percent(100) == 100.0
    assert pol.percent(pol.last_day) == min(pol.cap_percent, pol.last_day * pol.percent_per_day)
    # every release comes after the late window of the milestones it builds on
    for m in COURSE.milestones:
        for d in COURSE.dependencies(m):
            assert m.release >= COURSE.late_window_end(d)


def test_course_yaml_refuses_a_release_before_a_dependency_closes(tmp_path):
    text = (COURSE.root / "course.yaml").read_text().replace("release: 2026-09-28T09:00", "release: 2026-09-21T09:00")
    (tmp_path / "course.yaml").write_text(text)
    with pytest.raises(config.ConfigError, match="m2.release.*m1's last late submission"):
        config.load(tmp_path / "course.yaml")
    bad = (COURSE.root / "course.yaml").read_text().replace("percent_per_day: 10", "percent_per_day: 300")
    (tmp_path / "course.yaml").write_text(bad)
    with pytest.raises(config.ConfigError, match="term.late"):
        config.load(tmp_path / "course.yaml")


def test_course_release_refuses_while_a_dependency_is_open(monkeypatch, capsys):
    """m3's folder holds m1's and m2's references: before m2's late window ends, `course release m3` refuses
    (the students of m2 could hand them in) unless told --before-deadlines."""
    m3, m2 = COURSE.milestone("m3"), COURSE.milestone("m2")
    end = COURSE.late_window_end(m2)
    assert cli.still_open(COURSE, m3, now=end - dt.timedelta(minutes=1)) == ["m2"]
    assert cli.still_open(COURSE, m3, now=end + dt.timedelta(minutes=1)) == []
    assert cli.still_open(COURSE, COURSE.milestone("m1"), now=end) == []
    monkeypatch.setattr(cli, "still_open", lambda course, m, now=None: ["m2"])
    assert cli.main(["release", "m3"]) == 1
    err = capsys.readouterr().err
    assert "late window is still open" in err and "--before-deadlines" in err


def test_lms_times_column(tmp_path):
    (tmp_path / "w.csv").write_text("Full name,Last modified (submission)\nabel,2026-09-21T10:00\nbo,\n")
    times = late.read_times(tmp_path / "w.csv", COURSE.tz)
    assert times == {"abel": dt.datetime(2026, 9, 21, 10, 0, tzinfo=COURSE.tz)}
    (tmp_path / "bad.csv").write_text("student,submitted_at\nabel,yesterday\n")
    with pytest.raises(ValueError, match="row 2"):
        late.read_times(tmp_path / "bad.csv", COURSE.tz)


def test_course_term_prints_the_schedule(capsys):
    assert cli.main(["term"]) == 0
    out = capsys.readouterr().out
    assert "m3" in out and "2026-11-01 23:59" in out and "late work until" in out


# ---- grade-class: times, late penalties and flags in every output -----------------------------

def test_every_output_carries_times_penalties_and_flags(term):
    root, info = term
    for mid, source in (("m1", "file times"), ("m2", "zip entry times"), ("m3", "nbgrader timestamp.txt")):
        out = root / "graded" / mid
        rows = _rows(out / "grades.csv")
        expected = {s for s, ms in info.items() if ms[mid]["kind"] != "no submission"}
        assert set(rows) == expected                                 # every student in is one row out
        summary = json.loads((out / "summary.json").read_text())
        m = COURSE.milestone(mid)
        for s, row in rows.items():
            plan = info[s][mid]
            assert row["time_source"] == source
            assert dt.datetime.fromisoformat(row["submitted_at"]) == dt.datetime.fromisoformat(plan["submitted_at"])
            days = COURSE.late.days_late(dt.datetime.fromisoformat(plan["submitted_at"]), m.due)
            assert int(row["days_late"]) == days
            assert float(row["final_score"]) == pytest.approx(float(row["score"]) * (1 - COURSE.late.percent(days) / 100))
            flags = row["flags"]
            assert ("not attempted" in flags) == (plan["kind"] == "stub")
            assert ("late" in flags) == (days > 0)
            if plan["kind"] == "stub":
                assert row["score"] == "0"
            res = json.loads((out / "results" / row["key"] / "results.json").read_text())
            assert res["extra_data"]["flags"] == [f for f in flags.split("; ") if f]
            assert res["extra_data"]["late"]["days"] == days
            fb = (out / "feedback" / f"{row['key']}.txt").read_text()
            assert ("day(s) late" in fb) == (days > 0) and ("Not attempted" in fb) == (plan["kind"] == "stub")
        assert {x["student"] for x in summary["not_attempted"]} == {s for s in rows if info[s][mid]["kind"] == "stub"}
        assert {x["student"] for x in summary["late"]} == {s for s, r in rows.items() if r["days_late"] != "0"}
        assert "late" in summary["late_policy"] and "Late policy applied" in (out / "summary.md").read_text()
    m1 = _rows(root / "graded" / "m1" / "grades.csv")
    assert m1["kemal"]["days_late"] == "0"                             # 9 minutes late: within the grace period
    assert m1["quinn"]["final_score"] == "0.0" and m1["quinn"]["score"] == "20"   # past the last day


# ---- the gradebook and the LMS exports ---------------------------------------------------------

def test_gradebook_joins_every_route(book, term):
    gb, out = book
    _, info = term
    rows = _rows(out / "gradebook.csv")
    assert set(rows) == set(info) and len(rows) == 30
    assert [m.id for m in gb.milestones] == ["m1", "m2", "m3"] and gb.written_graded == {"m3"}
    assert rows["dmitri"]["m2 flags"] == "no submission" and rows["dmitri"]["m2 total"] == "0"
    assert "m1: not attempted" in rows["dara"]["flags"] and "m3: written answers all 0" in rows["dara"]["flags"]
    hana = gb.cell("hana", "m3")                       # late penalty on autograded + written
    assert hana.late_percent == 10 and hana.late_penalty == pytest.approx((hana.autograded + hana.written) * 0.1)
    assert rows["hana"]["m3 total"] == f"{hana.total:g}"
    assert float(rows["abel"]["total"]) == sum(float(rows["abel"][f"{m} total"]) for m in ("m1", "m2", "m3"))
    assert rows["abel"]["max_total"] == str(20 + 20 + 26)
    assert not any("routes disagree" in r["flags"] for r in rows.values())   # grade-class and nbgrader agree


def test_canvas_and_moodle_csv(book):
    gb, out = book
    with open(out / "canvas.csv", newline="", encoding="utf-8") as f:
        canvas = list(csv.reader(f))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas[0][5:] == [f"{m.id} {m.title}" for m in gb.milestones]
    assert canvas[1][0].strip() == "Points Possible" and canvas[1][5:] == ["20", "20", "26"]
    by_login = {r[3]: r for r in canvas[2:]}
    assert len(by_login) == 30 and by_login["quinn"][5] == "0"
    with open(out / "moodle.csv", newline="", encoding="utf-8") as f:
        moodle = list(csv.DictReader(f))
    assert len(moodle) == 30 and {"Username", "Email address"} <= set(moodle[0])
    assert lms_export._safe("=HYPERLINK(\"x\")") == "'=HYPERLINK(\"x\")" and lms_export._safe("-3") == "-3"


def test_gradebook_with_a_roster_and_bad_input(book, term, tmp_path):
    root, _ = term
    (tmp_path / "roster.csv").write_text("student,name,canvas_id,sis_login_id,email\nabel,Abel A,101,aa1,a@x.org\n"
                                         "newbie,New Bie,102,nb2,n@x.org\n")
    gb = gradebook.build([root / "graded" / "m1"], COURSE, gradebook.read_roster(tmp_path / "roster.csv"))
    assert "newbie" in gb.students and gb.cell("newbie", "m1").flags == ["no submission"]
    assert "not on the roster" in gb.flags("bianca")
    gradebook.write(gb, COURSE, tmp_path / "b")
    canvas = {r["SIS Login ID"]: r for r in csv.DictReader(open(tmp_path / "b" / "canvas.csv", encoding="utf-8"))}
    assert canvas["aa1"]["ID"] == "101" and canvas["aa1"]["Student"] == "Abel A"
    with pytest.raises(FileExistsError):
        gradebook.write(gb, COURSE, tmp_path / "b")
    (tmp_path / "junk.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="student_id"):
        gradebook.build([tmp_path / "junk.csv"], COURSE)
    with pytest.raises(ValueError, match="grade-class"):
        gradebook.build([tmp_path], COURSE)


def _chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=120, cwd=cwd)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_class_page_in_a_real_browser(book):
    gb, out = book
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium here (apt-get install chromium); CI installs it")
    page = (out / "class.html").as_uri()
    dom = _chromium("--virtual-time-budget=3000", "--dump-dom", page, cwd=out).stdout
    assert 'data-ready="yes"' in dom                 # the page's script ran to its end without an error
    assert dom.count('class="distribution"') == 3 and dom.count("<tr>") == 31      # 30 students + header
    assert "Checks the class fails most" in dom and 'data-flag="not attempted">not attempted: 2' in dom
    _chromium("--window-size=1300,1600", f"--screenshot={out / 'class.png'}", page, cwd=out)
    png = (out / "class.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


# ---- regrades -------------------------------------------------------------------------------------

def test_regrade_never_overwrites_and_diff_says_why(term):
    root, _ = term
    out = root / "regraded-m1"
    grade_class(root / "subs" / "m1", "m1", out, jobs=2, course=COURSE, progress=False)
    with pytest.raises(FileExistsError, match="--force"):
        grade_class(root / "subs" / "m1", "m1", out, jobs=2, course=COURSE, progress=False)
    # a changed check: masking is now worth 4 points instead of 3
    m1 = COURSE.milestone("m1")
    changed = dataclasses.replace(COURSE, milestones=tuple(
        dataclasses.replace(m, checks={**m.checks, "masking": 4}) if m.id == "m1" else m for m in COURSE.milestones))
    run = grade_class(root / "subs" / "m1", "m1", out, jobs=2, course=changed, progress=False, force=True)
    assert run.previous == out / "previous" and (out / "previous" / "grades.csv").is_file()
    changes = {c.student: c for c in regrade.diff(out / "previous", out)}
    abel = changes["abel"]
    assert (abel.old_score, abel.new_score) == (20, 21)
    (g,) = abel.groups
    assert (g.group, g.old_points, g.new_points, g.max_points) == ("masking", 3, 4, 4)
    quinn = changes["quinn"]                     # past the last day: still 0 after the penalty
    assert quinn.old_final == quinn.new_final == 0
    text = regrade.diff_text(list(changes.values()))
    assert "abel (abel): 20 -> 21" in text and "- masking: 3 -> 4 / 4" in text
    assert cli.main(["regrade-diff", str(out / "previous"), str(out), "--json", str(root / "diff.json")]) == 0
    assert any(c["student"] == "abel" for c in json.loads((root / "diff.json").read_text()))
    assert len(list((out / "results").iterdir())) == 30 and m1.checks["masking"] == 3


# ---- similarity ---------------------------------------------------------------------------------------

def test_similarity_ranks_the_near_copies_first(term):
    root, _ = term
    out = root / "similarity-m1"
    assert cli.main(["similarity", str(root / "subs" / "m1"), "-m", "m1", "--out", str(out), "--threshold", "0.3"]) == 0
    data = json.loads((out / "similarity.json").read_text())
    assert data["students"] == 30
    first = data["pairs"][0]
    assert {first["a"], first["b"]} == set(term_demo.NEAR_COPIES) and first["similarity"] > 0.9
    assert all(p["similarity"] < 0.8 for p in data["pairs"][1:])
    html = (out / "similarity.html").read_text()
    assert html.count('class="pair"') == len(data["pairs"]) and "<mark>" in html and "never a grade" in html
    # students who handed in the reference or the stub share nothing beyond the boilerplate
    assert not any({"abel", "dara"} & {p["a"], p["b"]} for p in data["pairs"])


# ---- nbgrader's export: late policy and blank written answers ---------------------------------------

def test_export_scores_applies_the_late_policy_and_flags_blank_answers():
    pytest.importorskip("nbgrader")
    from types import SimpleNamespace as NS
    from nbgrader.api import MissingEntry
    from autograder.integrations import nbgrade
    m = COURSE.milestone("m3")

    def grade(name, auto, manual=None, needs=False):
        return NS(name=name, auto_score=auto, manual_score=manual, needs_manual_grade=needs,
                  score=manual if manual is not None else auto)

    full = [grade(c, p) for c, p in m.checks.items()]
    subs = {"ann": ([*full, *(grade(w.id, 0) for w in m.written)], (m.due + dt.timedelta(days=1)).astimezone(dt.timezone.utc).replace(tzinfo=None)),
            "ben": ([*full, *(grade(w.id, None, w.points) for w in m.written)], None)}

    class Book:
        students = [NS(id="ann"), NS(id="ben"), NS(id="cy")]

        def find_submission_notebook(self, nb, folder, sid):
            if sid not in subs:
                raise MissingEntry()
            return NS(grades=subs[sid][0])

        def find_submission(self, folder, sid):
            return NS(timestamp=subs[sid][1])

    header, rows = nbgrade.score_rows(Book(), COURSE, m)
    by = {r["student_id"]: r for r in rows}
    assert {"submitted_at", "days_late", "late_percent", "late_penalty", "final_total"} <= set(header)
    assert "written answer left blank (scored 0)" in by["ann"]["status"]
    assert by["ann"]["days_late"] == 1 and by["ann"]["final_total"] == pytest.approx(m.max_score * 0.9)
    assert by["ben"]["status"] == "ok" and by["ben"]["final_total"] == by["ben"]["total"] == 26
    assert by["cy"]["status"] == "no submission"
