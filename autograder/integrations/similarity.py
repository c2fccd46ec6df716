"""Which submissions of a class share code beyond what the course gave everyone: evidence for a
person to read, never a grade.

    course similarity SUBMISSIONS -m m1 --out DIR [--threshold 0.5]

Each student's files (collected like grade-class: any layout, links and odd zips refused) are
fingerprinted with copydetect's winnowing (k-grams of tokens, variable names and comments filtered
out, so renaming and re-commenting change nothing). The released stub and the reference solution are
boilerplate: code every student got or that a correct answer shares with the reference is ignored,
so ten students who wrote the textbook answer do not look alike. For every pair: the share of each
one's code found in the other. DIR receives similarity.csv (every pair above the threshold, most
similar first; the similarity is the larger of the two shares), similarity.json, and similarity.html
with the shared code highlighted side by side.
"""
from __future__ import annotations

import csv
import html
import io
import itertools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autograder import config
from autograder.authoring import markers
from autograder.grading.report import clean, write_json

K, WINDOW = 25, 1          # copydetect's defaults: noise and guarantee thresholds 25 (window 25 - 25 + 1)


@dataclass
class Pair:
    a: str
    b: str
    share_a: float         # share of a's code (beyond boilerplate) found in b
    share_b: float
    tokens: int            # overlapping tokens
    html_a: str = ""       # a's code, shared parts highlighted (escaped HTML)
    html_b: str = ""

    @property
    def similarity(self) -> float:
        return max(self.share_a, self.share_b)


def _fingerprint(text: str, boilerplate=None):
    from copydetect.detector import CodeFingerprint
    return CodeFingerprint("submission.py", K, WINDOW, boilerplate=boilerplate, language="python",
                           fp=io.StringIO(text))


def boilerplate_texts(course: config.Course, m: config.Milestone) -> list[str]:
    """What every student may share: the released stub and the reference, per file."""
    out = []
    for f in m.files:
        stub = course.root / "assignments" / m.folder / f
        if stub.is_file():
            out.append(stub.read_text(encoding="utf-8"))
        ref = course.root / "solutions" / m.folder / f
        if ref.is_file():
            out.append(markers.make_reference(ref.read_text(encoding="utf-8"), str(ref)))
    return out


def _texts(submissions: Path, m: config.Milestone, staging: Path) -> tuple[dict[str, str], list[str]]:
    from autograder.integrations.batch.collect import collect
    texts, skipped = {}, []
    for f in collect(submissions, m, staging):
        if f.path is None:
            skipped.append(f"{clean(f.student, one_line=True)}: {f.problem}")
            continue
        parts = []
        for name in m.files:
            p = f.path / name
            parts.append(p.read_text(encoding="utf-8", errors="replace"))   # checked by collect: regular, bounded
        texts[clean(f.student, one_line=True)] = "\n".join(parts)
    return texts, skipped


MIN_TOKENS = 40            # fewer shared (filtered) characters than this is one coincidental k-gram or two


def compare(texts: dict[str, str], boilerplate: list[str], threshold: float = 0.5,
            min_tokens: int = MIN_TOKENS) -> list[Pair]:
    """Every pair whose similarity is at least `threshold` over at least `min_tokens` shared
    tokens, most similar first (a student who added three lines to the reference shares 100% of
    them by chance with whoever added the same three)."""
    import numpy as np
    from copydetect.detector import compare_files
    from copydetect.utils import highlight_overlap
    bp = np.unique(np.concatenate([np.array(list(_fingerprint(t).hashes), dtype=np.int64) for t in boilerplate])
                   if boilerplate else np.array([], dtype=np.int64))
    prints = {s: _fingerprint(t, bp) for s, t in texts.items()}
    pairs = []
    for a, b in itertools.combinations(sorted(prints), 2):
        tokens, (sa, sb), (sl_a, sl_b) = compare_files(prints[a], prints[b])
        if max(sa, sb) < threshold or tokens < min_tokens:
            continue
        pair = Pair(a, b, float(sa), float(sb), int(tokens))
        pair.html_a = highlight_overlap(prints[a].raw_code, sl_a, '<mark>', '</mark>', escape_html=True)[0]
        pair.html_b = highlight_overlap(prints[b].raw_code, sl_b, '<mark>', '</mark>', escape_html=True)[0]
        pairs.append(pair)
    pairs.sort(key=lambda p: (-p.similarity, -p.tokens, p.a, p.b))
    return pairs


def report_html(pairs: list[Pair], m: config.Milestone, students: int, threshold: float) -> str:
    e = html.escape
    head = (f"<h1>Similarity: {e(m.id)} {e(m.title)}</h1><p>{students} submissions, {len(pairs)} pair(s) with at "
            f"least {threshold:.0%} of one's code (beyond the stub and the reference) found in the other. Evidence "
            f"for a person to read, never a grade: shared code can have innocent reasons (a study group, a "
            f"tutorial both followed).</p>")
    body = []
    for i, p in enumerate(pairs, 1):
        body.append(f'<section class="pair" id="pair-{i}"><h2>{i}. {e(p.a)} and {e(p.b)}: {p.similarity:.0%}</h2>'
                    f"<p>{p.share_a:.0%} of {e(p.a)}'s code is in {e(p.b)}'s; {p.share_b:.0%} the other way; "
                    f"{p.tokens} shared tokens.</p><div class=\"side\"><pre>{clean(p.html_a)}</pre>"
                    f"<pre>{clean(p.html_b)}</pre></div></section>")
    style = ("body{font-family:system-ui,sans-serif;margin:2em} .side{display:flex;gap:1em} "
             "pre{flex:1;overflow:auto;border:1px solid #ccc;padding:.5em;font-size:12px;max-height:40em} "
             "mark{background:#ffe08a}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
            f"content=\"default-src 'none'; style-src 'unsafe-inline'\"><title>Similarity {e(m.id)}</title>"
            f"<style>{style}</style></head><body>{head}{''.join(body)}</body></html>\n")


def run(submissions: Path | str, milestone: str, out: Path | str, course: config.Course | None = None,
        threshold: float = 0.5, force: bool = False, min_tokens: int = MIN_TOKENS) -> tuple[list[Pair], list[str], int]:
    """(pairs, students not compared and why, students compared); writes DIR's three files."""
    course = course or config.load()
    m = course.milestone(milestone)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise FileExistsError(f"{out} is not empty: pass --force to replace the report there, or choose another --out")
    staging = Path(tempfile.mkdtemp(prefix="similarity-"))
    try:
        texts, skipped = _texts(Path(submissions), m, staging / "s")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    pairs = compare(texts, boilerplate_texts(course, m), threshold, min_tokens)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "similarity.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["rank", "student_a", "student_b", "similarity", "share_a_in_b", "share_b_in_a", "shared_tokens"])
        for i, p in enumerate(pairs, 1):
            w.writerow([i, p.a, p.b, f"{p.similarity:.3f}", f"{p.share_a:.3f}", f"{p.share_b:.3f}", p.tokens])
    write_json(out / "similarity.json", {"milestone": m.id, "threshold": threshold, "students": len(texts),
                                         "not_compared": skipped,
                                         "pairs": [{"a": p.a, "b": p.b, "similarity": round(p.similarity, 4),
                                                    "share_a": round(p.share_a, 4), "share_b": round(p.share_b, 4),
                                                    "tokens": p.tokens} for p in pairs]})
    (out / "similarity.html").write_text(report_html(pairs, m, len(texts), threshold), encoding="utf-8",
                                         errors="replace")
    return pairs, skipped, len(texts)
