"""The DIFF V2 exercise (Differential Transformer V2): grouped-query attention and the gated difference of paired heads."""

from __future__ import annotations

from pathlib import Path

from grader.core.exercise import Exercise, Preparation

HERE = Path(__file__).resolve().parent
SHARED = Preparation(__name__)  # the oracle's truths of suite and toy, then the misconceptions' predictions


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
        prepare=SHARED.prepare,
        expect=SHARED.expect,
        handout=handout.files,
        warm_up=HERE / "warm_up.py",
        diagnose=diagnosis.diagnose,
    )

