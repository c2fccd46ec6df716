"""Grading speed, as medians over repeated runs. Timing belongs here, never in tests.

    python -m autograder.bench [--repeat 5] [--milestones m1 m2]

1. The cost of `course grade` as a student or instructor runs it (a fresh process each time), next
   to a bare `python -c "import torch"` timed in the same run, interleaved, and their ratio: starting
   the sandboxed worker, importing torch twice (judge and worker, in parallel), running every check.
2. In-process grading time per milestone for the reference and the blank stub.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from autograder import config


def _wall(cmd: list[str], cwd) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def cli_ratio(course: config.Course, mid: str, repeat: int) -> tuple[float, float]:
    """Medians of (course grade <reference> -m mid, python -c 'import torch'), interleaved runs."""
    m = course.milestone(mid)
    grade = [sys.executable, "-m", "autograder.cli", "grade", str(course.root / "solutions" / m.folder), "-m", mid]
    bare = [sys.executable, "-c", "import torch"]
    _wall(bare, course.root)                  # warm the page cache for both
    grades, imports = [], []
    for _ in range(repeat):
        imports.append(_wall(bare, course.root))
        grades.append(_wall(grade, course.root))
    return statistics.median(grades), statistics.median(imports)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--milestones", nargs="*", help="milestone ids (default: every milestone with checks)")
    args = p.parse_args(argv)
    course = config.load()
    from autograder.grading.grade import check_groups, grade
    mids = args.milestones or [m.id for m in course.milestones if check_groups(m.id)]
    g, i = cli_ratio(course, mids[0], args.repeat)
    print(f"`course grade` of the {mids[0]} reference: median {g:.2f} s; `python -c 'import torch'`: median "
          f"{i:.2f} s; ratio {g / i:.2f}x (n={args.repeat}, interleaved)")
    print(f"\n{'milestone':<10} {'submission':<10} {'median s':>9} {'min s':>7} {'max s':>7}  (in-process, n={args.repeat})")
    for mid in mids:
        m = course.milestone(mid)
        for label, top in (("reference", "solutions"), ("stub", "assignments")):
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                grade(course.root / top / m.folder, m.id, course=course)
                times.append(time.perf_counter() - t0)
            print(f"{m.id:<10} {label:<10} {statistics.median(times):>9.2f} {min(times):>7.2f} {max(times):>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
