"""A one-function exercise for the harness's own tests: a numerically stable softmax."""

from __future__ import annotations

from pathlib import Path

from grader.core.exercise import Exercise

HERE = Path(__file__).resolve().parent


def exercise() -> Exercise:
    """The stable-softmax exercise: contract (T1) and values (T2)."""
    return Exercise(
        name="stable_softmax",
        title="A numerically stable softmax (the harness's test exercise)",
        version="1.0",
        functions=("stable_softmax",),
        checks_dir=HERE / "checks",
        tiers={"T1": "Contract", "T2": "Values"},
        default_submission="tests/exercises/softmax_exercise/stub.py",
        statement="tests/exercises/README.md",
        default_reference="tests/exercises/softmax_exercise/reference.py",
    )
