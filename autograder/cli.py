"""The `course` command: build student material, grade submissions, run the demo."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.authoring import build
from autograder import config
from autograder.authoring import markers

EPILOG = """examples:
  course build                           write assignments/ from solutions/ and course.yaml
  course build --check                   list stale derived files; exit 1 if any
  course grade path/to/folder -m m1      grade one submission and print the table and feedback
  course demo                            grade the bundled sample submissions
  course grade-class subs/ -m m1 --out graded/   grade a whole class in the sandbox, in parallel
  course gradescope-bundle -m m1          Gradescope autograder zip for m1
  course classroom-workflow -m m1 --out repo/   GitHub Classroom workflow for student repos
  course release m1                      build, then `nbgrader generate_assignment` the m1 notebook
  course export-scores m1 -o m1.csv      per-check nbgrader scores of every student (gradebook.db)
  course term                            the term's dates from course.yaml: release, due, late window
  course gradebook graded/m1 graded/m2 scores-m3_blocks.csv --out book/   one table, Canvas/Moodle CSV, class.html
  course regrade-diff graded/m1/previous graded/m1   what changed for whom after a regrade, and why
  course similarity subs/ -m m1 --out sim/   pairs sharing code beyond the stub and reference (evidence, not a grade)
  course train --task reverse            train the reference Transformer, report exact match on unseen inputs
  course train --from my_files/          the same with your own six files
  course translate train-out/model.pt "abcde"   decode one input with a trained model
  course train --task translate --out runs/fr   English -> French in 8 minutes on 2 cores; BLEU and chrF
  course translate runs/fr/model.pt "I am cold."   translate a sentence (no sentence: standard input)
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
    g.add_argument("--sandbox", choices=["auto", "bwrap", "rlimits"], default="auto",
                   help="auto: bubblewrap when it works, else resource limits only (the report says so); "
                        "bwrap: fail if bubblewrap cannot run")
    sub.add_parser("demo", help="grade the bundled sample submissions and show one feedback report",
                   description="Grade every sample submission under autograder/samples/ and print "
                               "the grade table and one feedback report.")
    r = sub.add_parser("release", help="build, then release a milestone's notebook with nbgrader",
                       description="Run `course build`, then `nbgrader generate_assignment` for the milestone, "
                                   "writing the student notebook into assignments/<folder>/.")
    r.add_argument("milestone", help="milestone id from course.yaml, e.g. m1")
    r.add_argument("--before-deadlines", action="store_true",
                   help="release although the late window of a milestone this one builds on is still open (its "
                        "folder holds those milestones' reference solutions): for building and testing only")
    e = sub.add_parser("export-scores", help="write nbgrader's per-check scores of a milestone as CSV",
                       description="One row per student in gradebook.db, one column per graded cell.")
    e.add_argument("milestone", help="milestone id from course.yaml, e.g. m1")
    e.add_argument("-o", "--out", metavar="FILE", help="CSV file to write (default: scores-<folder>.csv)")
    e.add_argument("--db", metavar="URL", help="gradebook URL (default: sqlite:///gradebook.db at the course root)")
    t = sub.add_parser("train", help="train a Transformer made of the course's (or your) six files on a toy task",
                       description="Assemble a Transformer from the course's reference files (or, with --from, from "
                                   "your own attention.py ... decoding.py; the course's data.py is added), train it "
                                   "with a progress bar, and report greedy exact match on the test split.")
    t.add_argument("--from", dest="source", metavar="DIR", help="folder holding your files of every milestone")
    t.add_argument("--task", choices=["copy", "reverse", "sort", "dates", "translate"], default="reverse",
                   help="a toy task, or translate: English -> French on Tatoeba sentences (BLEU and chrF)")
    t.add_argument("--minutes", type=float, help="translate: minutes of training (default 8)")
    t.add_argument("--out", metavar="DIR", default="train-out",
                   help="where model.pt, training.png, attention.png and summary.json go")
    t.add_argument("--steps", type=int, help="most training steps (training stops earlier once validation exact "
                                              "match reaches 99.8%%)")
    t.add_argument("--seed", type=int, default=0)
    tr = sub.add_parser("translate", help="decode one input with a checkpoint written by `course train`",
                        description="Decode TEXT with CHECKPOINT (model.pt of `course train`): greedy, or beam "
                                    "search with --beam (decoding.py needed).")
    tr.add_argument("checkpoint", metavar="CHECKPOINT")
    tr.add_argument("text", metavar="TEXT", nargs="?",
                    help="the input; without it, every line of standard input is translated, one output line each")
    tr.add_argument("--from", dest="source", metavar="DIR", help="the folder the model was trained --from")
    tr.add_argument("--beam", type=int, metavar="K", help="beam search with K hypotheses instead of greedy")
    for runs_student_files in (t, tr):      # both run --from files in the confined child: one escape hatch
        runs_student_files.add_argument("--unsafe-no-sandbox", action="store_true",
                                        help="with --from where bubblewrap cannot run and this is not root: run the "
                                             "files anyway, with all of your rights (refused otherwise)")
    from autograder.integrations.batch.cli import add_parsers as _batch_parsers
    _batch_parsers(sub)
    _ops_parsers(sub)
    return p


