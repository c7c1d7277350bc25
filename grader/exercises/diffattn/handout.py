"""The public checks of the differential-attention exercise, for the handout runnable without the grader.

The handout itself is the toolkit's (:mod:`grader.toolkit.handout`): the
public checks' inputs drawn from the grader's own case sets with a seed no
graded run uses, their expected values and allowances, the runner and a
README. This module says how each public check is replayed (:data:`RECIPES`;
a check missing there, or marked hidden, is not in the handout), what the
inputs of each case are called, what the value checks on the property sets
compare against, and the toy experiment's pairs of calls.
"""

from __future__ import annotations

from typing import Any, Callable

from grader.exercises.diffattn import expected, suite, toy
from grader.exercises.diffattn.cases import INPUT_NAMES, LAMBDA_NAMES, AttentionCase, LambdaCase
from grader.toolkit.casesets import CaseSet
from grader.toolkit.handout import Calls, Handout, Recipe
from grader.toolkit.tolerance import Truth

TOY_SET = "toy_experiment"

_LAMBDA = ((suite.lambda_values, False),)
_LAMBDA_GRADS = ((suite.lambda_values, True),)
_OUTPUTS = ((suite.attention_causal, False), (suite.attention_noncausal, False))
_GRADIENTS = ((suite.attention_gradients, True),)

RECIPES: dict[str, Recipe] = {
    "lambda_returns_0dim_tensor": Recipe("kind", _LAMBDA),
    "lambda_keeps_dtype": Recipe("dtype", _LAMBDA),
    "attention_returns_one_tensor": Recipe("kind", _OUTPUTS),
    "attention_keeps_dtype": Recipe("dtype", _OUTPUTS),
    "coefficient_kinds_accepted": Recipe("dtype", ((suite.attention_coefficients, False), *_GRADIENTS)),
    "inputs_not_modified": Recipe("unchanged", ((suite.attention_coefficients, False), *_GRADIENTS, *_LAMBDA, *_LAMBDA_GRADS)),
    "graph_attached": Recipe("graph", (*_GRADIENTS, *_LAMBDA_GRADS)),
    "lambda_values": Recipe("values", _LAMBDA),
    "causal_values": Recipe("values", ((suite.attention_causal, False),)),
    "noncausal_values": Recipe("values", ((suite.attention_noncausal, False),)),
    "coefficient_values": Recipe("values", ((suite.attention_coefficients, False),)),
    "row_sums": Recipe("values", ((suite.row_sums, False),)),
    "lambda_zero_is_attention": Recipe("values", ((suite.lambda_zero, False),)),
    "identical_maps_cancel": Recipe("values", ((suite.identical_maps, False),)),
    "value_gradient": Recipe("grads", _GRADIENTS, ("value",)),
    "branch_one_gradients": Recipe("grads", _GRADIENTS, ("q1", "k1")),
    "branch_two_gradients": Recipe("grads", _GRADIENTS, ("q2", "k2")),
    "coefficient_gradient": Recipe("grads", _GRADIENTS, ("coefficient",)),
    "lambda_gradients": Recipe("grads", _LAMBDA_GRADS, LAMBDA_NAMES),
    "end_to_end_gradients": Recipe(
        "grads", ((suite.end_to_end, True),), (*(f"lambda_{n}" for n in LAMBDA_NAMES), *INPUT_NAMES)
    ),
    "toy_offset_scaling": Recipe("difference"),
    "arguments_bind": Recipe("values", ((suite.lambda_bindings, False), (suite.attention_bindings, False))),
    "values_with_gradients": Recipe("values", ((suite.lambda_values, True), (suite.attention_gradients, True), (suite.end_to_end, True))),
    "repeated_calls": Recipe("sequence", ((suite.sequences, False),)),
}

# The truth of a values check on a set, where it is not plain O = (A1 - λA2)V.
TRUTHS: dict[CaseSet[Any], Callable[[AttentionCase], Truth]] = {
    suite.lambda_zero: expected.branch_one_output,
    suite.identical_maps: expected.identical_maps_output,
}


def _tensor_names(case: AttentionCase | LambdaCase) -> list[str]:
    """The names of a request's input tensors, in the order of its ``inputs`` (the truths' keys)."""
    if isinstance(case, LambdaCase):
        return list(LAMBDA_NAMES)
    names = [f"lambda_{n}" for n in LAMBDA_NAMES] if case.lambda_case is not None else []
    return names + list(INPUT_NAMES) + (["coefficient"] if case.coefficient_is_tensor else [])


def _offset_pairs(handout: Handout, seed: int, calls: Calls) -> dict[str, Any]:
    """The toy experiment: at each λ, the call with the shared offset, the one without, and their difference in sequence 0, head 0."""
    with_offset, signal_only, _ = toy.sweep_cases(seed)
    return {"pairs": [
        handout.difference(
            calls, (f"{TOY_SET}/with_offset/{index}", f"{TOY_SET}/values_only/{index}"), (shifted, plain),
            f"toy experiment at λ={lam:g}: output(values + offset) - output(values), sequence 0, head 0",
            (0, 0), toy.offset_contribution(shifted, plain),
        )
        for index, (lam, shifted, plain) in enumerate(zip(toy.LAMBDAS, with_offset, signal_only))
    ]}  # fmt: skip


HANDOUT = Handout(
    title="Differential attention",
    submission="exercise/diff_attention.py",
    statement="exercise/README.md",
    checks_package="grader.exercises.diffattn.checks",
    recipes=RECIPES,
    request=suite.case_request,
    names=_tensor_names,
    value=expected.case_value,
    gradients=expected.case_grads,
    sequence_request=suite.sequence_request,
    larger="longer sequences (up to 320 tokens)",
    truths=TRUTHS,
    extra={"difference": _offset_pairs},
)
