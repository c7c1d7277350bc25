"""From pytest-json-report's test records to checks, tier subtotals and a total.

Policy: a check earns all its points when it passed and none otherwise (failed,
error, skipped). Totals count the checks of the selected tiers only, so
``--tiers T1`` is graded out of T1's points. See docs/scoring.md.
"""

from __future__ import annotations

from typing import Any

STATUSES = ("passed", "failed", "error", "skipped")


def _message(test: dict[str, Any], metadata: dict[str, Any]) -> str:
    if metadata.get("internal_error"):
        return f"internal grader error in this check ({metadata['internal_error']}); please report it"
    if metadata.get("message"):
        return str(metadata["message"])
    for stage in ("call", "setup", "teardown"):
        longrepr = test.get(stage, {}).get("longrepr")
        if longrepr:
            text = str(longrepr)
            return text.split("Skipped: ", 1)[-1].rstrip(")'\"") if test.get("outcome") == "skipped" else text
    return ""


def check_record(test: dict[str, Any]) -> dict[str, Any]:
    """One check of the report from one pytest-json-report test record."""
    metadata = test.get("metadata") or {}
    status = test.get("outcome", "error")
    if metadata.get("internal_error") or status not in STATUSES:
        status = "error"
    points = float(metadata.get("points", 0.0))
    duration = sum(float(test.get(stage, {}).get("duration", 0.0)) for stage in ("setup", "call", "teardown"))
    return {
        "id": str(metadata.get("id", test.get("nodeid", "?"))),
        "title": str(metadata.get("title", "")),
        "tier": str(metadata.get("tier", "?")),
        "status": status,
        "score": points if status == "passed" else 0.0,
        "max_score": points,
        "message": _message(test, metadata),
        "duration_s": round(duration, 4),
        "worst_ratio": metadata.get("worst_ratio"),
        "visibility": str(metadata.get("visibility", "public")),
        "hint": metadata.get("hint"),
        "counterexample": metadata.get("counterexample"),
    }


def tally(checks: list[dict[str, Any]], tier_titles: dict[str, str]) -> tuple[list[dict[str, Any]], float, float]:
    """Group checks by tier (in the exercise's order) and add up the points that count."""
    tiers = []
    for name, title in tier_titles.items():
        members = [c for c in checks if c["tier"] == name]
        counted = [c for c in members if c["status"] != "skipped"]
        tiers.append(
            {
                "name": name,
                "title": title,
                "score": sum(c["score"] for c in counted),
                "max_score": sum(c["max_score"] for c in counted),
                "passed": sum(c["status"] == "passed" for c in members),
                "total": len(counted),
                "checks": members,
            }
        )
    return tiers, sum(t["score"] for t in tiers), sum(t["max_score"] for t in tiers)


def overall_status(checks: list[dict[str, Any]]) -> str:
    """"error" if any check errored, "passed" if every check that ran passed, else "failed"."""
    statuses = {c["status"] for c in checks}
    if "error" in statuses:
        return "error"
    return "failed" if "failed" in statuses else "passed"
