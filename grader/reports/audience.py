"""Who a report is for, and what of it they may see.

A report is built whole (``"audience": "instructor"``). For a student, every
check marked ``hidden`` (``@check(..., visibility="hidden")``) keeps its id,
title, tier, status, points, duration and visibility, but its message becomes
:data:`HIDDEN_MESSAGE` and its worst ratio, hint and counterexample become
null: those would tell the inputs and the expected values of the probe. The
policy and the list of hidden checks are in docs/scoring.md.

What the submission printed (the worker's captured stdout and stderr) is
withheld from a student whenever the report has hidden checks: a submission
can print the inputs its calls receive, and hidden checks' inputs would reach
the student that way. It is replaced by :data:`OUTPUT_WITHHELD`.

Root causes stay, also those of hidden checks, when they come from the
student's own code (an exception and its traceback, what a function returns)
or from the diagnosis's own probe inputs; a root cause found only through a
hidden check's inputs (``"visibility": "hidden"``) is left out, and the
checks it explained are listed as unexplained.
"""

from __future__ import annotations

from typing import Any

AUDIENCES = ("student", "instructor")
HIDDEN_MESSAGE = "hidden check: its inputs and expected values are shown to instructors only"
WITHHELD = ("worst_ratio", "hint", "counterexample")
OUTPUT_WITHHELD = "(withheld: what a submission prints can show the inputs of hidden checks; instructors see it)"


def for_audience(document: dict[str, Any], audience: str) -> dict[str, Any]:
    """A copy of the report ``document`` that ``audience`` may see, with ``"audience"`` set.

    ``document`` itself is left unchanged (the copy shares the parts it does
    not change); it must be a whole report (as :func:`grader.reports.report.build`
    makes it), not one already redacted.
    """
    if audience not in AUDIENCES:
        raise ValueError(f"'audience' must be one of {AUDIENCES} (got {audience!r})")
    if document.get("audience") != "instructor":
        raise ValueError(f"only a whole report can be shown to an audience (got one for {document.get('audience')!r})")
    tiers = [{**tier, "checks": [dict(check) for check in tier["checks"]]} for tier in document["tiers"]]
    shown = {**document, "tiers": tiers, "audience": audience}
    if audience == "student":
        hidden = [check for tier in shown["tiers"] for check in tier["checks"] if check["visibility"] == "hidden"]
        for check in hidden:
            check["message"] = HIDDEN_MESSAGE
            check.update(dict.fromkeys(WITHHELD))
        worker = document.get("worker", {})
        if hidden and (worker.get("stdout") or worker.get("stderr")):
            shown["worker"] = {**worker, **{name: OUTPUT_WITHHELD for name in ("stdout", "stderr") if worker.get(name)}}
        diagnosis = document["diagnosis"]
        withheld = [cause for cause in diagnosis["root_causes"] if cause["visibility"] == "hidden"]
        shown["diagnosis"] = {
            **diagnosis,
            "root_causes": [cause for cause in diagnosis["root_causes"] if cause["visibility"] == "public"],
            "unexplained": diagnosis["unexplained"] + [check for cause in withheld for check in cause["checks"]],
        }
    return shown