# ---- running a term: term, gradebook, regrade-diff, similarity (docs/running-a-term.md) ----------

def _out_folder(parser, what: str) -> None:
    """--out DIR, the folder a command writes, and --force, which lets it replace an earlier `what` there."""
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--force", action="store_true", help=f"replace an earlier {what} in DIR")


def _ops_parsers(sub) -> None:
    sub.add_parser("term", help="the term's schedule from course.yaml: release, due, end of the late window",
                   description="Print each milestone's release and due date, the late policy and the last moment a "
                               "late submission still earns points.")
    gb = sub.add_parser("gradebook", help="one gradebook for the term: CSV, Canvas and Moodle CSV, class.html",
                        description="Join grade-class --out folders and `course export-scores` CSVs (written answers) "
                                    "into one table, a row per student and columns per milestone (autograded, "
                                    "written, late penalty, total, flags); Canvas and Moodle import CSVs; class.html.")
    gb.add_argument("results", nargs="+", metavar="RESULTS",
                    help="grade-class --out folders and/or export-scores CSV files, any milestones")
    gb.add_argument("--roster", metavar="CSV", help="student, and any of name, canvas_id, sis_user_id, "
                                                   "sis_login_id, section, username, email")
    _out_folder(gb, "gradebook")
    rd = sub.add_parser("regrade-diff", help="what changed for each student between two grade-class runs",
                        description="Compare two grade-class --out folders (grade-class --force keeps the earlier "
                                    "run in DIR/previous/): per student, the score, flags and every check group "
                                    "whose points or message changed.")
    rd.add_argument("old", metavar="OLD")
    rd.add_argument("new", metavar="NEW")
    rd.add_argument("--json", metavar="FILE", help="also write the changes as JSON")
    sm = sub.add_parser("similarity", help="pairs of submissions sharing code beyond the stub and the reference",
                        description="Fingerprint every submission (copydetect's winnowing; the released stub and "
                                    "the reference are ignored) and report the pairs above --threshold, with the "
                                    "shared code side by side in similarity.html. Evidence for a person, never a grade.")
    sm.add_argument("submissions", metavar="SUBMISSIONS")
    sm.add_argument("-m", "--milestone", required=True)
    sm.add_argument("--threshold", type=float, default=0.5, help="least share of one's code found in the other (0.5)")
    _out_folder(sm, "report")


