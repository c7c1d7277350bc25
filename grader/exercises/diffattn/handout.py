"""The public checks of the differential-attention exercise, for the handout runnable without the grader.

The handout itself is the toolkit's (:mod:`grader.toolkit.handout`): the
public checks' inputs drawn from the grader's own case sets with a seed no
graded run uses, their expected values and allowances, the runner and a
README. How each public check is replayed is part of its declaration (its
``replay``, in the check modules); this module says what the inputs of each
case are called, what the value checks on the property sets
compare against, and the toy experiment's pairs of calls.
"""

from __future__ import annotations

from typing import Any, Callable

from grader.exercises.diffattn import expected, suite, toy
from grader.exercises.diffattn.cases import INPUT_NAMES, LAMBDA_NAMES, AttentionCase, LambdaCase
from grader.toolkit import domain
from grader.toolkit.casesets import CaseSet
from grader.toolkit.handout import Calls, Handout
from grader.toolkit.tolerance import Truth

TOY_SET = "toy_experiment"

# The truth of a values check on a set, where it is not plain O = (A1 - λA2)V.
TRUTHS: dict[CaseSet[Any], Callable[[AttentionCase], Truth]] = {
    suite.lambda_zero: expected.branch_one_output,
    suite.identical_maps: expected.identical_maps_output,
}


def _tensor_names(case: AttentionCase | LambdaCase) -> list[str]:
    """The names of a request's input tensors, in the order of its ``inputs`` (the truths' keys; a tensor passed for several
    arguments named after the first: :func:`domain.tensor_names`)."""
    if isinstance(case, LambdaCase):
        return list(domain.tensor_names(LAMBDA_NAMES, case.one_object))
    names = [f"lambda_{n}" for n in LAMBDA_NAMES] if case.lambda_case is not None else []
    return names + list(domain.tensor_names((*INPUT_NAMES, *(["coefficient"] if case.coefficient_is_tensor else [])), case.one_object))


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
    request=suite.case_request,
    names=_tensor_names,
    value=expected.case_value,
    gradients=expected.case_grads,
    sequence_request=suite.SEQUENCES.request,
    larger="longer sequences (up to 1040 tokens)",
    truths=TRUTHS,
    extra={"difference": _offset_pairs},
)
