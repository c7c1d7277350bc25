"""The class summary of a batch: statistics, chart geometry, summary.json and summary.html.

Only arithmetic on the students' records (see :func:`grader.commands.batch.record_of`):
the score histogram, each check's failure rate among the students graded, and
the students' table. The template writes the SVG elements, so every text that
reaches the page goes through Jinja's escaping. Each row's student name and
message pass :mod:`grader.toolkit.safetext` again (a record may come from an earlier
run's report), so that summary.json and summary.html stay one line per name
and bounded.
"""

from __future__ import annotations

import statistics
from typing import Any

from grader import __version__
from grader.reports import report, svgchart
from grader.toolkit import safetext

BINS = 10
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 52
ROW = 26  # height of one failure-rate bar row
LABEL_WIDTH = 300  # room for "T1 attention_returns_one_tensor" at the 14-unit font


def histogram(scores: list[float], max_score: float, bins: int = BINS) -> list[dict[str, Any]]:
    """Counts of scores in ``bins`` equal ranges of [0, max_score]; the last range includes max_score."""
    width = max_score / bins if max_score > 0 else 1.0
    counts = [0] * bins
    for score in scores:
        counts[min(bins - 1, max(0, int(score / width)))] += 1
    return [{"from": round(i * width, 6), "to": round((i + 1) * width, 6), "count": c} for i, c in enumerate(counts)]


def failure_rates(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each check (in grading order): how many graded students failed it, of how many it ran for."""
    rows: dict[str, dict[str, Any]] = {}
    for record in records:
        for check in record["checks"]:
            row = rows.setdefault(check["id"], {"id": check["id"], "title": check["title"], "tier": check["tier"], "failed": 0, "graded": 0})
            if check["status"] != "skipped":
                row["graded"] += 1
                row["failed"] += check["status"] != "passed"
    for row in rows.values():
        row["rate"] = row["failed"] / row["graded"] if row["graded"] else 0.0
    return list(rows.values())


def summarize(
    records: list[dict[str, Any]], *, exercise: str, seed: int, tiers: list[str], interrupted: bool,
    started_at: str, duration_s: float, graded: int, reused: int,
) -> dict[str, Any]:  # fmt: skip
    """summary.json: the class's statistics and one row per student."""
    scored = [r for r in records if r["max_score"] is not None]
    scores = [float(r["score"]) for r in scored]
    max_score = max((float(r["max_score"]) for r in scored), default=0.0)
    statuses: dict[str, int] = {}
    for record in records:
        statuses[record["status"]] = statuses.get(record["status"], 0) + 1
    return {
        "exercise": exercise,
        "grader_version": __version__,
        "seed": seed,
        "tiers_selected": tiers,
        "students": len(records),
        "complete": not interrupted,
        "graded_now": graded,
        "reused": reused,
        "statuses": statuses,
        "max_score": max_score,
        "score": {
            "mean": statistics.fmean(scores) if scores else None,
            "median": statistics.median(scores) if scores else None,
            "min": min(scores, default=None),
            "max": max(scores, default=None),
        },
        "histogram": histogram(scores, max_score),
        "checks": failure_rates(records),
        "table": [_row(r) for r in records],
        "started_at": started_at,
        "duration_s": duration_s,
    }


def _row(record: dict[str, Any]) -> dict[str, Any]:
    """One student's row of the summary table, the name and the message made safe."""
    row = {k: record[k] for k in ("student", "score", "max_score", "status", "message", "report", "duration_s")} | {"tiers": record["tiers"]}
    row["student"] = safetext.line(str(row["student"]))
    row["message"] = None if row["message"] is None else safetext.text(str(row["message"]))
    return row


def histogram_chart(summary: dict[str, Any]) -> dict[str, Any]:
    """Bar geometry of the score histogram in a WIDTH×HEIGHT viewbox."""
    bins = summary["histogram"]
    highest = max((b["count"] for b in bins), default=0)
    ticks = [t for t in svgchart.nice_ticks(0, max(highest, 1), 4) if t == int(t)]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = ticks[-1] or 1
    slot = plot_w / max(len(bins), 1)
    bars = []
    for i, b in enumerate(bins):
        height = plot_h * b["count"] / top
        bars.append({
            "x": round(LEFT + i * slot + 2, 2), "width": round(slot - 4, 2),
            "y": round(TOP + plot_h - height, 2), "height": round(height, 2), "count": b["count"],
            "label": f"{svgchart.format_number(b['from'], 0)}–{svgchart.format_number(b['to'], 0)}",
            "label_x": round(LEFT + (i + 0.5) * slot, 2),
        })  # fmt: skip
    grid = [{"y": round(TOP + plot_h - plot_h * t / top, 2), "label": f"{int(t)}"} for t in ticks]
    return {"width": WIDTH, "height": HEIGHT, "left": LEFT, "right": WIDTH - RIGHT, "bottom": TOP + plot_h, "bars": bars, "grid": grid}


def failure_chart(summary: dict[str, Any]) -> dict[str, Any]:
    """Horizontal bar geometry of each check's failure rate."""
    span = WIDTH - LABEL_WIDTH - 50
    rows = []
    for i, check in enumerate(summary["checks"]):
        rows.append({
            **check, "y": TOP + i * ROW, "bar_width": round(span * check["rate"], 2),
            "percent": f"{100 * check['rate']:.0f}%", "text_y": TOP + i * ROW + ROW * 0.65,
        })  # fmt: skip
    return {"width": WIDTH, "height": TOP * 2 + ROW * len(rows), "label_width": LABEL_WIDTH, "span": span, "row": ROW - 6, "rows": rows}


def render_html(summary: dict[str, Any]) -> str:
    """summary.html: histogram, failure rates and the students' table, self-contained."""
    template = report.environment(html=True).get_template("summary.html.j2")
    return template.render(summary=summary, histogram=histogram_chart(summary), failures=failure_chart(summary))
