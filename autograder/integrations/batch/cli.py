"""Subcommands of `course` for instructors: grade-class, gradescope-bundle, classroom-workflow."""
from __future__ import annotations

import sys
from pathlib import Path

from autograder import config


def add_parsers(sub) -> None:
    c = sub.add_parser("grade-class", help="grade every student's submission, sandboxed and in parallel",
                       description="Grade every submission under SUBMISSIONS (one folder per student, nbgrader's "
                                   "submitted/<student>/<assignment>/, or a folder of zip files). Writes "
                                   "grades.csv, feedback/, results/<student>/results.json and summary.md to --out.")
    c.add_argument("submissions", metavar="SUBMISSIONS", help="folder of student submissions")
    c.add_argument("-m", "--milestone", required=True, help="milestone id from course.yaml, e.g. m1")
    c.add_argument("--out", required=True, metavar="DIR", help="folder for the gradebook and exports")
    c.add_argument("-j", "--jobs", type=int, help="parallel workers (default: number of CPUs, at most 8)")
    c.add_argument("--seed", type=int, help="seed for the hidden inputs (default: course.yaml grading.seed)")
    c.add_argument("--sandbox", choices=["auto", "bwrap", "rlimits"], default="auto",
                   help="auto: bubblewrap when it works, else resource limits only (said in every result); "
                        "bwrap: fail if bubblewrap cannot run")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--force", action="store_true",
                   help="write into --out even if it holds an earlier run (which moves to DIR/previous/: "
                        "compare with `course regrade-diff DIR/previous DIR`)")
    c.add_argument("--times", metavar="CSV",
                   help="submission times from an LMS export (a student column and a time column such as "
                        "submitted_at or Moodle's 'Last modified (submission)'); default: nbgrader's "
                        "timestamp.txt, zip entry times, or file times")
    b = sub.add_parser("gradescope-bundle", help="build Gradescope's autograder zip for a milestone",
                       description="Write a zip with setup.sh, run_autograder and the grader, for a Gradescope "
                                   "programming assignment.")
    b.add_argument("-m", "--milestone", required=True)
    b.add_argument("--out", metavar="FILE", help="zip to write (default: gradescope-<milestone>.zip)")
    w = sub.add_parser("classroom-workflow", help="write a GitHub Classroom workflow that runs the public tests",
                       description="Write .github/workflows/classroom.yml for student repositories of a milestone.")
    w.add_argument("-m", "--milestone", required=True)
    w.add_argument("--out", metavar="DIR", help="student repository folder (default: classroom/<folder>)")


def run(course: config.Course, args) -> int:
    m = course.milestone(args.milestone)
    if args.command == "gradescope-bundle":
        from autograder.integrations.batch.gradescope import write_bundle
        out = write_bundle(course, m.id, args.out or f"gradescope-{m.id}.zip")
        print(f"Wrote {out}: upload it as the autograder of a Gradescope programming assignment "
              f"(students submit {', '.join(m.files)}).")
        return 0
    if args.command == "classroom-workflow":
        from autograder.integrations.batch.classroom import write_workflow
        out = write_workflow(course, m.id, args.out or Path("classroom") / m.folder)
        print(f"Wrote {out}: commit it to the template repository of the assignment.")
        return 0
    from autograder.integrations.batch.run import grade_class
    from autograder.integrations.late import read_times
    try:
        times = read_times(args.times, course.tz) if args.times else None
        run_ = grade_class(Path(args.submissions), m.id, Path(args.out), jobs=args.jobs, seed=args.seed,
                           sandbox=args.sandbox, course=course, progress=not args.quiet, force=args.force,
                           times=times)
    except (FileExistsError, ValueError) as e:
        print(f"course grade-class: {e}", file=sys.stderr)
        return 2
    print((Path(args.out) / "summary.md").read_text(encoding="utf-8"))
    print(f"Wrote {args.out}/grades.csv, feedback/, results/ and summary.md for {len(run_.rows)} students "
          f"in {run_.wall:.1f} s ({run_.per_submission:.2f} s per submission, {run_.jobs} worker(s)).")
    if run_.previous is not None:
        from autograder.integrations.regrade import diff, diff_text
        try:
            said = diff_text(diff(run_.previous, Path(args.out)), brief=True)
        except (OSError, ValueError) as e:     # an earlier folder in another format: kept, not compared
            said = f"not compared ({e})"
        print(f"The earlier run is kept in {run_.previous}: {said}")
    if run_.sandbox.mode != "bwrap":
        print(f"WARNING: {run_.sandbox.note}", file=sys.stderr)
    return 0
