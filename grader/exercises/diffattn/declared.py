"""The parts the checks of differential attention share in their declarations (see :func:`grader.core.plugin.check`).

A check declares, in its decorator, what it judges (a :class:`Role`: for the
root causes, docs/diagnosis.md) and how the handout replays it (a
:class:`Recipe`: for `diffgrade handout`). The shorthands below keep those
declarations one line each.
"""

from __future__ import annotations

from grader.exercises.diffattn import suite
from grader.exercises.diffattn.cases import INPUT_NAMES, LAMBDA_NAMES
from grader.exercises.diffattn.suite import ATTENTION, LAMBDA
from grader.toolkit.rootcause import Role

BOTH = (LAMBDA, ATTENTION)
ALL_ATTENTION_INPUTS = (*INPUT_NAMES, "coefficient")
# Replayed calls: (case set, with a backward pass).
LAMBDA_CALLS = ((suite.lambda_values, False),)
LAMBDA_VALUE_CALLS = (*LAMBDA_CALLS, (suite.lambda_limits, False))
LAMBDA_GRAD_CALLS = ((suite.lambda_values, True),)
OUTPUT_CALLS = ((suite.attention_causal, False), (suite.attention_noncausal, False))
GRADIENT_CALLS = ((suite.attention_gradients, True),)
SUBSET_CALLS = ((suite.frozen_subsets, True), (suite.lambda_frozen_subsets, True))


def attention(aspect: str, *inputs: str) -> Role:
    """What a check of differential_attention alone judges (for gradients, of ``inputs``)."""
    return Role((ATTENTION,), aspect, {ATTENTION: inputs} if inputs else {})


def of_lambda(aspect: str) -> Role:
    """What a check of differential_lambda alone judges (for gradients, of all four vectors)."""
    return Role((LAMBDA,), aspect, {LAMBDA: LAMBDA_NAMES} if aspect == "gradients" else {})


def of_both(aspect: str, also: tuple[str, ...] = (), gradients: bool = False) -> Role:
    """What a check of both functions judges (``gradients``: of every input of both)."""
    return Role(BOTH, aspect, {LAMBDA: LAMBDA_NAMES, ATTENTION: ALL_ATTENTION_INPUTS} if gradients else {}, also)
