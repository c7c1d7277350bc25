"""T2, the values: both functions against the scalar softmax oracle, and three properties."""

from __future__ import annotations

import numpy as np

from grader.compare import combine
from grader.diffattn import expected, suite
from grader.diffattn.expected import Truth
from grader.diffattn.suite import ATTENTION, LAMBDA
from grader.diffattn.verdicts import values_verdict
from grader.plugin import GradingContext, check


def _attention_values(grading: GradingContext, set_name: str, truth=expected.attention_output) -> None:
    verdicts = []
    for i, case in enumerate(getattr(suite, set_name)(grading.seed)):
        outcome = suite.attention_outcome(grading, set_name, i, case)
        verdicts.append(values_verdict(outcome, 0, f"{ATTENTION}({case.label()})", truth(case)))
    grading.conclude(combine(verdicts))


@check("T2", 6, "differential_lambda matches exp(q1·k1) - exp(q2·k2) + lambda_init")
def test_lambda_values(grading: GradingContext) -> None:
    verdicts = []
    for i, case in enumerate(suite.lambda_values(grading.seed)):
        outcome = suite.lambda_outcome(grading, "lambda_values", i, case)
        verdicts.append(values_verdict(outcome, 0, f"{LAMBDA}({case.label()})", expected.lambda_value(case)))
    grading.conclude(combine(verdicts))


@check("T2", 6, "Causal outputs match the scalar softmax oracle (incl. T=1 and the default causal=True)")
def test_causal_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_causal")


@check("T2", 5, "Outputs with causal=False match the oracle (no mask on either branch)")
def test_noncausal_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_noncausal")


@check("T2", 5, "Negative, zero, greater-than-one and tensor coefficients give the right outputs")
def test_coefficient_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_coefficients")


@check("T2", 5, "float32 inputs with scaled logits of 100 or more give finite, correct outputs")
def test_large_logit_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_large_logits")


@check("T2", 4, "Strided inputs give the same values as contiguous ones")
def test_strided_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_strided")


def _shared_offset(case) -> Truth:
    """Rows of the signed map sum to 1 - λ, so a value shared by all tokens comes out as (1 - λ)·value."""
    return Truth((1.0 - case.coefficient) * case.value, expected.attention_output(case).allowed)


@check("T2", 4, "Rows of the signed map sum to 1 - λ: a value shared by every token comes out scaled by 1 - λ")
def test_row_sums(grading: GradingContext) -> None:
    _attention_values(grading, "row_sums", _shared_offset)


def _branch_one_attention(case) -> Truth:
    """With λ = 0 the result is ordinary softmax attention of the first branch."""
    zero_second = expected.attention_output(case)
    return Truth(expected.oracle.attention_maps(case.q1, case.k1, case.is_causal) @ case.value, zero_second.allowed)


@check("T2", 3, "λ = 0 gives ordinary softmax attention")
def test_lambda_zero_is_attention(grading: GradingContext) -> None:
    _attention_values(grading, "lambda_zero", _branch_one_attention)


def _cancelled(case) -> Truth:
    """Identical maps with λ = 1 cancel exactly."""
    return Truth(np.zeros_like(case.value), expected.attention_output(case).allowed)


@check("T2", 2, "Identical maps cancel at λ = 1")
def test_identical_maps_cancel(grading: GradingContext) -> None:
    _attention_values(grading, "identical_maps", _cancelled)