def _ops(course: config.Course, args) -> int:
    try:
        if args.command == "term":
            from autograder.integrations.late import schedule_text
            print(schedule_text(course))
            return 0
        if args.command == "gradebook":
            from autograder.integrations import gradebook
            roster = gradebook.read_roster(args.roster) if args.roster else None
            book = gradebook.build(args.results, course, roster)
            written = gradebook.write(book, course, Path(args.out), force=args.force)
            print(f"Gradebook of {len(book.students)} students, {', '.join(m.id for m in book.milestones)}: "
                  + ", ".join(str(p) for p in written))
            return 0
        if args.command == "regrade-diff":
            from autograder.integrations import regrade
            changes = regrade.diff(Path(args.old), Path(args.new))
            print(regrade.run_header(Path(args.old), Path(args.new)))
            print(regrade.diff_text(changes))
            if args.json:
                from autograder.grading.report import write_json
                write_json(args.json, regrade.diff_json(changes))
            return 0
        if args.command == "similarity":
            from autograder.integrations import similarity
            pairs, skipped, n = similarity.run(Path(args.submissions), args.milestone, Path(args.out), course,
                                               args.threshold, args.force)
            print(f"{n} submissions compared, {len(pairs)} pair(s) at or above {args.threshold:.0%}:")
            for i, pair in enumerate(pairs[:10], 1):
                print(f"{i:>3}. {pair.a} / {pair.b}: {pair.similarity:.0%} ({pair.tokens} shared tokens)")
            for line in skipped:
                print(f"not compared: {line}")
            print(f"Wrote {args.out}/similarity.html, similarity.csv, similarity.json: evidence for a person to "
                  f"read, never a grade.")
            return 0
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        print(f"course {args.command}: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"course {args.command}: {e.name} is not installed: pip install -e '.[instructor]'", file=sys.stderr)
        return 2
    return 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        course = config.load()
        if args.command == "build":
            return _build(course, args.check)
        if args.command == "grade":
            return _grade(course, args)
        if args.command in ("release", "export-scores"):
            return _nbgrader(course, args)
        if args.command in ("grade-class", "gradescope-bundle", "classroom-workflow"):
            from autograder.integrations.batch.cli import run as _batch_run
            return _batch_run(course, args)
        if args.command == "demo":
            from autograder.demo import run
            return run(course)
        if args.command in ("train", "translate"):
            return _train(course, args)
        if args.command in ("term", "gradebook", "regrade-diff", "similarity"):
            return _ops(course, args)
    except config.ConfigError as e:
        print(f"course: course.yaml: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, markers.MarkerError) as e:
        print(f"course: {e}", file=sys.stderr)
        return 2
    return 2


def _train(course: config.Course, args) -> int:
    from autograder.capstone import train
    try:
        if args.command == "translate":
            from autograder.capstone import translating
            lines = [args.text] if args.text is not None else [line.rstrip("\r\n") for line in sys.stdin]
            for line in translating.translate_lines(course, Path(args.checkpoint), lines, args.source, args.beam,
                                                    unsafe=args.unsafe_no_sandbox):
                print(line)
            return 0
        if args.task == "translate":
            from autograder.capstone import translating
            overrides = {"seed": args.seed, "minutes": args.minutes, "steps": args.steps}
            result = translating.train(course, Path(args.source) if args.source else None, Path(args.out), overrides,
                                       unsafe=args.unsafe_no_sandbox)
            translating.report(result)
            print(f"Wrote {args.out}/model.pt, training.png, attention.png and summary.json.")
            return 0
        overrides = {"task": args.task, "seed": args.seed}
        if args.task == "dates":
            overrides.update(steps=6000, n_train=30000)
        if args.steps:
            overrides["steps"] = args.steps
        result = train.train(course, Path(args.source) if args.source else None, Path(args.out), overrides,
                             unsafe=args.unsafe_no_sandbox)
    except train.TrainError as e:
        print(f"course {args.command}: {e}", file=sys.stderr)
        return 1
    train.report(result)
    print(f"Wrote {args.out}/model.pt, training.png, attention.png and summary.json.")
    return 0


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


def _nbgrader(course: config.Course, args) -> int:
    try:
        from autograder.integrations import nbgrade
        import nbgrader  # noqa: F401
    except ImportError:
        print("course: nbgrader is not installed: pip install -e '.[instructor]'", file=sys.stderr)
        return 2
    m = course.milestone(args.milestone)
    if args.command == "export-scores":
        out = args.out or f"scores-{m.folder}.csv"
        n = nbgrade.write_scores(course, m.id, out, args.db)
        print(f"Wrote {out} ({n} student(s)).")
        return 0
    open_windows = still_open(course, m)
    if open_windows and not args.before_deadlines:
        ends = "; ".join(f"{d}'s ends {course.late_window_end(course.milestone(d)).isoformat(timespec='minutes')}"
                         for d in open_windows)
        print(f"course release: assignments/{m.folder}/ holds the reference solutions of {', '.join(open_windows)}, "
              f"whose late window is still open ({ends}). "
              f"Students could hand them in as their own. Release after that, or pass --before-deadlines to "
              f"build the folder anyway (for testing; do not hand it out).", file=sys.stderr)
        return 1
    build.write(course)
    code = nbgrade.run_nbgrader(course, "generate_assignment", m.folder, "--force")
    problems = [p for p in build.check(course) if m.folder in p]
    for line in problems:
        print(line, file=sys.stderr)
    print(release_warning(course, m) or f"Released assignments/{m.folder}/.")
    return code or (1 if problems else 0)


def still_open(course: config.Course, m: config.Milestone, now=None) -> list[str]:
    """The milestones `m` builds on whose late window has not ended yet (their references are in m's folder)."""
    import datetime as dt
    now = now or dt.datetime.now(dt.timezone.utc)
    return [d.id for d in course.dependencies(m) if (end := course.late_window_end(d)) is not None and end > now]


def release_warning(course: config.Course, m: config.Milestone) -> str:
    """Folders of later milestones carry earlier milestones' reference code: say so when releasing."""
    deps = course.dependencies(m)
    if not deps:
        return ""
    files = ", ".join(f"{f} ({d.id})" for d in deps for f in d.files)
    ends = [(d.id, course.late_window_end(d)) for d in deps]
    when = "; ".join(f"{mid}'s last late submission: {end.isoformat(timespec='minutes')}" for mid, end in ends if end)
    sched = f" course.yaml releases {m.id} on {m.release.isoformat(timespec='minutes')}." if m.release else ""
    return (f"NOTE: assignments/{m.folder}/ contains the working reference solution of {files}, so the "
            f"folder runs on its own. Hand it out only after the deadline of {', '.join(d.id for d in deps)}"
            + (f" ({when})." if when else ".") + sched)


def _grade(course: config.Course, args) -> int:
    from autograder.sandbox import open_slot
    from autograder.grading.submission import SubmissionError, missing_files
    try:
        m = course.milestone(args.milestone)
        path = Path(args.path)
        if path.is_dir() and not missing_files(path, m):
            # The sandboxed fork server starts importing torch now, while this process imports it too.
            with open_slot(args.sandbox, course.startup_timeout) as slot:
                from autograder.grading.grade import grade
                result = grade(path, m.id, seed=args.seed, course=course, slot=slot)
        else:
            from autograder.grading.grade import grade
            result = grade(path, m.id, seed=args.seed, course=course)    # raises SubmissionError
    except (SubmissionError, config.ConfigError) as e:
        print(f"course grade: {e}", file=sys.stderr)
        return 2
    from autograder.grading.report import feedback, write_gradescope
    print(feedback(result))
    if args.json:
        write_gradescope(result, args.json)
        print(f"\nWrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
