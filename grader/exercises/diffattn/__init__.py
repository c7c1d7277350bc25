"""The differential-attention exercise (Differential Transformer, ICLR 2025)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from grader.core.exercise import Exercise

HERE = Path(__file__).resolve().parent


def exercise() -> Exercise:
    """The exercise description the harness grades with."""
    from grader.exercises.diffattn import diagnosis, handout, toy

    return Exercise(
        name="diff_attention",
        title="Differential attention (Differential Transformer, ICLR 2025)",
        version="1.0",
        functions=("differential_lambda", "differential_attention"),
        checks_dir=HERE / "checks",
        tiers={"T1": "Contract", "T2": "Values", "T3": "Gradients"},
        default_submission="exercise/diff_attention.py",
        statement="exercise/README.md",
        default_reference="reference/diff_attention.py",
        experiment=toy.experiment,
        experiment_frame=toy.frame,
        prepare=_prepare,
        expect=_expect,
        handout=handout.HANDOUT.files,
        warm_up=HERE / "warm_up.py",
        diagnose=diagnosis.diagnose,
    )


def _expect(seed: int) -> None:
    """The oracle's truths for every case graded with ``seed``."""
    from grader.exercises.diffattn import suite, toy

    suite.prepare(seed)
    toy.prepare(seed)


def _prepare(seed: int, until: Callable[[], bool] | None = None) -> None:
    """What every submission graded with ``seed`` shares: the oracle's truths, then the misconceptions' predictions
    until ``until()`` is true (those left are made when a diagnosis needs them)."""
    from grader.exercises.diffattn import misconceptions

    _expect(seed)
    misconceptions.CATALOGUE.prepare(seed, until)
