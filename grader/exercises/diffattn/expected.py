"""What each case must produce, and how far a correct answer may stray from it.

Truth comes from :mod:`oracle` (float64, no torch). The allowance per element
follows the toolkit's rounding-error model (:mod:`grader.toolkit.tolerance`):
``SAFETY·u·n`` times the result's absolute-value evaluation. This module
counts the rounded operations ``n`` of each result: logits enter through
``exp``, so an absolute logit error of ``L·u`` becomes a relative error of the
same size, and ``L``, the largest ``Σ|q_d k_d|/√D``, joins ``n``. See
docs/tolerances.md for the derivation and the measured margins.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from grader.exercises.diffattn import oracle
from grader.exercises.diffattn.cases import AttentionCase, LambdaCase
from grader.toolkit import domain, tolerance
from grader.toolkit.tolerance import Truth

ATTENTION_INPUTS = ("q1", "k1", "q2", "k2", "value")
LAMBDA_INPUTS = ("q1", "k1", "q2", "k2")


def _identify(case: AttentionCase | LambdaCase) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """What a truth depends on: the input arrays (by identity) and the numbers that decide it."""
    if isinstance(case, LambdaCase):
        return case.vectors, (case.dtype, case.effective_init, case.upstream)
    return (*case.inputs, case.cotangent, case.lambda_case), (case.dtype, case.coefficient, case.is_causal, case.coefficient_kind)


_per_case = tolerance.per_case(_identify, dtype=lambda case: case.dtype)


def _lambda_operations(case: LambdaCase) -> float:
    """Rounding steps in lambda: the dot products, the exponentials (amplified by |exponent|)."""
    spread = sum(float(np.abs(q * k).sum()) for q, k in ((case.q1, case.k1), (case.q2, case.k2)))
    return case.q1.size + 4.0 + spread


@_per_case
def lambda_value(case: LambdaCase) -> Truth:
    """lambda for ``case`` and its allowance."""
    value = oracle.scalar_lambda(*case.vectors, case.effective_init)
    magnitude = oracle.lambda_magnitude(*case.vectors, case.effective_init)
    return Truth(np.asarray(value, dtype=np.float64), tolerance.allowance(case.dtype, _lambda_operations(case), magnitude))


def _lambda_vector_grads(case: LambdaCase, upstream: float, upstream_magnitude: float, operations: float) -> dict[str, Truth]:
    # The magnitude of a pair's gradients is |g|·(exp(q·k) + 1)·|other vector| (exp of the exact
    # exponent, as for the value): its own exponential, which each gradient is a multiple of,
    # and 1 for expm1(a) − expm1(b), whose backward is g·(expm1(x) + 1). Not the other pair's
    # exponential: a form that factors the larger one out (e^a·expm1(b − a), or
    # 2·exp((a+b)/2)·sinh((a−b)/2)) rebuilds the smaller pair's gradient from it, and its
    # rounding of e^a is all of a gradient e^(a − b) times smaller. The rounding of q·k,
    # amplified by exp, is in the operations (Σ|q⊙k|). exp(|q|·|k|) was no bound at all:
    # vacuous when Σ|q⊙k| is large, and past 709 an overflow in the grader.
    exact_grads = oracle.lambda_vjp(*case.vectors, upstream)
    first, second = (1.0 + math.exp(x) for x in oracle.lambda_exponents(*case.vectors))
    bounds = {name: upstream_magnitude * own * np.abs(np.asarray(other, dtype=np.float64))
              for name, own, other in zip(LAMBDA_INPUTS, (first, first, second, second), (case.k1, case.q1, case.k2, case.q2))}  # fmt: skip
    operations += _lambda_operations(case)
    return {name: Truth(exact_grads[name], tolerance.allowance(case.dtype, operations, bounds[name])) for name in LAMBDA_INPUTS}


@_per_case
def lambda_grads(case: LambdaCase) -> dict[str, Truth]:
    """Gradients of upstream·lambda with respect to q1, k1, q2, k2 (of a tensor passed for several of them, read at its first
    name: :func:`domain.merged_truths`)."""
    return domain.merged_truths(_lambda_vector_grads(case, case.upstream, abs(case.upstream), 0.0), case.one_object)


def coefficient_of(case: AttentionCase) -> float:
    """The exact coefficient: the case's own, or lambda computed from its vectors."""
    lam = case.lambda_case
    if lam is None:
        return case.coefficient
    return oracle.scalar_lambda(*lam.vectors, lam.effective_init)


# The coefficient's absolute-value evaluation counts |λ| + 2: O rearranged as (A1 − A2)V + (1 − λ)A2V has terms of
# 1 + |1 − λ| <= 2 + |λ| times A2V where O has |λ| times, and rounds at their size even for a λ near 0. A wrong
# coefficient is still off by its own size, far beyond an allowance of a few units of roundoff.
REARRANGED_COEFFICIENT = 2.0


