"""The report as a short Markdown summary, e.g. for a CI job's step summary.

A heading with the score, the root causes, a table of the tiers, and a table of the checks
that did not pass with the first line of each message; then why the
submission did not load and the worker's warnings, if any. Text from the
report that appears inline (table cells, the submission's path) is put on one
line and every character with an inline meaning in GitHub-flavoured Markdown
(code, emphasis, links, HTML, entities, table pipes, strikethrough, maths)
gets a backslash, which CommonMark allows before any ASCII punctuation and
GitHub's tables honour for pipes. Multi-line text goes into a fenced block
longer than any backtick run in it. So no message can break a table or
inject markup.
"""

from __future__ import annotations

import re
from typing import Any

from grader.reports import digest

CELL_LIMIT = 300  # characters of a message shown in a table cell
_INLINE = re.compile(r"([\\`*_\[\]<>|~&$!])")


def summary(report: dict[str, Any]) -> str:
    """The Markdown summary of a report document."""
    submission = report["submission"]
    blocks = [
        f"## diffgrade: {digest.headline(report)}",
        f"Submission {escape(submission['path'])}, seed {report['seed']}, "
        f"graded by diffgrade {escape(report['grader_version'])} in {report['duration_s']:.1f} s.",
        *_root_causes(report),
        _tier_table(report["tiers"]),
        _failures(report),
    ]
    if submission["load_error"]:
        blocks.append("The submission could not be loaded, so every check failed:\n\n" + fenced(submission["load_error"]))
    if report["worker"]["warnings"]:
        blocks.append("Warnings:\n\n" + fenced("\n".join(digest.clean(w).strip() for w in report["worker"]["warnings"])))
    return "\n\n".join(blocks) + "\n"


def escape(text: object) -> str:
    """``text`` on one line, with every character that means something inline backslash-escaped."""
    return _INLINE.sub(r"\\\1", " ".join(digest.clean(text).split()))


def cell(text: object, limit: int = CELL_LIMIT) -> str:
    """``text`` as the content of one table cell: one line, at most ``limit`` characters, escaped."""
    flat = " ".join(digest.clean(text).split())
    return escape(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def fenced(text: object) -> str:
    """``text`` as a fenced code block whose fence is longer than any backtick run inside it."""
    body = digest.clean(text).strip("\n")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def _table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def _tier_table(tiers: list[dict[str, Any]]) -> str:
    rows = []
    for tier in tiers:
        ran = digest.tier_ran(tier)
        score = f"{digest.points(tier['score'])}/{digest.points(tier['max_score'])}" if ran else "not run"
        passed = f"{tier['passed']}/{tier['total']}" if ran else "–"
        rows.append([escape(f"{tier['name']} {tier['title']}"), score, passed])
    return _table(["Tier", "Points", "Checks passed"], ["---", "---:", "---:"], rows)


def _root_causes(report: dict[str, Any]) -> list[str]:
    """The numbered root causes, each on one escaped line, or nothing when there are none."""
    causes = (report.get("diagnosis") or {}).get("root_causes") or []
    if not causes:
        return []
    items = [
        f"{number}. **{escape(cause['title'])}** ({escape(cause['function'] or 'the file')} / {escape(cause['component'])}): "
        f"{escape(cause['evidence'])} Fix: {escape(cause['advice'])}" + (f" Explains: {escape(', '.join(cause['checks']))}." if cause["checks"] else "")
        for number, cause in enumerate(causes, start=1)
    ]
    return ["### Root causes, to fix in this order\n\n" + "\n".join(items)]


def _failures(report: dict[str, Any]) -> str:
    """The table of checks that failed or errored, or one sentence when there are none."""
    wanting = [check for _, check in digest.checks(report) if check["status"] in ("failed", "error")]
    if not wanting:
        ran = sum(check["status"] == "passed" for _, check in digest.checks(report))
        return f"All {ran} checks that ran passed."
    rows = [
        [
            escape(check["id"]),
            escape(check["tier"]),
            check["status"],
            f"{digest.points(check['score'])}/{digest.points(check['max_score'])}",
            cell(digest.first_line(check["message"])),
        ]
        for check in wanting
    ]
    title = f"### Checks that did not pass ({len(wanting)})"
    return title + "\n\n" + _table(["Check", "Tier", "Status", "Points", "Message (first line)"], ["---", "---", "---", "---:", "---"], rows)
