"""The DIFF V2 exercise (Differential Transformer V2): grouped-query attention and the gated difference of paired heads."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from grader.core.exercise import Exercise

HERE = Path(__file__).resolve().parent


def exercise() -> Exercise:
    """The exercise description the harness grades with."""
    from grader.exercises.diffv2 import diagnosis, handout, toy

    return Exercise(
        name="diff_v2",
        title="DIFF V2 attention (Differential Transformer V2: grouped-query attention, per-token sigmoid gate)",
        version="1.0",
        functions=("gqa_attention", "diff_v2_attention"),
        checks_dir=HERE / "checks",
        tiers={"T1": "Contract", "T2": "Values", "T3": "Gradients"},
        default_submission="exercise/diff_v2_attention.py",
        statement="exercise/diff_v2_attention.md",
        default_reference="reference/diff_v2_attention.py",
        experiment=toy.experiment,
        experiment_frame=toy.frame,
        prepare=_prepare,
        expect=_expect,
        handout=handout.files,
        warm_up=HERE / "warm_up.py",
        diagnose=diagnosis.diagnose,
    )


def _expect(seed: int) -> None:
    """The oracle's truths for every case graded with ``seed``."""
    from grader.exercises.diffv2 import suite, toy

    suite.prepare(seed)
    toy.prepare(seed)


def _prepare(seed: int, until: Callable[[], bool] | None = None) -> None:
    """What every submission graded with ``seed`` shares: the oracle's truths, then the misconceptions' predictions
    until ``until()`` is true (those left are made when a diagnosis needs them)."""
    from grader.exercises.diffv2 import misconceptions

    _expect(seed)
    misconceptions.prepare(seed, until)
