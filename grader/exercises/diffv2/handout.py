"""The public checks of the DIFF V2 exercise, for the handout runnable without the grader.

The handout itself is the toolkit's (:mod:`grader.toolkit.handout`): the
public checks' inputs drawn from the grader's own case sets with a seed no
graded run uses, their expected values and allowances, the runner and a
README. This module says how each public check is replayed (:data:`RECIPES`;
a check missing there, or marked hidden, is not in the handout), what the
value check of the gate-off set compares against, and the toy experiment's
pairs of calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.exercises.diffv2 import expected, suite, toy
from grader.exercises.diffv2.cases import Case
from grader.toolkit.casesets import CaseSet
from grader.toolkit.handout import Calls, Handout, Recipe
from grader.toolkit.tolerance import Truth

_OUTPUTS_GQA = ((suite.gqa_causal, False), (suite.gqa_noncausal, False))
_OUTPUTS_DIFF = ((suite.diff_causal, False), (suite.diff_noncausal, False))
_GRADIENTS = ((suite.gqa_gradients, True), (suite.diff_gradients, True))
_DIFF_GRADIENTS = ((suite.diff_gradients, True),)

RECIPES: dict[str, Recipe] = {
    "gqa_returns_one_tensor": Recipe("kind", _OUTPUTS_GQA),
    "diff_v2_returns_one_tensor": Recipe("kind", _OUTPUTS_DIFF),
    "dtype_and_device_kept": Recipe("dtype", (*_OUTPUTS_GQA, *_OUTPUTS_DIFF)),
    "inputs_not_modified": Recipe("unchanged", ((suite.gqa_causal, False), (suite.diff_causal, False), *_GRADIENTS)),
    "graph_attached": Recipe("graph", _GRADIENTS),
    "arguments_bind": Recipe("values", ((suite.gqa_bindings, False), (suite.diff_bindings, False))),
    "gqa_causal_values": Recipe("values", ((suite.gqa_causal, False),)),
    "gqa_noncausal_values": Recipe("values", ((suite.gqa_noncausal, False),)),
    "diff_v2_causal_values": Recipe("values", ((suite.diff_causal, False),)),
    "diff_v2_noncausal_values": Recipe("values", ((suite.diff_noncausal, False),)),
    "saturated_gate_values": Recipe("values", ((suite.diff_saturated, False),)),
    "row_sums": Recipe("values", ((suite.diff_offsets, False),)),
    "gate_off_is_even_heads": Recipe("values", ((suite.diff_gate_off, False),)),
    "values_with_gradients": Recipe("values", _GRADIENTS),
    "gqa_gradients": Recipe("grads", ((suite.gqa_gradients, True),), ("q", "k", "v")),
    "diff_v2_value_gradient": Recipe("grads", _DIFF_GRADIENTS, ("v",)),
    "diff_v2_query_key_gradients": Recipe("grads", _DIFF_GRADIENTS, ("q", "k")),
    "gate_gradient": Recipe("grads", _DIFF_GRADIENTS, ("lambda_logits",)),
    "saturated_gate_gradients": Recipe("grads", ((suite.diff_saturated, True),), ("q", "k", "v", "lambda_logits")),
    "toy_offset_scaling": Recipe("difference"),
}

# The truth of a values check on a set, where it is not the oracle's output of the case.
TRUTHS: dict[CaseSet[Any], Callable[[Case], Truth]] = {suite.diff_gate_off: expected.even_heads}


def _names(case: Case) -> list[str]:
    """The names of a request's input tensors, in the order of its ``inputs`` (the truths' keys)."""
    return list(case.names)


def _offset_pairs(handout: Handout, seed: int, calls: Calls) -> dict[str, Any]:
    """The toy experiment: per gate setting, the call with the shared offset, the one without, and their difference (batch 0)."""
    pairs, _ = toy.pairs(seed)
    found = []
    for index, pair in enumerate(pairs):
        where = f"ℓ = {toy.SWEEP[index]:g} everywhere" if index < len(toy.SWEEP) else "ℓ_t = 2t − 6 along the sequence"
        truth = expected.offset_response(pair.plain, pair.shifted)
        label = f"toy experiment at {where}: output(values + c) − output(values), batch 0"
        keys = (f"toy_experiment/with_offset/{index}", f"toy_experiment/values_only/{index}")
        found.append(handout.difference(calls, keys, (pair.shifted, pair.plain), label, (0,), Truth(truth.values[0], truth.allowed[0])))
    return {"pairs": found}


HANDOUT = Handout(
    title="DIFF V2 attention",
    submission="exercise/diff_v2_attention.py",
    statement="exercise/diff_v2_attention.md",
    checks_package="grader.exercises.diffv2.checks",
    recipes=RECIPES,
    request=suite.request,
    names=_names,
    value=expected.output,
    gradients=expected.gradients,
    larger="longer sequences (up to 320 tokens), large logits, strided views",
    truths=TRUTHS,
    extra={"difference": _offset_pairs},
)
files = HANDOUT.files
