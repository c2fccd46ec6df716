"""The `course` command: build student material, grade submissions, run the demo."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import build, config, markers

EPILOG = """examples:
  course build                           write assignments/ from solutions/ and course.yaml
  course build --check                   list stale derived files; exit 1 if any
  course grade path/to/folder -m m1      grade one submission and print the table and feedback
  course demo                            grade the bundled sample submissions
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="course", description="Transformer from Scratch: course tools.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    b = sub.add_parser("build", help="generate stubs, public tests and READMEs under assignments/",
                       description="Generate everything students receive from solutions/ and course.yaml.")
    b.add_argument("--check", action="store_true",
                   help="change nothing; list missing, stale or unexpected files and exit 1 if there are any")
    g = sub.add_parser("grade", help="grade one submission folder against the hidden checks",
                       description="Grade the student files in PATH for one milestone. Exit status 0 "
                                   "whenever grading ran, whatever the score.")
    g.add_argument("path", metavar="PATH", help="folder holding the milestone's student files")
    g.add_argument("-m", "--milestone", required=True, help="milestone id from course.yaml, e.g. m1")
    g.add_argument("--json", metavar="FILE", help="also write Gradescope's results.json format to FILE")
    g.add_argument("--seed", type=int, help="seed for the hidden inputs (default: course.yaml grading.seed)")
    sub.add_parser("demo", help="grade the bundled sample submissions and show one feedback report",
                   description="Grade every sample submission under autograder/samples/ and print "
                               "the grade table and one feedback report.")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        course = config.load()
        if args.command == "build":
            return _build(course, args.check)
        if args.command == "grade":
            return _grade(course, args)
        if args.command == "demo":
            from .demo import run
            return run(course)
    except config.ConfigError as e:
        print(f"course: course.yaml: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, markers.MarkerError) as e:
        print(f"course: {e}", file=sys.stderr)
        return 2
    return 2


def _build(course: config.Course, check: bool) -> int:
    if check:
        problems = build.check(course)
        for line in problems:
            print(line)
        if problems:
            print(f"{len(problems)} derived file(s) out of date: run `course build`.", file=sys.stderr)
            return 1
        print("assignments/ is up to date.")
        return 0
    changed = build.write(course)
    for rel in changed:
        print(f"wrote {rel}")
    print(f"{len(changed)} file(s) changed." if changed else "Nothing to change.")
    return 0


def _grade(course: config.Course, args) -> int:
    from .engine.grade import grade
    from .engine.report import feedback, write_gradescope
    from .engine.submission import SubmissionError
    try:
        course.milestone(args.milestone)
        result = grade(Path(args.path), args.milestone, seed=args.seed, course=course)
    except (SubmissionError, config.ConfigError) as e:
        print(f"course grade: {e}", file=sys.stderr)
        return 2
    print(feedback(result))
    if args.json:
        write_gradescope(result, args.json)
        print(f"\nWrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