@_per_case
def _attention_operations(case: AttentionCase) -> tuple[float, float]:
    """(rounding steps, coefficient magnitude) for an attention case."""
    _, _, t, d = case.q1.shape
    logits = max(float(oracle.logit_magnitude(q, k).max()) for q, k in ((case.q1, case.k1), (case.q2, case.k2)))
    operations = t + 2.0 * d + logits
    magnitude = abs(case.coefficient)
    lam = case.lambda_case
    if lam is not None:
        operations += _lambda_operations(lam)
        magnitude = oracle.lambda_magnitude(*lam.vectors, lam.effective_init)
    return operations, magnitude + REARRANGED_COEFFICIENT


def allowance(case: AttentionCase | LambdaCase, magnitude: np.ndarray | float, growth: float = 1.0) -> np.ndarray:
    """The allowance of any result of ``case`` whose absolute-value evaluation is ``magnitude``.

    The same rule as the checks' own; ``growth`` multiplies the operation count
    (for a formula whose logits are larger than the true ones).
    """
    operations = _lambda_operations(case) if isinstance(case, LambdaCase) else _attention_operations(case)[0]
    return tolerance.allowance(case.dtype, growth * operations, magnitude)


def coefficient_bound(case: AttentionCase) -> float:
    """|coefficient|, or lambda's absolute-value evaluation when differential_lambda computes it, plus REARRANGED_COEFFICIENT."""
    return _attention_operations(case)[1]


@_per_case
def attention_output(case: AttentionCase) -> Truth:
    """The output O = (A1 - λA2)V for ``case`` and its allowance."""
    operations, magnitude = _attention_operations(case)
    values = oracle.differential_attention(*case.inputs, coefficient_of(case), case.is_causal)
    bound = oracle.attention_output_magnitude(*case.inputs, magnitude, case.is_causal)
    return Truth(values, tolerance.allowance(case.dtype, operations, bound))


def attention_grads(case: AttentionCase) -> dict[str, Truth]:
    """Gradients of <cotangent, O> for every input (an expanded input's read at the tensor it expands:
    :func:`domain.read_where_expanded`; of a tensor passed for several inputs, at its first name: :func:`domain.merged_truths`);
    for a tensor or computed coefficient too (see :func:`_attention_grads`)."""
    return domain.merged_truths(domain.read_where_expanded(_attention_grads(case), ATTENTION_INPUTS, case.layouts), case.one_object)


@_per_case
def _attention_grads(case: AttentionCase) -> dict[str, Truth]:
    """Gradients of <cotangent, O> for every input as laid out contiguously; for a tensor or computed coefficient too.

    Keys: q1, k1, q2, k2, value, and "coefficient" when the coefficient is a
    tensor, or "lambda_q1" ... "lambda_k2" when it comes from differential_lambda.
    """
    operations, magnitude = _attention_operations(case)
    coefficient = coefficient_of(case)
    exact_grads = oracle.attention_vjp(*case.inputs, coefficient, case.is_causal, case.cotangent)
    bounds = oracle.attention_vjp(*case.inputs, magnitude, case.is_causal, np.abs(case.cotangent), absolute=True)
    truths = {
        name: Truth(np.asarray(exact_grads[name]), tolerance.allowance(case.dtype, operations, bounds[name]))
        for name in ATTENTION_INPUTS
    }
    b, h, t, _ = case.q1.shape
    summed = operations + b * h * t * t  # the coefficient's gradient sums B·H·T² products
    if case.lambda_case is not None:
        vector_grads = _lambda_vector_grads(
            case.lambda_case, float(exact_grads["coefficient"]), float(bounds["coefficient"]), summed
        )
        truths.update({f"lambda_{name}": truth for name, truth in vector_grads.items()})
    elif case.coefficient_is_tensor:
        truths["coefficient"] = Truth(
            np.asarray(exact_grads["coefficient"], dtype=np.float64), tolerance.allowance(case.dtype, summed, bounds["coefficient"])
        )
    return truths


def shared_offset_difference(plain: AttentionCase, shifted: AttentionCase) -> Truth:
    """output(shifted) - output(plain), when every token's value in ``shifted`` is shifted by one vector c: (1 - λ)·c in every row."""
    offset = shifted.value - plain.value
    allowed = attention_output(plain).allowed + attention_output(shifted).allowed
    return Truth((1.0 - plain.coefficient) * offset, allowed)


@_per_case
def branch_one_output(case: AttentionCase) -> Truth:
    """With λ = 0 the result is ordinary softmax attention of the first branch."""
    return Truth(oracle.attention_maps(case.q1, case.k1, case.is_causal) @ case.value, attention_output(case).allowed)


@_per_case
def identical_maps_output(case: AttentionCase) -> Truth:
    """Identical maps give (1 - λ)·A1·V: exactly 0 at λ = 1."""
    values = (1.0 - case.coefficient) * (oracle.attention_maps(case.q1, case.k1, case.is_causal) @ case.value)
    return Truth(values, attention_output(case).allowed)


def case_value(case: AttentionCase | LambdaCase) -> Truth:
    """The value of either kind of case."""
    return lambda_value(case) if isinstance(case, LambdaCase) else attention_output(case)


def case_grads(case: AttentionCase | LambdaCase) -> dict[str, Truth]:
    """The gradients of either kind of case."""
    return lambda_grads(case) if isinstance(case, LambdaCase) else attention_grads(case)
