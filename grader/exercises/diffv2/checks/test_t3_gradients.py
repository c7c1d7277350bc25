"""T3, the gradients: autograd of the submission against hand-derived VJPs, and the toy experiment."""

from __future__ import annotations

from grader.core.plugin import GradingContext, check
from grader.exercises.diffv2 import counterexample, expected, misconceptions, suite, toy
from grader.exercises.diffv2.cases import DIFF_V2, GQA, Case
from grader.exercises.diffv2.declared import DIFF_GRADIENT_CALLS, of, of_both
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison, combine
from grader.toolkit.handout import Recipe
from grader.toolkit.verdicts import function_problem, grads_verdict


def _gradients(grading: GradingContext, case_sets: tuple[CaseSet[Case], ...], keys: tuple[str, ...]) -> None:
    """Judge the gradients named ``keys`` over the case sets; the hint and the counterexample come from the first failing set."""
    per_set = []
    for case_set in case_sets:
        found = []
        for i, case in enumerate(case_set(grading.seed)):
            wanted = {name: position for name, position in suite.gradient_positions(case).items() if name in keys}
            outcome = suite.outcome(grading, case_set, i, case, True)
            found.append(grads_verdict(outcome, 0, f"{suite.described(case, True)} with cotangent G", expected.gradients(case), wanted))
        per_set.append(found)
    verdict = combine([v for found in per_set for v in found])
    failing = next((n for n, found in enumerate(per_set) if not all(v.ok for v in found)), 0)
    misconceptions.attach_hint(grading, verdict, case_sets[failing], grads=True, keys=keys)
    counterexample.SHRINKER.gradients(grading, case_sets[failing], per_set[failing], expected.gradients, keys)
    grading.conclude(verdict)


@check("T3", 8, "gqa_attention: gradients of q, k and v (k and v summed over each group's query heads) match the VJPs",
       judges=of(GQA, "gradients"), replay=Recipe("grads", ((suite.gqa_gradients, True),), ("q", "k", "v")))  # fmt: skip
def test_gqa_gradients(grading: GradingContext) -> None:
    _gradients(grading, (suite.gqa_gradients,), ("q", "k", "v"))


@check("T3", 5, "diff_v2_attention: the gradient of v matches Σ_h Aᵀ·dO over each group's query heads",
       judges=of(DIFF_V2, "gradients", "v"), replay=Recipe("grads", DIFF_GRADIENT_CALLS, ("v",)))  # fmt: skip
def test_diff_v2_value_gradient(grading: GradingContext) -> None:
    _gradients(grading, (suite.diff_gradients,), ("v",))


@check("T3", 7, "diff_v2_attention: the gradients of q and k match the softmax VJP (dO = G for head 2i, −σ(ℓ)·G for head 2i + 1)",
       judges=of(DIFF_V2, "gradients", "q", "k"), replay=Recipe("grads", DIFF_GRADIENT_CALLS, ("q", "k")))  # fmt: skip
def test_diff_v2_query_key_gradients(grading: GradingContext) -> None:
    _gradients(grading, (suite.diff_gradients,), ("q", "k"))


@check("T3", 6, "diff_v2_attention: the gradient of lambda_logits matches −σ(ℓ)(1 − σ(ℓ))·Σ_d G·A[:, :, 1::2]",
       judges=of(DIFF_V2, "gradients", "lambda_logits"), replay=Recipe("grads", DIFF_GRADIENT_CALLS, ("lambda_logits",)))  # fmt: skip
def test_gate_gradient(grading: GradingContext) -> None:
    _gradients(grading, (suite.diff_gradients,), ("lambda_logits",))


@check("T3", 4, "Saturated gates (±100 to ±1000): every gradient finite and correct, float32 and float64",
       judges=of(DIFF_V2, "gradients"), replay=Recipe("grads", ((suite.diff_saturated, True),), ("q", "k", "v", "lambda_logits")))  # fmt: skip
def test_saturated_gate_gradients(grading: GradingContext) -> None:
    _gradients(grading, (suite.diff_saturated,), ("q", "k", "v", "lambda_logits"))


@check("T3", 4, "Gradients are right for strided inputs", visibility="hidden",
       judges=of_both("gradients"))  # fmt: skip
def test_strided_gradients(grading: GradingContext) -> None:
    _gradients(grading, (suite.gqa_strided, suite.diff_strided), ("q", "k", "v", "lambda_logits"))


@check("T3", 6, "Toy experiment: a value offset shared by every token comes out scaled by 1 − σ(ℓ[t, i]) for each token and head",
       judges=of(DIFF_V2, "values"), replay=Recipe("difference"))  # fmt: skip
def test_toy_offset_scaling(grading: GradingContext) -> None:
    problem = function_problem(grading, DIFF_V2)
    if problem is not None or grading.worker is None:
        grading.experiment_note = problem or "the submission could not be run"
        grading.conclude(Comparison(False, grading.experiment_note, None))
        return
    worker = grading.worker
    result = grading.memo("toy", lambda: toy.sweep(worker, grading.seed))
    grading.experiment = toy.measured(result)
    grading.conclude(toy.verdict(result))
