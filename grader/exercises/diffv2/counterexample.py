"""How the DIFF V2 exercise cuts a failing case down for the toolkit's counterexample search.

A cut keeps the batch of the template's worst element, its first one or two
key/value heads with all G query heads of each (so a bug in how heads are
grouped or paired still shows: with Hkv = 1 the tiled and interleaved
mappings coincide), the first T ≤ 4 tokens and D ≤ 3 features, and
everything else of the template: dtype, causal flag and how it is passed,
layouts, frozen inputs, gate logits and cotangent cut the same way. The
first failing cut in the order of its elements (T·D·Hkv), then T, is the
counterexample (:class:`grader.toolkit.shrink.Shrinker`).
"""

from __future__ import annotations

from dataclasses import replace

from grader.exercises.diffv2 import suite
from grader.exercises.diffv2.cases import GQA, Case
from grader.toolkit.shrink import Cuts, Shrinker

MAX_T = 4
MAX_D = 3
MAX_KV_HEADS = 2


def cut(case: Case, batch: int, t: int, kv_heads: int, d: int) -> Case:
    """Batch ``batch``, the first ``kv_heads`` key/value heads with their query heads, ``t`` tokens, ``d`` features."""
    hq = kv_heads * case.group
    out = hq if case.function == GQA else hq // 2
    rows = slice(batch, batch + 1)
    gates = None if case.lambda_logits is None else case.lambda_logits[rows, :t, :out].copy()
    return replace(
        case,
        q=case.q[rows, :t, :hq, :d].copy(),
        k=case.k[rows, :t, :kv_heads, :d].copy(),
        v=case.v[rows, :t, :kv_heads, :d].copy(),
        lambda_logits=gates,
        cotangent=case.cotangent[rows, :t, :out, :d].copy(),
    )


def _batch(case: Case, worst: tuple[int, ...]) -> tuple[int, ...]:
    """What every cut keeps: the batch of the worst element."""
    return (worst[0],) if worst else (0,)


def _cuts(case: Case, anchor: tuple[int, ...]) -> Cuts:
    """Every cut of ``case`` with its sizes, smallest first (T·D·Hkv, then T)."""
    _, t, _, hkv, d = (*case.q.shape[:3], case.k.shape[2], case.q.shape[3])
    sizes = [(tt, kv, dd) for tt in range(1, min(t, MAX_T) + 1) for kv in range(1, min(hkv, MAX_KV_HEADS) + 1) for dd in range(1, min(d, MAX_D) + 1)]
    sizes.sort(key=lambda size: (size[0] * size[1] * size[2], size[0]))
    return [({"B": 1, "T": tt, "Hq": kv * case.group, "Hkv": kv, "D": dd}, cut(case, anchor[0], tt, kv, dd)) for tt, kv, dd in sizes]


def _elements(case: Case) -> tuple[int, int]:
    """Sort key of a template: T·D·Hkv, then T."""
    return case.q.shape[1] * case.q.shape[3] * case.k.shape[2], case.q.shape[1]


SHRINKER = Shrinker(
    anchor=_batch,
    cuts=_cuts,
    size=_elements,
    outcome=suite.outcome,
    request=suite.request,
    positions=suite.gradient_positions,
    contract=suite.CONTRACTS,
    fixed=("B",),
)
