"""How the differential-attention exercise cuts a failing input down, for the toolkit's counterexample search.

The search is the toolkit's (:mod:`grader.toolkit.shrink`): when a value (T2)
or gradient (T3) check fails because numbers came back wrong, the failing
case with the fewest elements (T·D, then T; lambda vectors: their length)
becomes the template. Here it is cut down to the batch and head of its worst
element and to its first T tokens and D features, for every T ≤ 4 and D ≤ 3
it has (lambda vectors: their first n ≤ 4 entries). A cut keeps everything
else of the template: dtype, causal flag and how it is passed, coefficient
and its kind, layouts, frozen inputs, the lambda call of a composed case, the
shared value rows or identical branches of a property check, and the
cotangent (cut the same way); for a causal case a cut to the first T tokens
is even the same problem's first rows. The first failing cut in the order of
T·D, then T (lambda: n) is the counterexample.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from grader.exercises.diffattn import suite
from grader.exercises.diffattn.cases import LAMBDA, AttentionCase, LambdaCase
from grader.exercises.diffattn.signatures import CONTRACT
from grader.toolkit.shrink import Cuts, Shrinker

MAX_T = 4
MAX_D = 3
MAX_LENGTH = 4


def attention_sizes(t: int, d: int) -> list[tuple[int, int]]:
    """The (T, D) of the cuts of a [.., t, d] case, smallest first: by T·D, then T."""
    sizes = [(tt, dd) for tt in range(1, min(t, MAX_T) + 1) for dd in range(1, min(d, MAX_D) + 1)]
    return sorted(sizes, key=lambda size: (size[0] * size[1], size[0]))


def cut_attention(case: AttentionCase, b: int, h: int, t: int, d: int) -> AttentionCase:
    """Batch ``b``, head ``h``, the first ``t`` tokens and ``d`` features (value and cotangent: 2d columns)."""

    def part(x: np.ndarray, width: int) -> np.ndarray:
        return x[b : b + 1, h : h + 1, :t, :width].copy()

    q1, k1, q2, k2 = (part(x, d) for x in (case.q1, case.k1, case.q2, case.k2))
    return replace(case, q1=q1, k1=k1, q2=q2, k2=k2, value=part(case.value, 2 * d), cotangent=part(case.cotangent, 2 * d))


def cut_lambda(case: LambdaCase, n: int) -> LambdaCase:
    """The first ``n`` entries of each lambda vector."""
    return replace(case, q1=case.q1[:n].copy(), k1=case.k1[:n].copy(), q2=case.q2[:n].copy(), k2=case.k2[:n].copy())


def _head(case: Any, worst: tuple[int, ...]) -> tuple[int, ...]:
    """What every cut keeps: the (batch, head) of an attention output's worst element ((0, 0) for anything else)."""
    return (worst[0], worst[1]) if len(worst) == 4 else (0, 0)


def _cuts(case: LambdaCase | AttentionCase, head: tuple[int, ...]) -> Cuts:
    """Every cut of ``case`` with its size, smallest first; attention cuts keep the (batch, head) ``head``."""
    if isinstance(case, LambdaCase):
        return [({"length": n}, cut_lambda(case, n)) for n in range(1, min(case.q1.size, MAX_LENGTH) + 1)]
    b, h = head
    _, _, t, d = case.q1.shape
    return [({"B": 1, "H": 1, "T": tt, "D": dd}, cut_attention(case, b, h, tt, dd)) for tt, dd in attention_sizes(t, d)]


def _elements(case: LambdaCase | AttentionCase) -> tuple[int, int]:
    """Sort key of a template: T·D, then T (lambda: the vector length)."""
    if isinstance(case, LambdaCase):
        return case.q1.size, case.q1.size
    t, d = case.q1.shape[2:]
    return t * d, t


SHRINKER = Shrinker(
    anchor=_head,
    cuts=_cuts,
    size=_elements,
    outcome=suite.case_outcome,
    request=suite.case_request,
    positions=suite.gradient_positions,
    contract=CONTRACT,
    prefixes={LAMBDA: "lambda_"},
    fixed=("B", "H"),
)
