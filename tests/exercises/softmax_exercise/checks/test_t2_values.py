"""T2, the values: against the plain-Python oracle, for ordinary and for huge logits."""

from __future__ import annotations

from grader.core.plugin import GradingContext, check
from softmax_exercise.cases import outcomes, values_verdict


@check("T2", 40, "Matches the softmax oracle along either axis (logits up to 10)")
def test_values(grading: GradingContext) -> None:
    grading.conclude(values_verdict(outcomes(grading, "values", 10.0)))


@check("T2", 40, "Stays finite and correct for logits up to 1000", visibility="hidden")
def test_large_logits(grading: GradingContext) -> None:
    grading.conclude(values_verdict(outcomes(grading, "large_logits", 1000.0)))
