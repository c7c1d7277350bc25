"""T2, the values: both functions against the scalar softmax oracle, and three properties."""

from __future__ import annotations

from typing import Sequence

from grader.core.plugin import GradingContext, check
from grader.exercises.diffattn import counterexample, expected, misconceptions, suite
from grader.exercises.diffattn.cases import AttentionCase
from grader.exercises.diffattn.declared import LAMBDA_VALUE_CALLS, attention, of_both, of_lambda
from grader.exercises.diffattn.suite import ATTENTION
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison, combine, compare
from grader.toolkit.handout import Recipe
from grader.toolkit.verdicts import tensor_result, values_verdict


def _attention_values(grading: GradingContext, case_set: CaseSet[AttentionCase], truth=expected.attention_output,
                      also: Sequence[Comparison] = ()) -> None:  # fmt: skip
    """Judge ``case_set``'s outputs against ``truth`` (and the verdicts ``also``), with its hint and counterexample."""
    verdicts = suite.value_verdicts(grading, case_set, truth)
    verdict = combine(verdicts + list(also))
    misconceptions.CATALOGUE.attach_hint(grading, verdict, case_set)
    counterexample.SHRINKER.values(grading, case_set, verdicts, truth)
    grading.conclude(verdict)


@check("T2", 5, "differential_lambda matches exp(q1·k1) - exp(q2·k2) + lambda_init (exponents up to the dtype's finite limit)",
       judges=of_lambda("values"), replay=Recipe("values", LAMBDA_VALUE_CALLS))  # fmt: skip
def test_lambda_values(grading: GradingContext) -> None:
    verdicts = suite.value_verdicts(grading, suite.lambda_values)
    limits = suite.value_verdicts(grading, suite.lambda_limits)
    verdict = combine(verdicts + limits)
    misconceptions.CATALOGUE.attach_hint(grading, verdict, suite.lambda_values)
    counterexample.SHRINKER.values(grading, suite.lambda_values, verdicts, expected.lambda_value)
    grading.conclude(verdict)


@check("T2", 5, "Causal outputs match the softmax oracle (T from 1 to 2064, D from 1 to 64, the default causal=True)",
       judges=attention("values"), replay=Recipe("values", ((suite.attention_causal, False),)))  # fmt: skip
def test_causal_values(grading: GradingContext) -> None:
    _attention_values(grading, suite.attention_causal)


@check("T2", 4, "Outputs with causal=False match the oracle (no mask on either branch)",
       judges=attention("values"), replay=Recipe("values", ((suite.attention_noncausal, False),)))  # fmt: skip
def test_noncausal_values(grading: GradingContext) -> None:
    _attention_values(grading, suite.attention_noncausal)


@check("T2", 4, "Negative, zero, greater-than-one and tensor coefficients give the right outputs",
       judges=attention("values"), replay=Recipe("values", ((suite.attention_coefficients, False),)))  # fmt: skip
def test_coefficient_values(grading: GradingContext) -> None:
    _attention_values(grading, suite.attention_coefficients)


@check("T2", 4, "float32 inputs with scaled logits of 100 to 1000 give finite, correct outputs", visibility="hidden",
       judges=attention("values"))  # fmt: skip
def test_large_logit_values(grading: GradingContext) -> None:
    _attention_values(grading, suite.attention_large_logits)


@check("T2", 3, "Strided inputs, inputs at a storage offset and inputs that share memory give the same values as contiguous ones",
       visibility="hidden", judges=of_both("values"))  # fmt: skip
def test_strided_values(grading: GradingContext) -> None:
    _attention_values(grading, suite.attention_strided, also=suite.value_verdicts(grading, suite.lambda_strided))


@check("T2", 3, "Rows of the signed map sum to 1 - λ: a value offset shared by every token adds (1 - λ) times it to every output",
       judges=attention("values"), replay=Recipe("values", ((suite.row_sums, False),)))  # fmt: skip
def test_row_sums(grading: GradingContext) -> None:
    found = suite.row_sums(grading.seed)
    verdicts = []
    for i in range(0, len(found), 2):
        plain, shifted = found[i], found[i + 1]
        outcomes = [suite.attention_outcome(grading, suite.row_sums, i + j, case) for j, case in enumerate((plain, shifted))]
        verdicts += [values_verdict(o, 0, f"{ATTENTION}({c.label()})", expected.attention_output(c)) for o, c in zip(outcomes, (plain, shifted))]
        got = [None if r is None else r.value for r, _ in (tensor_result(o, 0) for o in outcomes)]
        before, after = got
        if before is not None and after is not None and before.shape == after.shape == plain.value.shape:
            truth = expected.shared_offset_difference(plain, shifted)
            what = f"{ATTENTION}({shifted.label()}) minus the same call without the offset"
            verdicts.append(compare(what, after - before, truth.values, truth.allowed))
    verdict = combine(verdicts)
    misconceptions.CATALOGUE.attach_hint(grading, verdict, suite.row_sums)
    grading.conclude(verdict)


@check("T2", 3, "λ = 0 gives ordinary softmax attention",
       judges=attention("values"), replay=Recipe("values", ((suite.lambda_zero, False),)))  # fmt: skip
def test_lambda_zero_is_attention(grading: GradingContext) -> None:
    _attention_values(grading, suite.lambda_zero, expected.branch_one_output)


@check("T2", 2, "Identical maps cancel at λ = 1 and scale A1·V by 1 - λ otherwise",
       judges=attention("values"), replay=Recipe("values", ((suite.identical_maps, False),)))  # fmt: skip
def test_identical_maps_cancel(grading: GradingContext) -> None:
    _attention_values(grading, suite.identical_maps, expected.identical_maps_output)


@check("T2", 3, "Calls that build an autograd graph return the same correct values (no separate training path)",
       judges=of_both("values"), replay=Recipe("values", ((suite.lambda_values, True), (suite.attention_gradients, True), (suite.end_to_end, True))))  # fmt: skip
def test_values_with_gradients(grading: GradingContext) -> None:
    sets = (suite.lambda_values, suite.attention_gradients, suite.end_to_end)
    grading.conclude(combine([v for case_set in sets for v in suite.value_verdicts(grading, case_set, grads=True)]))


@check("T2", 4, "Repeated calls answer for their current inputs: the same tensors again, inputs updated in place, memory reused, other shapes, evaluation then training, two layers in one backward pass",
       judges=of_both("values", also=("gradients",)), replay=Recipe("sequence", ((suite.sequences, False),)))  # fmt: skip
def test_repeated_calls(grading: GradingContext) -> None:
    grading.conclude(combine(suite.SEQUENCES.verdicts(grading)))
