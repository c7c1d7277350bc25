"""T3, the gradients: autograd of the submission against hand-derived VJPs, and the toy experiment."""

from __future__ import annotations

from grader.core.plugin import GradingContext, check
from grader.exercises.diffattn import (
    counterexample,
    expected,
    misconceptions,
    suite,
    toy,
)
from grader.exercises.diffattn.cases import INPUT_NAMES, LAMBDA_NAMES, AttentionCase
from grader.exercises.diffattn.declared import ALL_ATTENTION_INPUTS, GRADIENT_CALLS, LAMBDA_GRAD_CALLS, attention, of_both, of_lambda
from grader.exercises.diffattn.suite import ATTENTION, LAMBDA
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison, combine
from grader.toolkit.handout import Recipe
from grader.toolkit.verdicts import function_problem, grads_verdict


def _attention_grads(grading: GradingContext, case_sets: tuple[CaseSet[AttentionCase], ...], keys: tuple[str, ...]) -> None:
    """Judge the gradients named ``keys`` over the case sets; hints and counterexamples come from the first set."""
    verdicts: dict[str, list[Comparison]] = {}
    for case_set in case_sets:
        for i, case in enumerate(case_set(grading.seed)):
            wanted = {name: position for name, position in suite.gradient_positions(case).items() if name in keys}
            outcome = suite.attention_outcome(grading, case_set, i, case, grads=True)
            what = f"{ATTENTION}({case.label(grads=True)}) with cotangent G"
            verdicts.setdefault(case_set.name, []).append(grads_verdict(outcome, len(outcome.results) - 1, what, expected.attention_grads(case), wanted))
    verdict = combine([v for found in verdicts.values() for v in found])
    misconceptions.CATALOGUE.attach_hint(grading, verdict, case_sets[0], grads=True, keys=keys)
    counterexample.SHRINKER.gradients(grading, case_sets[0], verdicts[case_sets[0].name], expected.attention_grads, keys)
    grading.conclude(verdict)


@check("T3", 5, "Gradient with respect to value matches Pᵀ G",
       judges=attention("gradients", "value"), replay=Recipe("grads", GRADIENT_CALLS, ("value",)))  # fmt: skip
def test_value_gradient(grading: GradingContext) -> None:
    _attention_grads(grading, (suite.attention_gradients, suite.frozen_subsets), ("value",))


@check("T3", 5, "Gradients with respect to q1 and k1 match the softmax VJP of branch 1",
       judges=attention("gradients", "q1", "k1"), replay=Recipe("grads", GRADIENT_CALLS, ("q1", "k1")))  # fmt: skip
def test_branch_one_gradients(grading: GradingContext) -> None:
    _attention_grads(grading, (suite.attention_gradients, suite.frozen_subsets), ("q1", "k1"))


@check("T3", 5, "Gradients with respect to q2 and k2 match the softmax VJP of branch 2",
       judges=attention("gradients", "q2", "k2"), replay=Recipe("grads", GRADIENT_CALLS, ("q2", "k2")))  # fmt: skip
def test_branch_two_gradients(grading: GradingContext) -> None:
    _attention_grads(grading, (suite.attention_gradients, suite.frozen_subsets), ("q2", "k2"))


@check("T3", 5, "Gradient with respect to a tensor coefficient matches -Σ A2 ⊙ (G Vᵀ)",
       judges=attention("gradients", "coefficient"), replay=Recipe("grads", GRADIENT_CALLS, ("coefficient",)))  # fmt: skip
def test_coefficient_gradient(grading: GradingContext) -> None:
    _attention_grads(grading, (suite.attention_gradients, suite.frozen_subsets), ("coefficient",))


@check("T3", 4, "Gradients are right for strided inputs", visibility="hidden",
       judges=attention("gradients", *ALL_ATTENTION_INPUTS))  # fmt: skip
def test_strided_gradients(grading: GradingContext) -> None:
    _attention_grads(grading, (suite.attention_strided,), (*INPUT_NAMES, "coefficient"))


@check("T3", 5, "differential_lambda's gradients match g·e1·k1, g·e1·q1, -g·e2·k2, -g·e2·q2",
       judges=of_lambda("gradients"), replay=Recipe("grads", LAMBDA_GRAD_CALLS, LAMBDA_NAMES))  # fmt: skip
def test_lambda_gradients(grading: GradingContext) -> None:
    verdicts = []
    for case_set in (suite.lambda_values, suite.lambda_frozen_subsets):
        for i, case in enumerate(case_set(grading.seed)):
            outcome = suite.lambda_outcome(grading, case_set, i, case, grads=True)
            what = f"{LAMBDA}({case.label(grads=True)}) with upstream gradient {case.upstream:.6g}"
            verdicts.append(grads_verdict(outcome, 0, what, expected.lambda_grads(case), suite.gradient_positions(case)))
    verdict = combine(verdicts)
    misconceptions.CATALOGUE.attach_hint(grading, verdict, suite.lambda_values, grads=True)
    counterexample.SHRINKER.gradients(grading, suite.lambda_values, verdicts[: len(suite.lambda_values(grading.seed))], expected.lambda_grads)
    grading.conclude(verdict)


@check("T3", 5, "End to end: differential_lambda → differential_attention → loss, gradients to every vector",
       judges=of_both("gradients", gradients=True), replay=Recipe("grads", ((suite.end_to_end, True),), (*(f"lambda_{n}" for n in LAMBDA_NAMES), *INPUT_NAMES)))  # fmt: skip
def test_end_to_end_gradients(grading: GradingContext) -> None:
    _attention_grads(grading, (suite.end_to_end,), (*(f"lambda_{name}" for name in LAMBDA_NAMES), *INPUT_NAMES))


@check("T3", 6, "Toy experiment: a value offset shared by all tokens comes out scaled by exactly 1 - λ",
       judges=attention("values"), replay=Recipe("difference"))  # fmt: skip
def test_toy_offset_scaling(grading: GradingContext) -> None:
    problem = function_problem(grading, ATTENTION)
    if problem is not None:
        grading.experiment_note = problem
        grading.conclude(Comparison(False, problem, None))
    assert grading.worker is not None  # a submission that did not load fails every check before its body runs
    worker = grading.worker
    result = grading.memo("toy", lambda: toy.sweep(worker, grading.seed))
    grading.experiment = toy.curves(result)
    grading.conclude(toy.verdict(result))
