"""Grade a whole class: sandboxed fork-server slots in parallel, then the gradebook and exports.

    course grade-class SUBMISSIONS --milestone m1 --out DIR [--jobs N] [--seed S] [--sandbox auto] [--force]
                       [--times LMS.csv]

Writes into DIR (refused when DIR already holds files; with --force the earlier run is kept in
DIR/previous/ for `course regrade-diff DIR/previous DIR`, never silently overwritten):
    grades.csv                        one row per student: name, key, score, one column per check, status,
                                      integrity, submission time, days late, late penalty, final score, flags
    feedback/<key>.txt                the feedback report the student reads
    results/<key>/results.json        Gradescope's format, per student
    summary.md, summary.json          score distribution and the checks the class fails most
<key> is the student's name made safe as a file name and unique in the class (collect.unique_key).
Every result records the seed and how the code was isolated; the same seed reproduces every score.
"""
from __future__ import annotations

import csv
import os
import queue
import shutil
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autograder import config
from autograder.grading.checks import CheckResult
from autograder.grading.grade import Result, grade
from autograder.grading.report import clean, feedback, gradescope, write_json, write_text
from autograder.grading.submission import SubmissionError
from autograder.integrations.batch.collect import Found, collect
from autograder.integrations.batch.progress import Progress
from autograder.integrations import flags as flagging
from autograder.integrations.late import Late, assess
from autograder.sandbox import Limits, Sandbox, Slot, make_root, remove_root


@dataclass
class ClassRun:
    milestone: str
    seed: int
    sandbox: Sandbox
    jobs: int
    rows: list[dict] = field(default_factory=list)
    students: dict[str, Found] = field(default_factory=dict)    # by key, like results and status
    results: dict[str, Result] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)        # graded, internal_error, missing, refused
    wall: float = 0.0
    out: Path | None = None
    late: dict[str, Late] = field(default_factory=dict)           # by key: submission time and penalty
    not_attempted: set[str] = field(default_factory=set)          # keys whose files are the released stub
    late_policy: str = ""                                         # what was applied, in words
    previous: Path | None = None                                  # where --force kept the earlier run

    @property
    def per_submission(self) -> float:
        return self.wall / len(self.rows) if self.rows else 0.0


def _unrunnable(m: config.Milestone, seed: int, why: str, sandbox: Sandbox) -> Result:
    checks = [CheckResult(name, pts, 0, f"Not run: {why}.") for name, pts in m.checks.items()]
    return Result(m.id, seed, checks, [], 0.0, [sandbox.note] if sandbox.note else [])


def _grade_one(found: Found, m: config.Milestone, seed: int, course: config.Course, slot: Slot) -> tuple[Result, str]:
    """(result, status) of one gradable student."""
    try:
        r = grade(found.path, m.id, seed=seed, course=course, slot=slot)
    except SubmissionError as e:        # the file changed since it was collected
        return _unrunnable(m, seed, str(e), slot.sandbox), e.status
    return r, "internal_error" if r.internal_errors else "graded"


