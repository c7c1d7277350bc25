"""The public checks of the DIFF V2 exercise, for the handout runnable without the grader.

The handout itself is the toolkit's (:mod:`grader.toolkit.handout`): the
public checks' inputs drawn from the grader's own case sets with a seed no
graded run uses, their expected values and allowances, the runner and a
README. How each public check is replayed is part of its declaration (its
``replay``, in the check modules); this module says what the value check of the gate-off set compares against, and the toy experiment's
pairs of calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.exercises.diffv2 import expected, suite, toy
from grader.exercises.diffv2.cases import Case
from grader.toolkit import domain
from grader.toolkit.casesets import CaseSet
from grader.toolkit.handout import Calls, Handout
from grader.toolkit.tolerance import Truth

# The truth of a values check on a set, where it is not the oracle's output of the case.
TRUTHS: dict[CaseSet[Any], Callable[[Case], Truth]] = {suite.diff_gate_off: expected.even_heads}


def _names(case: Case) -> list[str]:
    """The names of a request's input tensors, in the order of its ``inputs`` (the truths' keys)."""
    return list(domain.tensor_names(case.names, case.one_object))


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
    request=suite.request,
    names=_names,
    value=expected.output,
    gradients=expected.gradients,
    sequence_request=suite.SEQUENCES.request,
    larger="longer sequences (up to 1040 tokens), large logits, strided views",
    truths=TRUTHS,
    extra={"difference": _offset_pairs},
)
files = HANDOUT.files
