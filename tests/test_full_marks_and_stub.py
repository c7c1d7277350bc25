"""The reference earns full marks on every seed; the untouched stub earns nothing."""

from __future__ import annotations

import math
from typing import Any

import pytest
from conftest import Graded

from grader.reports.schema import validate


def test_reference_gets_full_marks_on_several_seeds(reference_runs: dict[int, Graded]) -> None:
    """100/100, exit 0 and status passed for seeds 11, 22 and 33."""
    for seed, run in reference_runs.items():
        assert run.code == 0, (seed, run.stderr, run.stdout)
        assert run.report["score"] == run.report["max_score"] == 100.0
        assert run.report["seed"] == seed
        assert run.report["status"] == "passed"
        assert run.report["diagnosis"] == {"root_causes": [], "unexplained": [], "probes": [], "maps": [], "duration_s": 0.0}


def test_reference_reports_validate_against_the_schema(reference_runs: dict[int, Graded]) -> None:
    """Every report of the reference satisfies the documented schema."""
    for run in reference_runs.values():
        assert validate(run.report) == []


def test_reference_reports_the_time_its_own_code_took(reference_runs: dict[int, Graded]) -> None:
    """The worker counts the reference's own CPU time: more than nothing, less than the whole run."""
    for run in reference_runs.values():
        assert 0 < run.report["worker"]["submission_cpu_s"] < run.report["duration_s"]


def panels(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The experiment's panels by id, each with its series by role."""
    return {panel["id"]: {**panel, "by_role": {s["role"]: s for s in panel["series"]}} for panel in report["experiment"]["panels"]}


def test_reference_toy_curves_follow_one_minus_lambda(reference_runs: dict[int, Graded]) -> None:
    """Both the preview and the graded curve equal 1 - λ at all 11 points."""
    offset = panels(reference_runs[33].report)["offset_response"]
    lambdas = offset["x"]["values"]
    assert len(lambdas) == 11
    by_role = offset["by_role"]
    assert by_role["expected"]["values"] == [1 - lam for lam in lambdas]
    for role in ("preview", "submission"):
        assert all(abs(got - (1 - lam)) < 1e-9 for got, lam in zip(by_role[role]["values"], lambdas))
    assert by_role["preview"]["label"] == "Reference preview" and by_role["preview"]["note"] is None
    assert panels(reference_runs[33].report)["signal_retained"]["by_role"]["submission"]["values"][0] == 1.0


def test_reference_honesty_curves_match_their_truths(reference_runs: dict[int, Graded]) -> None:
    """Independent noise grows like √(1 + λ²), the negative share is the oracle's, the rows sum to 1 - λ (λ from -1 to 2)."""
    found = panels(reference_runs[33].report)
    noise = found["independent_noise"]
    assert [s["role"] for s in noise["series"]] == ["expected", "context", "preview", "submission"]
    assert noise["by_role"]["expected"]["values"] == [math.sqrt(1 + lam * lam) for lam in noise["x"]["values"]]
    negative, sums = found["negative_entries"], found["row_sums"]
    assert negative["x"]["values"][0] == -1.0 and negative["x"]["values"][-1] == 2.0 and len(negative["x"]["values"]) == 13
    for role in ("preview", "submission"):
        assert noise["by_role"][role]["values"] == pytest.approx(noise["by_role"]["expected"]["values"], abs=1e-12)
        assert negative["by_role"][role]["values"] == negative["by_role"]["expected"]["values"]
        assert sums["by_role"][role]["values"] == pytest.approx([1 - lam for lam in sums["x"]["values"]], abs=1e-12)
        assert sums["by_role"][role]["note"].startswith("Each point is the mean of the 4 row sums")
    shares = negative["by_role"]["expected"]["values"]
    assert shares[:5] == [0.0] * 5 and max(shares) > 0  # none for λ ≤ 0, some beyond


def test_stub_experiment_says_why_it_has_no_curves(stub_run: Graded) -> None:
    """The stub's probes are made and fail: each honesty panel's note names the first reason."""
    found = panels(stub_run.report)
    for panel in ("independent_noise", "negative_entries", "row_sums"):
        submission = found[panel]["by_role"]["submission"]
        assert all(value is None for value in submission["values"])
        assert "calls gave no usable output; the first: differential_attention is not implemented yet" in submission["note"]


def test_stub_scores_zero_with_not_implemented_messages(stub_run: Graded) -> None:
    """Graded from the repository root with no argument: 0 points, exit 1, every check says so."""
    assert stub_run.code == 1, stub_run.stderr
    assert stub_run.report["submission"]["path"] == "exercise/diff_attention.py"
    assert stub_run.report["score"] == 0.0 and stub_run.report["max_score"] == 100.0
    checks = [c for t in stub_run.report["tiers"] for c in t["checks"]]
    assert len(checks) == 28
    for check in checks:
        assert check["status"] == "failed"
        assert "is not implemented yet" in check["message"].splitlines()[0], check
    assert "not implemented yet" in stub_run.stdout
    causes = stub_run.report["diagnosis"]["root_causes"]
    assert [(c["function"], c["component"], c["title"]) for c in causes] == [
        (name, "load", f"{name} is not implemented yet") for name in ("differential_lambda", "differential_attention")
    ]
    assert sorted(check for cause in causes for check in cause["checks"]) == sorted(c["id"] for c in checks)
