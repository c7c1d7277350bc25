"""T2, the values: both functions against the scalar softmax oracle, and three properties."""

from __future__ import annotations

from grader.compare import combine
from grader.diffattn import counterexample, expected, misconceptions, suite
from grader.diffattn.suite import ATTENTION, LAMBDA
from grader.diffattn.verdicts import values_verdict
from grader.plugin import GradingContext, check


def _attention_values(grading: GradingContext, set_name: str, truth=expected.attention_output) -> None:
    verdicts = []
    for i, case in enumerate(getattr(suite, set_name)(grading.seed)):
        outcome = suite.attention_outcome(grading, set_name, i, case)
        verdicts.append(values_verdict(outcome, 0, f"{ATTENTION}({case.label()})", truth(case)))
    verdict = combine(verdicts)
    misconceptions.attach_hint(grading, verdict, set_name)
    counterexample.explain_values(grading, set_name, verdicts, truth)
    grading.conclude(verdict)


@check("T2", 6, "differential_lambda matches exp(q1·k1) - exp(q2·k2) + lambda_init")
def test_lambda_values(grading: GradingContext) -> None:
    verdicts = []
    for i, case in enumerate(suite.lambda_values(grading.seed)):
        outcome = suite.lambda_outcome(grading, "lambda_values", i, case)
        verdicts.append(values_verdict(outcome, 0, f"{LAMBDA}({case.label()})", expected.lambda_value(case)))
    verdict = combine(verdicts)
    misconceptions.attach_hint(grading, verdict, "lambda_values")
    counterexample.explain_lambda(grading, verdicts)
    grading.conclude(verdict)


@check("T2", 6, "Causal outputs match the scalar softmax oracle (incl. T=1 and the default causal=True)")
def test_causal_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_causal")


@check("T2", 5, "Outputs with causal=False match the oracle (no mask on either branch)")
def test_noncausal_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_noncausal")


@check("T2", 5, "Negative, zero, greater-than-one and tensor coefficients give the right outputs")
def test_coefficient_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_coefficients")


@check("T2", 5, "float32 inputs with scaled logits of 100 or more give finite, correct outputs", visibility="hidden")
def test_large_logit_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_large_logits")


@check("T2", 4, "Strided inputs give the same values as contiguous ones", visibility="hidden")
def test_strided_values(grading: GradingContext) -> None:
    _attention_values(grading, "attention_strided")


@check("T2", 4, "Rows of the signed map sum to 1 - λ: a value shared by every token comes out scaled by 1 - λ")
def test_row_sums(grading: GradingContext) -> None:
    _attention_values(grading, "row_sums", expected.shared_offset_output)


@check("T2", 3, "λ = 0 gives ordinary softmax attention")
def test_lambda_zero_is_attention(grading: GradingContext) -> None:
    _attention_values(grading, "lambda_zero", expected.branch_one_output)


@check("T2", 2, "Identical maps cancel at λ = 1")
def test_identical_maps_cancel(grading: GradingContext) -> None:
    _attention_values(grading, "identical_maps", expected.cancelled_output)
