"""class.html: the class at a glance, per milestone: the score distribution (after late penalties),
the flags, the checks the class fails most (from grade-class's summary.json), then every student.

One self-contained file (no network: inline SVG, CSS and a few lines of script that sort the
table). Every text from students (names, flags) is escaped; the script reads only the page's own
table. For instructors: it lists every student's grades.
"""
from __future__ import annotations

import html
import statistics
from pathlib import Path

from autograder import config
from autograder.grading.report import clean

BAR_W, BAR_H = 34, 120

SORT_SCRIPT = """
document.querySelectorAll("table.students th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var asc = th.dataset.dir !== "asc";
    th.dataset.dir = asc ? "asc" : "desc";
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v || a.cells[col].textContent, y = b.cells[col].dataset.v || b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
document.body.dataset.ready = "yes";
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
section.milestone { border-top: 1px solid #ccc; padding-top: 1em; margin-top: 1em; }
.charts { display: flex; gap: 3em; flex-wrap: wrap; }
table.students { border-collapse: collapse; margin-top: 1em; }
table.students th, table.students td { border: 1px solid #ddd; padding: 2px 8px; text-align: right; }
table.students th { cursor: pointer; background: #f4f4f4; }
table.students td.name, table.students td.flags { text-align: left; }
td.flags { color: #a33; font-size: 90%; }
.fail-bar { fill: #d9534f; } .dist-bar { fill: #4a7bd0; }
"""


def _e(text) -> str:
    return html.escape(clean(str(text), one_line=True), quote=True)


def distribution_svg(totals: list[float], top: float, label: str) -> str:
    buckets = [0] * 10
    for t in totals:
        buckets[min(int(t / top * 10), 9) if top else 0] += 1
    most = max(buckets) or 1
    bars = []
    for i, n in enumerate(buckets):
        h = round(BAR_H * n / most)
        x = i * (BAR_W + 4)
        bars.append(f'<rect class="dist-bar" x="{x}" y="{BAR_H - h + 14}" width="{BAR_W}" height="{h}">'
                    f'<title>{i * 10}-{i * 10 + 10}%: {n} student(s)</title></rect>'
                    f'<text x="{x + BAR_W / 2}" y="{BAR_H + 10 - h}" font-size="11" text-anchor="middle">{n or ""}</text>'
                    f'<text x="{x + BAR_W / 2}" y="{BAR_H + 28}" font-size="10" text-anchor="middle">{i * 10}%</text>')
    width = 10 * (BAR_W + 4)
    return (f'<svg class="distribution" role="img" aria-label="{_e(label)}" width="{width}" height="{BAR_H + 34}" '
            f'viewBox="0 0 {width} {BAR_H + 34}">{"".join(bars)}</svg>')


def failures_svg(most_failed: list[dict], limit: int = 6) -> str:
    items = most_failed[:limit]
    if not items:
        return "<p>Nobody who attempted it failed a check.</p>"
    rows = []
    for i, f in enumerate(items):
        w = round(260 * float(f.get("share", 0)))
        y = i * 22
        rows.append(f'<text x="0" y="{y + 14}" font-size="12">{_e(f["check"])}</text>'
                    f'<rect class="fail-bar" x="120" y="{y + 3}" width="{w}" height="14">'
                    f'<title>{_e(f.get("example", ""))}</title></rect>'
                    f'<text x="{126 + w}" y="{y + 14}" font-size="11">{_e(f["failed"])} ({float(f.get("share", 0)):.0%})</text>')
    return (f'<svg class="failures" width="460" height="{len(items) * 22 + 4}">{"".join(rows)}</svg>')


def _flag_counts(gb, mid: str) -> dict[str, int]:
    counts = {"late": 0, "not attempted": 0, "integrity": 0, "no submission": 0}
    for s in gb.students:
        for f in gb.cell(s, mid).flags:
            for k in counts:
                if f.startswith(k):
                    counts[k] += 1
    return counts


def render(gb, course: config.Course) -> str:
    parts = [f"<h1>{_e(course.title)}: the class at a glance</h1>",
             f"<p>{len(gb.students)} students, {len(gb.milestones)} milestone(s). Late policy: "
             f"{_e(course.late.describe())}. Totals are after late penalties. For instructors only.</p>"]
    for m in gb.milestones:
        totals = [gb.cell(s, m.id).total for s in gb.students]
        top = gb.max_score(m)
        summary = gb.summaries.get(m.id, {})
        counts = _flag_counts(gb, m.id)
        due = f", due {_e(m.due.isoformat(timespec='minutes'))}" if m.due else ""
        parts.append(
            f'<section class="milestone" id="{_e(m.id)}"><h2>{_e(m.id)}: {_e(m.title)}{due}</h2>'
            f"<p>Out of {top}{' (with written answers)' if m.id in gb.written_graded else ''}: mean "
            f"{statistics.mean(totals) if totals else 0:.2f}, median {statistics.median(totals) if totals else 0:g}. "
            + ", ".join(f'<span class="flag-count" data-flag="{_e(k)}">{_e(k)}: {v}</span>' for k, v in counts.items())
            + '</p><div class="charts"><div><h3>Score distribution</h3>'
            + distribution_svg(totals, top, f"{m.id} score distribution")
            + "</div><div><h3>Checks the class fails most</h3>"
            + (failures_svg(summary.get("most_failed", [])) if summary else "<p>(no grade-class run given)</p>")
            + "</div></div></section>")
    head = "".join(f"<th>{_e(m.id)}</th>" for m in gb.milestones)
    body = []
    for s in gb.students:
        cells = "".join(f'<td data-v="{gb.cell(s, m.id).total:g}">{gb.cell(s, m.id).total:g}</td>' for m in gb.milestones)
        body.append(f'<tr><td class="name">{_e(s)}</td>{cells}<td>{gb.total(s):g}</td>'
                    f'<td class="flags">{_e("; ".join(gb.flags(s)))}</td></tr>')
    parts.append(f'<h2>Students</h2><table class="students"><thead><tr><th>student</th>{head}<th>total '
                 f'/ {gb.max_total}</th><th>flags</th></tr></thead><tbody>{"".join(body)}</tbody></table>')
    csp = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            f"<title>{_e(course.title)}: gradebook</title><style>{STYLE}</style></head><body>"
            + "".join(parts) + f"<script>{SORT_SCRIPT}</script></body></html>\n")


def write(gb, course: config.Course, path: Path) -> Path:
    Path(path).write_text(render(gb, course), encoding="utf-8", errors="replace")
    return Path(path)
