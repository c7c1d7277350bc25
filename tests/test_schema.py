"""The report schema validator rejects what the contract forbids."""

from __future__ import annotations

import copy

from conftest import Graded

from grader.reports.schema import validate


def test_validator_flags_missing_wrong_and_extra_fields(reference_runs: dict[int, Graded]) -> None:
    """Removing a key, a wrong type, an unknown status and an extra key are all reported."""
    report = copy.deepcopy(reference_runs[11].report)
    del report["seed"]
    report["score"] = "100"
    report["tiers"][0]["checks"][0]["status"] = "ok"
    report["surprise"] = 1
    problems = validate(report)
    assert "$: missing required key 'seed'" in problems
    assert any(p.startswith("$.score: must be number") for p in problems)
    assert "$.tiers[0].checks[0].status: must be one of ['passed', 'failed', 'error', 'skipped'] (got 'ok')" in problems
    assert "$: unexpected key 'surprise'" in problems


def test_booleans_are_not_numbers() -> None:
    """JSON true is not accepted where a number is required."""
    assert validate(True, {"type": "number"}) == ["$: must be number (got bool True)"]


def test_validator_applies_the_experiment_rules(reference_runs: dict[int, Graded]) -> None:
    """A series with a value too many, a repeated panel id and an unknown role are all reported."""
    report = copy.deepcopy(reference_runs[11].report)
    panels = report["experiment"]["panels"]
    panels[0]["series"][0]["values"].append(0.0)
    panels[1]["id"] = panels[0]["id"]
    panels[2]["series"][0]["role"] = "guess"
    problems = validate(report)
    assert "$.experiment.panels[0].series[0].values: 12 values for 11 x values" in problems
    assert "$.experiment.panels[1].id: 'offset_response' names an earlier panel too" in problems
    assert any(p.startswith("$.experiment.panels[2].series[0].role: must be one of") for p in problems)
    assert len(problems) == 3
