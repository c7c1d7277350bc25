"""The differential-attention exercise (Differential Transformer, ICLR 2025)."""

from __future__ import annotations

from pathlib import Path

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
        experiment_frame=toy.shared_fields,
        prepare=_prepare,
        expect=_expect,
        handout=handout.files,
        warm_up=HERE / "warm_up.py",
        diagnose=diagnosis.diagnose,
    )


def _expect(seed: int) -> None:
    """The oracle's truths for every case graded with ``seed``."""
    from grader.exercises.diffattn import suite, toy

    suite.prepare(seed)
    toy.prepare(seed)


def _prepare(seed: int) -> None:
    """What every submission graded with ``seed`` shares: the oracle's truths and the misconceptions' predictions."""
    from grader.exercises.diffattn import misconceptions

    _expect(seed)
    misconceptions.prepare(seed)
