"""The parts the checks of DIFF V2 share in their declarations (see :func:`grader.core.plugin.check`): what they
judge (for the root causes) and the calls the handout replays, as (case set, with a backward pass)."""

from __future__ import annotations

from grader.exercises.diffv2 import suite
from grader.exercises.diffv2.cases import DIFF_V2, GQA, TENSORS
from grader.toolkit.rootcause import Role

GQA_OUTPUT_CALLS = ((suite.gqa_causal, False), (suite.gqa_noncausal, False))
DIFF_OUTPUT_CALLS = ((suite.diff_causal, False), (suite.diff_noncausal, False))
GRADIENT_CALLS = ((suite.gqa_gradients, True), (suite.diff_gradients, True))
DIFF_GRADIENT_CALLS = ((suite.diff_gradients, True),)

BOTH = (GQA, DIFF_V2)


def of(function: str, aspect: str, *inputs: str) -> Role:
    """What a check of ``function`` alone judges (for gradients, of ``inputs``; none named: all of them)."""
    if aspect == "gradients" and not inputs:
        inputs = TENSORS[function]
    return Role((function,), aspect, {function: inputs} if inputs else {})


def of_both(aspect: str, also: tuple[str, ...] = ()) -> Role:
    """What a check of both functions judges (for gradients, of every input of both)."""
    return Role(BOTH, aspect, {f: TENSORS[f] for f in BOTH} if aspect == "gradients" else {}, also)
