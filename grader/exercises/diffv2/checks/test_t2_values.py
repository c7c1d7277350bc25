"""T2, the values: both functions against the float64 oracle, and two properties of the gate."""

from __future__ import annotations

from collections.abc import Callable

from grader.core.plugin import GradingContext, check
from grader.exercises.diffv2 import counterexample, expected, misconceptions, suite
from grader.exercises.diffv2.cases import DIFF_V2, GQA, Case
from grader.exercises.diffv2.declared import GRADIENT_CALLS, of, of_both
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import combine, compare
from grader.toolkit.handout import Recipe
from grader.toolkit.tolerance import Truth
from grader.toolkit.verdicts import returned_values


def _values(grading: GradingContext, *case_sets: CaseSet[Case], truth: Callable[[Case], Truth] = expected.output) -> None:
    """Judge the outputs of ``case_sets`` against ``truth``; the hint and the counterexample come from the first failing set."""
    per_set = [suite.value_verdicts(grading, case_set, truth) for case_set in case_sets]
    verdict = combine([v for found in per_set for v in found])
    failing = next((s for s, found in zip(case_sets, per_set) if not all(v.ok for v in found)), case_sets[0])
    misconceptions.attach_hint(grading, verdict, failing)
    counterexample.SHRINKER.values(grading, failing, per_set[case_sets.index(failing)], truth)
    grading.conclude(verdict)


@check("T2", 5, "gqa_attention, causal: matches the oracle (T = 1 to 2064, Hkv = 1, Hkv = Hq, G = 2, 3 and 4, the default causal=True)",
       judges=of(GQA, "values"), replay=Recipe("values", ((suite.gqa_causal, False),)))  # fmt: skip
def test_gqa_causal_values(grading: GradingContext) -> None:
    _values(grading, suite.gqa_causal)


@check("T2", 3, "gqa_attention, causal=False: matches the oracle (no mask)",
       judges=of(GQA, "values"), replay=Recipe("values", ((suite.gqa_noncausal, False),)))  # fmt: skip
def test_gqa_noncausal_values(grading: GradingContext) -> None:
    _values(grading, suite.gqa_noncausal)


@check("T2", 5, "diff_v2_attention, causal: matches A[:, :, 0::2] − σ(ℓ)·A[:, :, 1::2] (T = 1 to 2064, Hkv = 1, G = 2 and 4)",
       judges=of(DIFF_V2, "values"), replay=Recipe("values", ((suite.diff_causal, False),)))  # fmt: skip
def test_diff_v2_causal_values(grading: GradingContext) -> None:
    _values(grading, suite.diff_causal)


@check("T2", 3, "diff_v2_attention, causal=False: matches the oracle",
       judges=of(DIFF_V2, "values"), replay=Recipe("values", ((suite.diff_noncausal, False),)))  # fmt: skip
def test_diff_v2_noncausal_values(grading: GradingContext) -> None:
    _values(grading, suite.diff_noncausal)


@check("T2", 3, "float32 inputs with scaled logits of 100 to 1000 give finite, correct outputs", visibility="hidden",
       judges=of_both("values"))  # fmt: skip
def test_large_logit_values(grading: GradingContext) -> None:
    _values(grading, suite.gqa_large_logits, suite.diff_large_logits)


@check("T2", 4, "Saturated gates (lambda_logits of ±100 to ±1000, float32 and float64) give finite, correct outputs",
       judges=of(DIFF_V2, "values"), replay=Recipe("values", ((suite.diff_saturated, False),)))  # fmt: skip
def test_saturated_gate_values(grading: GradingContext) -> None:
    _values(grading, suite.diff_saturated)


@check("T2", 3, "Strided inputs, inputs at a storage offset and inputs that share memory give the same values as contiguous ones",
       visibility="hidden", judges=of_both("values"))  # fmt: skip
def test_strided_values(grading: GradingContext) -> None:
    _values(grading, suite.gqa_strided, suite.diff_strided)


@check("T2", 4, "Rows of each signed map sum to 1 − σ(ℓ_t): a value offset c shared by every token adds (1 − σ(ℓ[t, i]))·c to output [t, i]",
       judges=of(DIFF_V2, "values"), replay=Recipe("values", ((suite.diff_offsets, False),)))  # fmt: skip
def test_row_sums(grading: GradingContext) -> None:
    found = suite.diff_offsets(grading.seed)
    verdicts = suite.value_verdicts(grading, suite.diff_offsets)
    for i in range(0, len(found), 2):
        plain, shifted = found[i], found[i + 1]
        got = [returned_values(suite.outcome(grading, suite.diff_offsets, i + j, case, False), 0) for j, case in enumerate((plain, shifted))]
        if got[0] is not None and got[1] is not None and got[0].shape == got[1].shape == plain.output_shape:
            truth = expected.offset_response(plain, shifted)
            what = f"diff_v2_attention({shifted.label()}) minus the same call without the offset, against (1 − σ(ℓ))·c"
            verdicts.append(compare(what, got[1] - got[0], truth.values, truth.allowed))
    verdict = combine(verdicts)
    misconceptions.attach_hint(grading, verdict, suite.diff_offsets)
    grading.conclude(verdict)


@check("T2", 3, "As ℓ → −∞ (every gate logit at most −100) the output is ordinary attention of the even query heads",
       judges=of(DIFF_V2, "values"), replay=Recipe("values", ((suite.diff_gate_off, False),)))  # fmt: skip
def test_gate_off_is_even_heads(grading: GradingContext) -> None:
    _values(grading, suite.diff_gate_off, truth=expected.even_heads)


@check("T2", 3, "Calls that build an autograd graph return the same correct values (no separate training path)",
       judges=of_both("values"), replay=Recipe("values", GRADIENT_CALLS))  # fmt: skip
def test_values_with_gradients(grading: GradingContext) -> None:
    sets = (suite.gqa_gradients, suite.diff_gradients)
    grading.conclude(combine([v for case_set in sets for v in suite.value_verdicts(grading, case_set, grads=True)]))


@check("T2", 4, "Repeated calls answer for their current inputs: the same tensors again, inputs updated in place, memory reused, other shapes, evaluation then training, two layers in one backward pass",
       judges=of_both("values", also=("gradients",)), replay=Recipe("sequence", ((suite.sequences, False),)))  # fmt: skip
def test_repeated_calls(grading: GradingContext) -> None:
    grading.conclude(combine(suite.SEQUENCES.verdicts(grading)))
