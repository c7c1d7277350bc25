"""What each DIFF V2 case must produce, and how far a correct answer may stray from it.

The truth comes from :mod:`grader.exercises.diffv2.oracle` (float64, no
torch); the allowance from the harness's rounding model
(:mod:`grader.toolkit.tolerance`): ``SAFETY·u·n·magnitude`` per element, with
``magnitude`` the oracle's absolute-value evaluation of the same formula and
``n`` the rounded operations on the longest path to the result. The counts
of this exercise (docs/diffv2.md, "Tolerances"):

* ``T + D + L`` for an attention output: the sums over keys (softmax
  normaliser, ``A·v``) and over features (``dA = dO·vᵀ``), and ``L``, the
  largest ``Σ_d |q_d k_d| / √D`` of the case, because ``exp`` turns a logit's
  absolute error ``L·u`` into a relative error of the weights;
* ``G·T`` instead of ``T`` for gradients: ``dk`` and ``dv`` sum over the
  ``T`` queries of each of the ``G`` query heads of a group;
* ``GATE`` more for everything that goes through ``σ(ℓ)``.

The gate's own magnitudes count ``1 − σ`` as ``1 + σ`` (its two terms): at
ℓ = 100 float32 has ``σ = 1`` and ``1 − σ = 0`` exactly, so the allowance of
``∂ℓ`` must follow the terms, not the ``e⁻¹⁰⁰``-sized result. A gate may
also be written ``1 − σ(−ℓ)``, whose subtraction loses σ's relative accuracy
for ℓ < 0: the gate counts as ``2 − σ`` (those terms), and the slope as the
larger of its two forms' terms, about 1 for every ℓ (``oracle.gate_magnitudes``). And float32
flushes a gate below its smallest normal number ``tiny`` to zero (torch's
``sigmoid(−89)`` is 0): the gate's output and gradient get ``SAFETY·tiny``
times the size of what the gate multiplies on top.
"""

from __future__ import annotations

import numpy as np

from grader.exercises.diffv2 import oracle
from grader.exercises.diffv2.cases import DIFF_V2, GQA, Case
from grader.toolkit import domain
from grader.toolkit.tolerance import SAFETY, Truth, allowance, per_case

GATE = 4.0  # the sigmoid's exp, addition and division, and the gated subtraction
TINY = {"float32": float(np.finfo(np.float32).tiny), "float64": float(np.finfo(np.float64).tiny)}


def _memo_key(case: Case) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """What a truth depends on: the arrays (by identity) and the numbers that decide it."""
    return (*case.inputs, case.cotangent), (case.function, case.dtype, case.is_causal)


def _logits_key(case: Case) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """What the largest logit depends on: q and k."""
    return (case.q, case.k), ()


@per_case(_logits_key)
def largest_logit(case: Case) -> float:
    """L: the largest Σ_d |q_d k_d| / √D over every query head, query and key of the case."""
    return float(oracle.logit_magnitude(case.q, case.k).max())


def operations(case: Case, gradients: bool = False) -> float:
    """n: the rounded operations on the longest path to an output (or, with ``gradients``, to a gradient)."""
    _, t, _, d = case.q.shape
    count = (case.group * t if gradients else t) + d + largest_logit(case)
    return count + (GATE if case.function == DIFF_V2 else 0.0)


def _gated(dtype: str, operations: float, magnitude: np.ndarray, underflow: np.ndarray) -> np.ndarray:
    """The allowance of a result through the gate: the rounding model's, plus SAFETY·tiny per unit of what the gate multiplies."""
    return allowance(dtype, operations, magnitude) + SAFETY * TINY[dtype] * underflow


@per_case(_memo_key, dtype=lambda case: case.dtype)
def output(case: Case) -> Truth:
    """The output of ``case``'s call and its allowance."""
    q, k, v = case.q, case.k, case.v
    if case.function == GQA:
        return Truth(oracle.gqa_attention(q, k, v, case.is_causal), allowance(case.dtype, operations(case), oracle.gqa_output_magnitude(q, k, v, case.is_causal)))
    assert case.lambda_logits is not None
    values = oracle.diff_v2_attention(q, k, v, case.lambda_logits, case.is_causal)
    magnitude = oracle.diff_v2_output_magnitude(q, k, v, case.lambda_logits, case.is_causal)
    odd = oracle.gqa_output_magnitude(q, k, v, case.is_causal)[:, :, 1::2]
    return Truth(values, _gated(case.dtype, operations(case), magnitude, odd))


def gradients(case: Case) -> dict[str, Truth]:
    """The gradients of <cotangent, output> with respect to every input of ``case``, with allowances; an expanded input's
    read at the tensor it expands (:func:`domain.read_where_expanded`); of a tensor passed for several inputs, at its first
    name (:func:`domain.merged_truths`)."""
    return domain.merged_truths(domain.read_where_expanded(_gradients(case), case.names, case.memory_layouts), case.one_object)


@per_case(_memo_key, dtype=lambda case: case.dtype)
def _gradients(case: Case) -> dict[str, Truth]:
    """The gradients of <cotangent, output> with respect to every input of ``case`` as laid out contiguously."""
    q, k, v, causal, cotangent = case.q, case.k, case.v, case.is_causal, case.cotangent
    n = operations(case, gradients=True)
    if case.function == GQA:
        exact, bound = oracle.gqa_vjp(q, k, v, causal, cotangent), oracle.gqa_vjp(q, k, v, causal, cotangent, absolute=True)
        return {name: Truth(exact[name], allowance(case.dtype, n, bound[name])) for name in case.names}
    assert case.lambda_logits is not None
    exact = oracle.diff_v2_vjp(q, k, v, case.lambda_logits, causal, cotangent)
    bound = oracle.diff_v2_vjp(q, k, v, case.lambda_logits, causal, cotangent, absolute=True)
    truths = {name: Truth(exact[name], allowance(case.dtype, n, bound[name])) for name in ("q", "k", "v")}
    odd = oracle.gqa_output_magnitude(q, k, v, causal)[:, :, 1::2]
    underflow = np.sum(np.abs(cotangent) * odd, axis=-1)
    truths["lambda_logits"] = Truth(exact["lambda_logits"], _gated(case.dtype, operations(case), bound["lambda_logits"], underflow))
    return truths


def offset_response(plain: Case, shifted: Case) -> Truth:
    """output(shifted) − output(plain) when ``shifted``'s values are ``plain``'s plus one vector c for every token.

    Rows of every signed map sum to 1 − σ(ℓ_t), so the difference is
    (1 − σ(ℓ[b,t,i]))·c for every token and head. The output is linear in
    the values, so the difference is computed exactly as the output of the
    value differences (c in every row, up to the rounding of v + c to the
    case's dtype). The allowance is the two outputs' together.
    """
    assert plain.lambda_logits is not None
    values = oracle.diff_v2_attention(plain.q, plain.k, shifted.v - plain.v, plain.lambda_logits, plain.is_causal)
    return Truth(values, output(plain).allowed + output(shifted).allowed)


def even_heads(case: Case) -> Truth:
    """Ordinary attention of the even query heads, with ``case``'s allowance: what the output tends to as ℓ → −∞.

    Pair i's even head 2i reads key/value head 2i // G; as a head of the even
    heads alone (a group of G / 2) it reads i // (G / 2), the same one.
    """
    values = oracle.gqa_attention(case.q[:, :, 0::2], case.k, case.v, case.is_causal)
    return Truth(values, output(case).allowed)

