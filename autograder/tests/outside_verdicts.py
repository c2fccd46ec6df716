"""Grade a folder of outside wrong submissions (DIR/<mid>/*.py, each a whole student file with `# INTENDED:`
and `# KIND:` header lines) through the batch grader, for measuring verdicts on material nobody here wrote:

    python autograder/tests/outside_verdicts.py DIR out.json [m1 m3 ...]

Writes out.json: {mid: {name: {intended, kind, score, max, integrity, internal,
checks: {group: [score, max_score, cause, message, charged_in]}}}}. Public tests: public_catch.py --dir DIR/<mid>."""
import json, re, shutil, sys, tempfile
from pathlib import Path
from autograder import config
from autograder.integrations.batch.run import grade_class

src, out = Path(sys.argv[1]), Path(sys.argv[2])
only = sys.argv[3:] or ["m1", "m2", "m3", "m4", "m5", "m6"]
course = config.load()
res = {}
for mid in only:
    m = course.milestone(mid)
    files = sorted((src / mid).glob("*.py"))
    if not files:
        continue
    work = Path(tempfile.mkdtemp(prefix=f"outside-{mid}-"))
    names = {}
    for i, f in enumerate(files):
        d = work / "class" / f"s{i:03d}"
        d.mkdir(parents=True)
        shutil.copy(f, d / m.files[0])
        names[d.name] = f
    run = grade_class(work / "class", mid, work / "out", jobs=2, progress=False, course=course)
    res[mid] = {}
    for k, r in run.results.items():
        f = names[k]
        text = f.read_text()
        intended = (re.search(r"^# INTENDED:\s*(.+)$", text, re.M) or [None, ""])[1]
        kind = (re.search(r"^# KIND:\s*(.+)$", text, re.M) or [None, ""])[1]
        res[mid][f.stem] = {"intended": intended, "kind": kind, "score": r.score, "max": r.max_score,
                            "integrity": r.integrity, "internal": r.internal_errors,
                            "checks": {c.name: [c.score, c.max_score, c.cause, c.message, c.charged_in] for c in r.checks}}
    shutil.rmtree(work, ignore_errors=True)
    print(mid, len(res[mid]), file=sys.stderr)
out.write_text(json.dumps(res, indent=1))
