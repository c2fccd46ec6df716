"""How often do the public tests catch a wrong submission? Run a folder's public tests with each subject in place.

    python autograder/tests/public_catch.py m3                 # our mutants and correct variants of m3
    python autograder/tests/public_catch.py m3 --dir DIR       # any folder of whole (or BASE:) subject files
    python autograder/tests/public_catch.py all --jobs 2

A mutant is caught when `pytest -q -x` in the built folder (assignments/<folder>/, with the subject in
place of the student's file) fails; a correct variant must pass. Prints the misses and the rate.
Public tests see only the student's folder, exactly as a student runs them.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parents[1]))

from autograder.config import load as load_course  # noqa: E402
from derived import subject_files, subject_text  # noqa: E402

COURSE = load_course()


def run_public(milestone, text: str | None, timeout: float = 300) -> tuple[int, float, str]:
    """(pytest's return code, seconds, last lines) with `text` as the student's file (None: the reference)."""
    m = COURSE.milestone(milestone)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / m.folder
        shutil.copytree(COURSE.root / "assignments" / m.folder, folder,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.ipynb"))
        target = folder / m.files[0]
        if text is None:
            shutil.copy(COURSE.root / "solutions" / m.folder / m.files[0], target)
        else:
            target.write_text(text)
        t0 = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"], cwd=folder,
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return -1, time.perf_counter() - t0, "timeout"
        return r.returncode, time.perf_counter() - t0, "\n".join(r.stdout.splitlines()[-15:])


def subjects(milestone: str, directory: Path | None = None) -> list[tuple[str, str, Path]]:
    """(kind, name, path): kind 'mutant' or 'correct'."""
    if directory is not None:
        kind = "correct" if "correct" in directory.parts else "mutant"
        return [(kind, p.stem, p) for p in subject_files(directory)]
    out = []
    for kind, sub in (("mutant", "mutants"), ("correct", "correct")):
        for p in subject_files(TESTS / sub / milestone):
            out.append((kind, p.stem, p))
    return out


def measure(milestone: str, directory: Path | None = None, jobs: int = 2, verbose: bool = False) -> dict:
    items = subjects(milestone, directory)

    def one(item):
        kind, name, path = item
        return item, run_public(milestone, subject_text(path, COURSE, milestone))

    caught, missed, wrongly_failed, passed = [], [], [], []
    with ThreadPoolExecutor(jobs) as pool:
        for (kind, name, _), (rc, secs, tail) in pool.map(one, items):
            if kind == "mutant":
                (caught if rc not in (0, -1) else missed).append(name)
            else:
                (passed if rc == 0 else wrongly_failed).append(name)
                if rc != 0 and verbose:
                    print(f"--- correct variant {name} FAILED:\n{tail}")
    return {"caught": caught, "missed": missed, "correct_passed": passed, "correct_failed": wrongly_failed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("milestone", help="m1..m6 or all")
    ap.add_argument("--dir", type=Path, help="a folder of subject files (default: tests/mutants and tests/correct)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    mids = [m.id for m in COURSE.milestones] if a.milestone == "all" else [a.milestone]
    for mid in mids:
        r = measure(mid, a.dir, a.jobs, a.verbose)
        n = len(r["caught"]) + len(r["missed"])
        print(f"{mid}: public tests catch {len(r['caught'])}/{n} mutants"
              + (f" ({100 * len(r['caught']) / n:.0f}%)" if n else "")
              + f"; correct variants passing {len(r['correct_passed'])}/{len(r['correct_passed']) + len(r['correct_failed'])}")
        if r["missed"]:
            print("  missed:", ", ".join(r["missed"]))
        if r["correct_failed"]:
            print("  CORRECT VARIANTS FAILING:", ", ".join(r["correct_failed"]))


if __name__ == "__main__":
    main()
