"""`course demo`: grade the bundled sample submissions, as an instructor would see them.

For each milestone: the reference, the blank stub, and the realistic attempts under
autograder/samples/<milestone>/<student>/. Prints the grade table, then one feedback report.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autograder.config import Course
from autograder.grading.grade import grade
from autograder.grading.report import feedback

SAMPLES = Path(__file__).resolve().parent / "samples"


def submissions(course: Course, mid: str) -> dict[str, Path]:
    m = course.milestone(mid)
    found = {"reference": course.root / "solutions" / m.folder,
             "blank stub": course.root / "assignments" / m.folder}
    for folder in sorted((SAMPLES / mid).glob("*")):
        if folder.is_dir():
            found[folder.name] = folder
    return found


def run(course: Course) -> int:
    jobs = [(m.id, name, path) for m in course.milestones for name, path in submissions(course, m.id).items()]
    print(f"Grading {len(jobs)} sample submissions (two at a time)...", flush=True)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda j: (j[0], j[1], grade(j[2], j[0], course=course)), jobs))
    shown = None
    for m in course.milestones:
        rows = [(name, r) for mid, name, r in results if mid == m.id]
        groups = list(m.checks)
        width = max(len(n) for n, _ in rows)
        print(f"\n{course.title}, milestone {m.id}: {m.title}")
        print(f"{'submission':<{width}}  {'score':>7}  " + "  ".join(groups))
        for name, r in rows:
            cells = "  ".join(f"{c.score:>{len(c.name)}}" for c in r.checks)
            print(f"{name:<{width}}  {r.score:>3}/{r.max_score:<3}  {cells}")
            if shown is None and name not in ("reference", "blank stub") and r.score < r.max_score:
                shown = (name, r)
    if shown:
        print(f"\nFeedback report for {shown[0]} (what the student reads):\n")
        print(feedback(shown[1]))
    return 0
