"""The report as a Gradescope ``results.json`` (the autograder specification's output format).

One Gradescope test per check that ran. Checks of tiers left out with
``--tiers`` are skipped: they carry no points and are not listed (the summary
says the tier was not run), so the tests' ``max_score`` add up to the report's.
A public check is ``visible``; a hidden one is shown ``after_published``. The
document given here is already redacted for its audience; nothing is hidden
again. See docs/ci.md.
"""

from __future__ import annotations

import json
from typing import Any

from grader.reports import digest

VISIBILITY = {"public": "visible", "hidden": "after_published"}
# The whole result is visible at once (hidden checks keep their own setting);
# what run_autograder prints goes to instructors only.
RESULT_VISIBILITY = "visible"
STDOUT_VISIBILITY = "hidden"


def document(score: float, execution_time: float, output: str, tests: list[dict[str, Any]]) -> dict[str, Any]:
    """A results.json object with exactly the top-level keys diffgrade writes."""
    return {
        "score": score,
        "execution_time": execution_time,
        "output": output,
        "visibility": RESULT_VISIBILITY,
        "stdout_visibility": STDOUT_VISIBILITY,
        "tests": tests,
    }


def results(report: dict[str, Any]) -> dict[str, Any]:
    """The results.json object of a report document."""
    tests = [_test(number, check, digest.cause_of(report, check["id"])) for number, check in digest.checks(report) if check["status"] != "skipped"]
    return document(report["score"], report["duration_s"], _summary(report), tests)


def to_text(report: dict[str, Any]) -> str:
    """The results.json text of a report document."""
    return json.dumps(results(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _test(number: str, check: dict[str, Any], cause: str | None) -> dict[str, Any]:
    return {
        "name": digest.clean(check["title"]) or check["id"],
        "number": number,
        "score": check["score"],
        "max_score": check["max_score"],
        "status": "passed" if check["status"] == "passed" else "failed",
        "output": _check_output(check, cause),
        "tags": [tag for tag in (check["tier"], check["id"]) if tag],
        "visibility": VISIBILITY[check["visibility"]],
    }


def _check_output(check: dict[str, Any], cause: str | None) -> str:
    """The root cause that explains the check, its message, then its hint and counterexample in words when it has them."""
    return "\n\n".join([*([cause] if cause else []), digest.clean(check["message"]).strip() or digest.NO_MESSAGE, *digest.explanations(check)])


def _summary(report: dict[str, Any]) -> str:
    """The text shown above the tests: the root causes, points per tier, why loading failed, warnings, the seed."""
    lines = [f"diffgrade {report['grader_version']}: {digest.headline(report)}", ""]
    causes = digest.root_causes(report)
    if causes:
        lines += ["Root causes, to fix in this order:", *(f"{cause}\n" for cause in causes)]
    lines += [digest.tier_line(tier) for tier in report["tiers"]]
    if report["status"] == "error":
        lines += ["", "A check failed inside the grader itself, so this score may be too low: please tell your instructor."]
    load_error = report["submission"]["load_error"]
    if load_error:
        lines += ["", "Your submission could not be loaded, so every check failed:", digest.clean(load_error).strip()]
    warnings = report["worker"]["warnings"]
    if warnings:
        lines += ["", "Warnings:", *(f"- {digest.clean(warning).strip()}" for warning in warnings)]
    lines += ["", f"Seed {report['seed']} (diffgrade --seed {report['seed']} repeats these inputs)."]
    return "\n".join(lines)
