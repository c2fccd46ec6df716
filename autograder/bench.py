"""Median grading time per milestone for the reference and the blank stub.

    python -m autograder.bench [--repeat 5]

Timing belongs here, never in tests: tests assert behaviour, this reports medians.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from . import config
from .engine.grade import grade


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    course = config.load()
    print(f"{'milestone':<10} {'submission':<10} {'median s':>9} {'min s':>7} {'max s':>7}  (n={args.repeat})")
    for m in course.milestones:
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
