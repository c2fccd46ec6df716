"""Every verdict of the grader on every subject of the test suite, saved and compared: the proof that a
reshaping of the grader changed no score, named cause or message.

    python autograder/tests/verdicts.py snapshot before.json [--milestones m1 m2]
    python autograder/tests/verdicts.py compare before.json after.json

A subject is the reference, the stub, a mutant, a correct variant, a sample, a file of the hostile corpus
or of the integrity corpus. Each is graded through the batch grader (two lanes); what is kept per check
is its score, its named cause and its message with line numbers left out (moving code moves them), and
the numbers in paths under /tmp (a hostile file names its scratch file by the worker's process id, which
depends on how many workers its lane forked before).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))                 # derived.py, conftest's helpers
_LINE = re.compile(r"line \d+")
_TMP_PATH = re.compile(r"/tmp/[^\s'\"]+")


def _message(text: str) -> str:
    text = _LINE.sub("line N", text)
    return _TMP_PATH.sub(lambda m: re.sub(r"\d+", "N", m.group(0)), text)


def subjects(course, mid: str) -> dict[str, str]:
    """{subject name: the whole submission's text} for one milestone."""
    from conftest import subjects as suite_subjects, text_of
    from derived import subject_files, subject_text
    out = {name: text_of(mid, path) for name, path in suite_subjects(mid).items()}
    for kind in ("hostile", "integrity"):
        for path in subject_files(HERE / kind / mid):
            out[f"{kind}/{path.stem}"] = subject_text(path, course, mid)
    return out


def verdict(result) -> dict:
    return {"score": result.score, "integrity": result.integrity,
            "checks": {c.name: [c.score, c.cause, _message(c.message)] for c in result.checks}}


def snapshot(milestones: list[str]) -> dict:
    from autograder import config
    from autograder.integrations.batch.run import grade_class
    course = config.load()
    out = {}
    for mid in milestones:
        m = course.milestone(mid)
        work = Path(tempfile.mkdtemp(prefix=f"verdicts-{mid}-"))
        try:
            names = {}
            for i, (name, text) in enumerate(sorted(subjects(course, mid).items())):
                folder = work / "class" / f"s{i:04d}"
                folder.mkdir(parents=True)
                (folder / m.files[0]).write_text(text)
                names[folder.name] = name
            run = grade_class(work / "class", mid, work / "out", jobs=2, progress=False, course=course)
            out[mid] = {names[k]: verdict(r) for k, r in run.results.items()}
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"{mid}: {len(out[mid])} subjects", file=sys.stderr)
    return out


def _normalized(snapshot: dict) -> dict:
    """A snapshot with every message as `verdict` keeps it now (snapshots taken before it left /tmp paths)."""
    return {mid: {name: {**v, "checks": {c: [x[0], x[1], _message(x[2])] for c, x in v["checks"].items()}}
                  for name, v in by_name.items()} for mid, by_name in snapshot.items()}


def compare(before: dict, after: dict) -> list[str]:
    """Every difference, one line each: a subject that appeared or went, or a check whose verdict moved."""
    before, after = _normalized(before), _normalized(after)
    lines = []
    for mid in sorted(set(before) | set(after)):
        a, b = before.get(mid, {}), after.get(mid, {})
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b:
                lines.append(f"{mid}/{name}: only {'after' if name in b else 'before'}")
                continue
            if a[name] == b[name]:
                continue
            for key in ("score", "integrity"):
                if a[name][key] != b[name][key]:
                    lines.append(f"{mid}/{name}: {key} {a[name][key]!r} -> {b[name][key]!r}")
            for check in sorted(set(a[name]["checks"]) | set(b[name]["checks"])):
                x, y = a[name]["checks"].get(check), b[name]["checks"].get(check)
                if x != y:
                    lines.append(f"{mid}/{name} {check}: {x!r}\n    -> {y!r}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("out")
    s.add_argument("--milestones", nargs="*", default=["m1", "m2", "m3", "m4", "m5", "m6"])
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = p.parse_args(argv)
    if args.cmd == "snapshot":
        Path(args.out).write_text(json.dumps(snapshot(args.milestones), indent=1, sort_keys=True))
        return 0
    diff = compare(json.loads(Path(args.before).read_text()), json.loads(Path(args.after).read_text()))
    print("\n".join(diff) if diff else "no difference")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