def _refuse_earlier_run(out: Path, force: bool) -> None:
    """Grades are never overwritten by accident: a non-empty --out needs --force (checked before
    any grading, so the instructor does not wait for a refusal)."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file: --out must be a folder")
    earlier = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if earlier and not force:
        shown = ", ".join(earlier[:4]) + (", ..." if len(earlier) > 4 else "")
        raise FileExistsError(f"{out} is not empty (it holds {shown}): pass --force to replace an earlier "
                              f"run's grades there, or choose another --out")


def _keep_earlier_run(out: Path) -> Path | None:
    """With --force, the earlier run's grades, summary, feedback and results move to out/previous/
    (replacing an older one there), so a regrade can be compared with `course regrade-diff`."""
    if not (out / "grades.csv").is_file():
        return None
    prev = out / "previous"
    if prev.is_symlink() or prev.is_file():
        prev.unlink()
    elif prev.is_dir():
        shutil.rmtree(prev)
    prev.mkdir()
    for name in ("grades.csv", "summary.md", "summary.json", "feedback", "results"):
        src = out / name
        if src.exists() and not src.is_symlink():
            src.rename(prev / name)
    return prev


def _remove_earlier_outputs(out: Path) -> None:
    """What an earlier run wrote in `out` (and only that): no stale feedback of a student who is
    no longer in the class stays beside the new grades."""
    for p in (out / "feedback").glob("*.txt"):
        p.unlink()
    for p in (out / "results").glob("*/results.json"):
        p.unlink()
        if not any(p.parent.iterdir()):
            p.parent.rmdir()
    for name in ("grades.csv", "summary.md", "summary.json"):
        (out / name).unlink(missing_ok=True)


def grade_class(submissions: Path | str, milestone: str, out: Path | str, *, jobs: int | None = None,
                seed: int | None = None, sandbox: str = "auto", course: config.Course | None = None,
                limits: Limits | None = None, progress: bool = True, stream=None, force: bool = False,
                times: dict | None = None) -> ClassRun:
    """`times`: {student: aware datetime} from an LMS export (late.read_times); otherwise each
    submission's time comes from nbgrader's timestamp.txt, zip entry times or file times."""
    course = course or config.load()
    m = course.milestone(milestone)
    seed = course.seed if seed is None else seed
    jobs = max(1, jobs or min(os.cpu_count() or 1, 8))
    out = Path(out)
    _refuse_earlier_run(out, force)
    box = Sandbox.detect(sandbox, limits)
    root = make_root()
    start = time.monotonic()
    try:
        found = collect(Path(submissions), m, root / "staging")
        if not found:
            raise FileNotFoundError(f"{submissions}: no student folders or zip files found")
        late = {f.key: assess(f, m, course, times) for f in found}
        blank = {f.key for f in found if flagging.not_attempted(f.path, m, course)}
        jobs = min(jobs, len(found))
        bar = Progress(len(found), f"{m.id}", stream) if progress else None
        todo: queue.Queue = queue.Queue()
        for f in found:
            todo.put(f)
        results: dict[str, tuple[Result, str]] = {}
        errors: list[BaseException] = []
        lock = threading.Lock()

        def lane(index: int):
            slot = None
            try:
                while True:
                    try:
                        f = todo.get_nowait()
                    except queue.Empty:
                        return
                    if f.path is None:
                        r, status = _unrunnable(m, seed, f.problem, box), f.status
                    else:
                        if slot is None or not slot.alive():
                            if slot is not None:
                                slot.close()
                            slot = Slot(index, root, box, course.startup_timeout)
                        r, status = _grade_one(f, m, seed, course, slot)
                    with lock:
                        results[f.key] = (r, status)
                    if bar:
                        bar.update(r.score, r.max_score)
            except BaseException as e:   # a grader bug: stop this lane, report after the others finish
                errors.append(e)
            finally:
                if slot is not None:
                    slot.close()

        threads = [threading.Thread(target=lane, args=(i,), daemon=True) for i in range(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    finally:
        remove_root(root)
    order = sorted(found, key=lambda f: (f.student, f.key))
    run = ClassRun(m.id, seed, box, jobs, students={f.key: f for f in order},
                   results={f.key: results[f.key][0] for f in order},
                   status={f.key: results[f.key][1] for f in order}, wall=time.monotonic() - start,
                   late=late, not_attempted=blank,
                   late_policy=(f"due {m.due.isoformat(timespec='minutes')}; {course.late.describe()}"
                                if m.due else "no due date in course.yaml: no late policy"))
    if force:
        run.previous = _keep_earlier_run(out)
    write_outputs(run, m, out)
    return run


def write_outputs(run: ClassRun, m: config.Milestone, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _remove_earlier_outputs(out)
    (out / "feedback").mkdir(exist_ok=True)
    (out / "results").mkdir(exist_ok=True)
    run.out = out
    names = list(m.checks)
    run.rows = []
    for key, r in run.results.items():
        by_name = {c.name: c for c in r.checks}
        row = {"student": clean(run.students[key].student, one_line=True), "key": key,
               "score": r.score, "max_score": r.max_score}
        row.update({n: by_name[n].score if n in by_name else 0 for n in names})
        late = run.late.get(key) or Late(None, "unknown", None)
        flags = flagging.flag_list(status=run.status[key], not_attempted=key in run.not_attempted,
                                   late_days=late.days, late_percent=late.percent, integrity=r.integrity)
        row.update(seed=r.seed, sandbox=run.sandbox.mode, status=run.status[key], integrity=r.integrity,
                   seconds=round(r.elapsed, 2),
                   submitted_at=late.submitted.isoformat(timespec="seconds") if late.submitted else "",
                   time_source=late.source, days_late=late.days, late_percent=late.percent,
                   late_penalty=late.penalty(r.score), final_score=round(r.score - late.penalty(r.score), 2),
                   flags="; ".join(flags))
        run.rows.append(row)
        extra = [late.describe(r.score)] if late.due else []
        if key in run.not_attempted:
            extra.append("Not attempted: your file is the stub you received, unchanged.")
        if late.days:
            extra.append(f"Score after the late penalty: {row['final_score']:g} / {r.max_score}.")
        write_text(out / "feedback" / f"{key}.txt", feedback(r) + "\n" + "".join(f"\n{e}" for e in extra)
                   + ("\n" if extra else ""))
        (out / "results" / key).mkdir(exist_ok=True)
        gs = gradescope(r)
        gs["output"] += "".join(f" {e}" for e in extra)
        gs["extra_data"].update(flags=flags, late={"submitted_at": row["submitted_at"], "source": late.source,
                                                   "days": late.days, "percent": late.percent,
                                                   "penalty": row["late_penalty"], "final_score": row["final_score"]})
        write_json(out / "results" / key / "results.json", gs)
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["student", "key", "score", "max_score", *names, "seed", "sandbox",
                                          "status", "integrity", "seconds", "submitted_at", "time_source",
                                          "days_late", "late_percent", "late_penalty", "final_score", "flags"])
        w.writeheader()
        w.writerows(run.rows)
    summary = summarize(run, m)
    write_json(out / "summary.json", summary)
    write_text(out / "summary.md", summary_text(summary) + "\n")


def summarize(run: ClassRun, m: config.Milestone) -> dict:
    scores = [row["score"] for row in run.rows]
    ran = [k for k, status in run.status.items() if status in ("graded", "internal_error")]
    fails = Counter()
    examples: dict[str, str] = {}
    # "Not run" is not a failed check, nor is a stub handed back: the class's mistakes only
    for r in (run.results[k] for k in ran if k not in run.not_attempted):
        for c in r.checks:
            if not c.passed:
                fails[c.name] += 1
                examples.setdefault(c.name, c.message.splitlines()[0][:200] if c.message else "")
    buckets = Counter()
    top = m.max_score
    for s in scores:
        lo = min(int(s / top * 10), 9) * 10 if top else 0
        buckets[lo] += 1
    return {
        "milestone": m.id, "seed": run.seed, "students": len(scores), "max_score": top,
        "sandbox": run.sandbox.mode, "sandbox_note": run.sandbox.note, "jobs": run.jobs,
        "wall_seconds": round(run.wall, 1), "seconds_per_submission": round(run.per_submission, 2),
        "mean": round(statistics.mean(scores), 2) if scores else 0,
        "median": statistics.median(scores) if scores else 0,
        "full_marks": sum(1 for s in scores if s == top), "zero": sum(1 for s in scores if s == 0),
        "distribution": {f"{lo}-{lo + 10 if lo < 90 else 100}%": buckets.get(lo, 0) for lo in range(0, 100, 10)},
        "most_failed": [{"check": name, "failed": n, "share": round(n / max(1, len(set(ran) - run.not_attempted)), 3),
                         "example": examples[name]}
                        for name, n in fails.most_common()],
        "not_graded": [{"student": clean(run.students[k].student, one_line=True), "key": k, "status": status,
                        "reason": run.results[k].checks[0].message if run.results[k].checks else ""}
                       for k, status in run.status.items() if k not in ran],
        "internal_errors": {s: r.internal_errors for s, r in run.results.items() if r.internal_errors},
        "integrity": [{"student": clean(run.students[k].student, one_line=True), "key": k, "flag": r.integrity,
                       "evidence": [clean(e, one_line=True) for e in (r.tamper or r.unobserved)[:5]]}
                      for k, r in run.results.items() if r.integrity],
        "late_policy": run.late_policy,
        "late": [{"student": row["student"], "key": row["key"], "submitted_at": row["submitted_at"],
                  "days": row["days_late"], "percent": row["late_percent"], "penalty": row["late_penalty"]}
                 for row in run.rows if row["days_late"]],
        "not_attempted": [{"student": row["student"], "key": row["key"]} for row in run.rows
                          if row["key"] in run.not_attempted],
        "mean_final": round(statistics.mean(row["final_score"] for row in run.rows), 2) if run.rows else 0,
    }


def summary_text(s: dict) -> str:
    lines = [f"# Class summary: {s['milestone']}",
             f"{s['students']} students, seed {s['seed']}, sandbox {s['sandbox']}, {s['jobs']} parallel worker(s), "
             f"{s['wall_seconds']} s wall ({s['seconds_per_submission']} s per submission).",
             f"Mean {s['mean']} / {s['max_score']}, median {s['median']}, full marks {s['full_marks']}, "
             f"zero {s['zero']}.", "", "## Score distribution"]
    most = max(s["distribution"].values() or [1]) or 1
    for label, n in s["distribution"].items():
        lines.append(f"{label:>8}  {'#' * round(24 * n / most):<24} {n}")
    lines += ["", "## Checks the class fails most (the next lecture)"]
    if not s["most_failed"]:
        lines.append("Nobody failed a check.")
    for f in s["most_failed"]:
        lines.append(f"- {f['check']}: {f['failed']} student(s) ({f['share']:.0%} of those graded who attempted it). "
                     f"e.g. \"{f['example']}\"")
    lines += ["", f"## Late policy applied: {s['late_policy']}",
              f"Late: {len(s['late'])} student(s); mean after penalties {s['mean_final']} / {s['max_score']}."]
    lines += [f"- {x['student']}: submitted {x['submitted_at']}, {x['days']} day(s) late, -{x['percent']:g}% "
              f"({x['penalty']:g} point(s))" for x in s["late"]]
    if s["not_attempted"]:
        lines += ["", f"## Not attempted (the released stub, unchanged): {len(s['not_attempted'])} student(s)",
                  ", ".join(x["student"] for x in s["not_attempted"])]
    if s["not_graded"]:
        lines += ["", f"## Not graded: {len(s['not_graded'])} student(s) (score 0; their feedback says why)"]
        lines += [f"- {n['student']} ({n['status']}): {n['reason'].removeprefix('Not run: ')}" for n in s["not_graded"]]
    if s["integrity"]:
        lines += ["", f"## Integrity flags (instructor only): {len(s['integrity'])} student(s)",
                  "`tamper`: the code reached for the grader's own objects; `unobserved`: part of its result was "
                  "computed where the grader could not observe it. Checks resting on those observations scored 0. "
                  "Evidence for a person to look at (docs/security.md):"]
        lines += [f"- {f['student']} ({f['flag']}): {'; '.join(f['evidence'])}" for f in s["integrity"]]
    if s["internal_errors"]:
        lines += ["", f"## Grader errors (instructor only): {len(s['internal_errors'])} student(s)"]
        lines += [f"- {k}: {v[0].splitlines()[0] if v else ''}" for k, v in s["internal_errors"].items()]
    if s["sandbox"] != "bwrap":
        lines += ["", f"WARNING: {s['sandbox_note']}"]
    return "\n".join(lines)
