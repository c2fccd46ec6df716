"""Generate a class of N submissions (correct, mutants, stubs, hostile corpus) and grade it in one go.

    python -m autograder.integrations.batch.bench_class [--students 50] [--jobs 2] [--out /tmp/class-out]

Submissions are written to a fresh temp folder and graded only through `grade_class` (sandboxed,
each in its own temp copy). Prints the wall time and the time per submission.
"""
from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
import time
from pathlib import Path

from autograder import config
from autograder.integrations.batch.run import grade_class


def _whole_text(path: Path, course: config.Course) -> str:
    """The submission a test subject stands for: most mutants hold only what differs from a base (a .diff;
    autograder/tests/derived.py assembles them)."""
    tests = str(course.root / "autograder" / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from derived import subject_text
    return subject_text(path, course, "m1")


def make_class(dest: Path, n: int, course: config.Course) -> dict[str, str]:
    """Write n student folders under dest; return {student: kind}."""
    root = course.root
    m = course.milestone("m1")
    ref = root / "solutions" / m.folder / "attention.py"
    stub = root / "assignments" / m.folder / "attention.py"
    from autograder.tests.derived import subject_files
    mutants = subject_files(root / "autograder" / "tests" / "mutants" / "m1")
    correct = subject_files(root / "autograder" / "tests" / "correct" / "m1")
    hostile = subject_files(root / "autograder" / "tests" / "hostile" / "m1")
    pools = [("reference", [ref]), ("correct", correct or [ref]), ("mutant", mutants), ("hostile", hostile),
             ("mutant", mutants), ("stub", [stub])]
    cycles = {kind: itertools.cycle(files) for kind, files in pools if files}
    order = itertools.cycle([k for k, files in pools if files])
    kinds = {}
    for i in range(n):
        kind = next(order)
        src = next(cycles[kind])
        name = f"s{i:03d}_{kind}_{src.stem}"
        (dest / name).mkdir(parents=True)
        (dest / name / "attention.py").write_text(_whole_text(src, course))
        kinds[name] = kind
    return kinds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--students", type=int, default=50)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    course = config.load()
    work = Path(tempfile.mkdtemp(prefix="bench-class-"))
    try:
        kinds = make_class(work / "subs", a.students, course)
        out = Path(a.out) if a.out else work / "out"
        t0 = time.monotonic()
        run = grade_class(work / "subs", "m1", out, jobs=a.jobs, course=course)
        wall = time.monotonic() - t0
        print((out / "summary.md").read_text())
        counts = {k: sum(1 for v in kinds.values() if v == k) for k in sorted(set(kinds.values()))}
        bad = [s for s, k in kinds.items() if k == "reference" and run.results[s].score != run.results[s].max_score]
        print(f"class of {a.students} ({counts}) graded with {a.jobs} job(s), sandbox {run.sandbox.mode}: "
              f"{wall:.1f} s wall, {wall / a.students:.2f} s per submission")
        if bad:
            print(f"REFERENCE SUBMISSIONS WITHOUT FULL MARKS: {bad}", file=sys.stderr)
            return 1
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
