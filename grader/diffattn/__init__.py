"""The differential-attention exercise (Differential Transformer, ICLR 2025)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from grader.exercise import Exercise


def exercise() -> Exercise:
    """The exercise description the harness grades with."""
    from grader.diffattn import handout, toy

    return Exercise(
        name="diff_attention",
        functions=("differential_lambda", "differential_attention"),
        checks_dir=Path(__file__).with_name("checks"),
        tiers={"T1": "Contract", "T2": "Values", "T3": "Gradients"},
        default_submission="exercise/diff_attention.py",
        default_reference="reference/diff_attention.py",
        experiment=toy.experiment,
        experiment_frame=toy.shared_fields,
        prepare=_prepare,
        expect=_expect,
        handout=handout.files,
    )


def _expect(seed: int) -> None:
    """The oracle's truths for every case graded with ``seed``."""
    from grader.diffattn import suite, toy

    suite.prepare(seed)
    toy.prepare(seed)


def _prepare(seed: int, until: Callable[[], bool] | None = None) -> None:
    """What every submission graded with ``seed`` shares: the oracle's truths, then the misconceptions' predictions
    until ``until()`` is true (those left are made when a diagnosis needs them)."""
    from grader.diffattn import misconceptions

    _expect(seed)
    misconceptions.prepare(seed, until)
