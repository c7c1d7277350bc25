"""The reference earns full marks on every seed; the untouched stub earns nothing."""

from __future__ import annotations

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


def test_reference_toy_curves_follow_one_minus_lambda(reference_runs: dict[int, Graded]) -> None:
    """Both the preview and the graded curve equal 1 - λ at all 11 points."""
    toy = reference_runs[33].report["toy_experiment"]
    assert len(toy["lambdas"]) == 11
    for curve in (toy["preview"]["offset_response"], toy["submission"]["offset_response"]):
        assert all(abs(got - (1 - lam)) < 1e-9 for got, lam in zip(curve, toy["lambdas"]))
    assert toy["preview"]["source"] == "reference"
    assert toy["submission"]["signal_retained"][0] == 1.0


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
