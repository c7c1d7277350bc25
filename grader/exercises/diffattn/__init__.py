"""The differential-attention exercise (Differential Transformer, ICLR 2025)."""

from __future__ import annotations

from pathlib import Path

from grader.core.exercise import Exercise, Preparation

HERE = Path(__file__).resolve().parent
SHARED = Preparation(__name__)  # the oracle's truths of suite and toy, then the misconceptions' predictions


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
        prepare=SHARED.prepare,
        expect=SHARED.expect,
        handout=handout.HANDOUT.files,
        warm_up=HERE / "warm_up.py",
        diagnose=diagnosis.diagnose,
    )

