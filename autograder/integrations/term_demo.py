"""Generate a term to try the course tools on: 30 students, milestones m1-m3, three layouts.

    python -m autograder.integrations.term_demo --out term/

Writes, under --out:
- `m1/`: a folder per student (`<student>/attention.py`), file times set to when each submitted;
- `m2/`: Canvas-style zips (`<student>_<ids>_multihead.zip`), entry times set the same way; one
  student handed nothing in;
- `m3/submitted/<student>/m3_blocks/blocks.py` with nbgrader's `timestamp.txt` (UTC);
- `students.json`: what each student's file is (reference, a correct variant, a mutant, the stub,
  a near copy) and how late, so a test can check every flag.
`written_scores(...)` writes the written answers' hand grades of m3 in the format of
`course export-scores`, as nbgrader's Formgrader would give them (simulated: nobody graded them).

Most students hand in the reference or a known mistake from autograder/tests/mutants; two unchanged
stubs per milestone are "not attempted"; a few are late (one within the grace period, one past the
last day); `nora` and `omar` hand in near copies of one correct m1 solution written differently from
the reference (variables renamed, comments changed), which the similarity report must rank first.
Nothing here is hostile: the files are the course's own solutions and mutants.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

from autograder import config
from autograder.authoring import markers

NAMES = ["abel", "bianca", "chen", "dara", "emil", "fatima", "goran", "hana", "ivo", "jana", "kemal", "lea",
         "mateo", "nora", "omar", "priya", "quinn", "rafael", "sina", "tomasz", "uma", "viktor", "wen", "xenia",
         "yusuf", "zoë", "anouk", "bao", "chiara", "dmitri"]
NEAR_COPIES = ("nora", "omar")
NEAR_SOURCE = "correct/m1/einsum_where.py"
# Per milestone: students handing back the stub, mistakes handed in, correct variants, late (hours after due),
# students who submit nothing.
PLAN = {
    "m1": {"stub": ["dara", "rafael"],
           "mutant": {"bianca": "no_sqrt_scale.py", "fatima": "mask_inverted.py", "ivo": "causal_triu.py",
                      "mateo": "softmax_no_max_shift.py", "priya": "k_not_transposed.py", "tomasz": "divide_by_dk.py",
                      "wen": "uses_torch_softmax.py", "anouk": "swapped_return.py", "zoë": "mask_after_softmax.py"},
           "correct": {"chen": "blind_lognorm_guard.py", "hana": "bmm_clamp.py", "lea": "nan_to_num_guard.py"},
           "late_hours": {"emil": 1, "hana": 49, "kemal": 0.15, "quinn": 8 * 24, "nora": 5},
           "none": []},
    "m2": {"stub": ["dara", "uma"],
           "mutant": {"bianca": "head_loop.py", "goran": "no_output_projection.py", "jana": "mask_inverted.py",
                      "sina": "merge_no_transpose.py", "xenia": "split_plain_view.py"},
           "correct": {"chen": "einsum_heads.py"},
           "late_hours": {"emil": 30, "viktor": 2},
           "none": ["dmitri"]},
    "m3": {"stub": ["dara", "bao"],
           "mutant": {"bianca": "eps_outside_sqrt.py", "ivo": "unbiased_variance.py", "lea": "ffn_no_activation.py",
                      "omar": "decoder_masks_swapped.py", "yusuf": "shared_attention.py"},
           "correct": {},
           "late_hours": {"hana": 24, "chiara": 3},
           "none": []},
}


def _subject(course: config.Course, rel: str, mid: str) -> str:
    from autograder.tests.derived import find_subject, subject_text     # a subject may be stored as a diff
    return subject_text(find_subject(rel.removesuffix(".py")), course, mid)


def near_copy(text: str) -> str:
    """The same solution by someone hiding it: names and comments changed, a blank line here and there."""
    out = re.sub(r"#[^\n]*", "# my own work", text)
    for old, new in (("scores", "logits"), ("weights", "attn_probs"), ("mask", "keep"), ("x_max", "row_peak")):
        out = re.sub(rf"\b{old}\b", new, out)
    return out.replace('"""Correct:', '"""Attention, by me:').replace("\n\n\n", "\n\n\n\n")


def _text(course: config.Course, m: config.Milestone, student: str) -> tuple[str, str]:
    plan = PLAN[m.id]
    if student in plan["stub"]:
        return "stub", (course.root / "assignments" / m.folder / m.files[0]).read_text(encoding="utf-8")
    if m.id == "m1" and student in NEAR_COPIES:
        text = _subject(course, NEAR_SOURCE, "m1")
        return "near copy", text if student == NEAR_COPIES[0] else near_copy(text)
    if student in plan["mutant"]:
        return "mutant", _subject(course, f"mutants/{m.id}/{plan['mutant'][student]}", m.id)
    if student in plan["correct"]:
        return "correct", _subject(course, f"correct/{m.id}/{plan['correct'][student]}", m.id)
    ref = course.root / "solutions" / m.folder / m.files[0]
    return "reference", markers.make_reference(ref.read_text(encoding="utf-8"), str(ref))


def submitted_at(m: config.Milestone, student: str) -> dt.datetime:
    hours = PLAN[m.id]["late_hours"].get(student)
    return m.due + dt.timedelta(hours=hours) if hours is not None else m.due - dt.timedelta(hours=20 + len(student))


def make_term(out: Path | str, course: config.Course | None = None) -> dict:
    course = course or config.load()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: choose another --out")
    info: dict[str, dict] = {}
    for mid in ("m1", "m2", "m3"):
        m = course.milestone(mid)
        for i, student in enumerate(NAMES):
            if student in PLAN[mid]["none"]:
                info.setdefault(student, {})[mid] = {"kind": "no submission"}
                continue
            kind, text = _text(course, m, student)
            when = submitted_at(m, student)
            info.setdefault(student, {})[mid] = {"kind": kind, "submitted_at": when.isoformat(),
                                                 "late_hours": PLAN[mid]["late_hours"].get(student)}
            if mid == "m1":                                   # a folder per student, file times
                d = out / "m1" / student
                d.mkdir(parents=True)
                (d / m.files[0]).write_text(text, encoding="utf-8")
                os.utime(d / m.files[0], (when.timestamp(), when.timestamp()))
            elif mid == "m2":                                 # Canvas zips, entry times
                (out / "m2").mkdir(parents=True, exist_ok=True)
                zname = out / "m2" / f"{student}_{1000 + i}_{52000 + i}_{m.folder}.zip"
                local = when.astimezone(course.tz)
                with zipfile.ZipFile(zname, "w", zipfile.ZIP_DEFLATED) as z:
                    z.writestr(zipfile.ZipInfo(m.files[0], local.timetuple()[:6]), text)
            else:                                             # nbgrader submitted/, timestamp.txt in UTC
                d = out / "m3" / "submitted" / student / m.folder
                d.mkdir(parents=True)
                (d / m.files[0]).write_text(text, encoding="utf-8")
                utc = when.astimezone(dt.timezone.utc)
                (d / "timestamp.txt").write_text(utc.strftime("%Y-%m-%d %H:%M:%S.%f UTC"), encoding="utf-8")
    (out / "students.json").write_text(json.dumps(info, indent=2, ensure_ascii=False), encoding="utf-8")
    return info


def written_scores(graded_m3: Path | str, dest: Path | str, course: config.Course | None = None) -> Path:
    """m3's hand grades of the written answers, with the autograded columns of a grade-class run, in
    the CSV format of `course export-scores` (a simulation of Formgrader: stubs get 0, others 1-2)."""
    course = course or config.load()
    m = course.milestone("m3")
    with open(Path(graded_m3) / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    header = ["student_id", *m.checks, *(w.id for w in m.written), "autograded", "written", "total", "max_score", "status"]
    with open(dest, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for n, row in enumerate(rows):
            blank = "not attempted" in row.get("flags", "")
            marks = {q.id: 0 if blank else (q.points if (n + k) % 3 else q.points - 1) for k, q in enumerate(m.written)}
            written = sum(marks.values())
            w.writerow({"student_id": row["student"], **{c: row[c] for c in m.checks}, **marks,
                        "autograded": row["score"], "written": written, "total": float(row["score"]) + written,
                        "max_score": m.max_score + sum(q.points for q in m.written), "status": "ok"})
    return Path(dest)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="empty folder for the term's submissions")
    a = p.parse_args(argv)
    info = make_term(a.out)
    print(f"Wrote a term of {len(info)} students under {a.out}: m1/ (folders), m2/ (Canvas zips), "
          f"m3/submitted/ (nbgrader), students.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
