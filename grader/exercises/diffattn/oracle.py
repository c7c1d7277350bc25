"""The grader's independent truth for the differential-attention exercise.

Everything a submission is compared against is computed here, in float64, with
numpy and the standard library only. The module never imports torch, so a
submission cannot influence it by patching torch, and a bug shared by torch and
a submission cannot hide behind agreement between the two. The forward values
of small problems are evaluated in plain Python floats with ``math.fsum`` (a
correctly rounded sum); problems too large for that (long sequences, wide
heads) use the same formulas vectorised with numpy in extended precision
(``numpy.longdouble``; float64 for the truth of a float32 call, see
grader.toolkit.softmax), whose error is just as far below any tolerance the
grader uses. The project's tests hold the two against each other. The
gradients follow hand-derived formulas and are vectorised with numpy.

The ``*_magnitude`` functions evaluate the same formulas with every operand
replaced by its absolute value. The result bounds the true value elementwise
and is the scale that rounding errors are proportional to, which is how the
grader sizes its tolerances.

Shapes: ``q1, k1, q2, k2`` are [B, H, T, D], ``value`` is [B, H, T, 2D] and the
output, like its cotangent, is [B, H, T, 2D]. A causal mask hides keys j > i
from query i.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable

import numpy as np

from grader.toolkit.softmax import arithmetic, recent_maps, softmax_maps


def _dot(a: Iterable[float], b: Iterable[float]) -> float:
    """Correctly rounded sum of the elementwise products of ``a`` and ``b``."""
    return math.fsum(map(operator.mul, a, b))


def _per_head(fn: Callable[..., list[list[float]]], *arrays: np.ndarray) -> np.ndarray:
    """Apply ``fn`` to the nested-list [T, ...] slices of every (batch, head) pair."""
    nested = (np.asarray(array, dtype=np.float64).tolist() for array in arrays)
    return np.array(
        [[fn(*heads) for heads in zip(*batches)] for batches in zip(*nested)], dtype=np.float64
    )


def _attention_row(query: list[float], keys: list[list[float]], n_visible: int) -> list[float]:
    """One softmax row over the first ``n_visible`` keys; the masked rest are exactly 0.0."""
    scale = math.sqrt(len(query))
    logits = [_dot(query, key) / scale for key in keys[:n_visible]]
    peak = max(logits)
    weights = [math.exp(logit - peak) for logit in logits]
    total = math.fsum(weights)
    return [weight / total for weight in weights] + [0.0] * (len(keys) - n_visible)


def lambda_exponents(
    q1: np.ndarray, k1: np.ndarray, q2: np.ndarray, k2: np.ndarray
) -> tuple[float, float]:
    """Return the exponents (q1·k1, q2·k2) of the lambda parameterisation as fsum dot products."""
    return _dot(q1, k1), _dot(q2, k2)


def scalar_lambda(
    q1: np.ndarray, k1: np.ndarray, q2: np.ndarray, k2: np.ndarray, lambda_init: float
) -> float:
    """Return lambda = exp(q1·k1) - exp(q2·k2) + lambda_init."""
    x1, x2 = lambda_exponents(q1, k1, q2, k2)
    return math.exp(x1) - math.exp(x2) + lambda_init


def lambda_vjp(
    q1: np.ndarray, k1: np.ndarray, q2: np.ndarray, k2: np.ndarray, upstream: float
) -> dict[str, np.ndarray]:
    """Return the gradients of ``upstream * lambda`` with respect to q1, k1, q2 and k2."""
    x1, x2 = lambda_exponents(q1, k1, q2, k2)
    g1, g2 = upstream * math.exp(x1), -upstream * math.exp(x2)
    q1, k1, q2, k2 = (np.asarray(v, dtype=np.float64) for v in (q1, k1, q2, k2))
    return {"q1": g1 * k1, "k1": g1 * q1, "q2": g2 * k2, "k2": g2 * q2}


def lambda_magnitude(
    q1: np.ndarray, k1: np.ndarray, q2: np.ndarray, k2: np.ndarray, lambda_init: float
) -> float:
    """Return exp(q1·k1) + exp(q2·k2) + |lambda_init|, the absolute-value evaluation of lambda."""
    x1, x2 = lambda_exponents(q1, k1, q2, k2)
    return math.exp(x1) + math.exp(x2) + abs(lambda_init)


SCALAR_LIMIT = 40_000  # B·H·T²·D up to which the maps are computed in Python floats (about 0.1 s)


def attention_maps(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """Return the [B, H, T, T] softmax maps softmax(q kᵀ / sqrt(D) + mask).

    Row by row in Python floats (:func:`scalar_attention_maps`) while the
    problem is small, vectorised in extended precision
    (:func:`vectorised_attention_maps`) beyond :data:`SCALAR_LIMIT`; the last
    few kept (grader.toolkit.softmax.recent_maps).
    """
    b, h, t, d = np.shape(q)
    small = b * h * t * t * d <= SCALAR_LIMIT
    return recent_maps(q, k, causal, lambda: scalar_attention_maps(q, k, causal) if small else vectorised_attention_maps(q, k, causal))


def scalar_attention_maps(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """The maps of :func:`attention_maps`, row by row in Python floats with correctly rounded sums."""
    n_keys = np.shape(k)[2]
    return _per_head(
        lambda queries, keys: [
            _attention_row(query, keys, i + 1 if causal else n_keys)
            for i, query in enumerate(queries)
        ],
        q,
        k,
    )


def vectorised_attention_maps(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """The maps of :func:`attention_maps`, vectorised in ``numpy.longdouble`` and rounded to float64 at the end (grader.toolkit.softmax)."""
    return softmax_maps(q, k, causal)


def differential_attention(
    q1: np.ndarray, k1: np.ndarray, q2: np.ndarray, k2: np.ndarray, value: np.ndarray, coefficient: float, causal: bool
) -> np.ndarray:
    """Return O = (A1 - coefficient * A2) V, [B, H, T, 2D]: each element an fsum over keys, or a longdouble sum for large problems."""
    mixed = attention_maps(q1, k1, causal) - coefficient * attention_maps(q2, k2, causal)
    b, h, t, d = np.shape(q1)
    if b * h * t * t * d > SCALAR_LIMIT:
        work = arithmetic()
        return np.einsum("bhij,bhjc->bhic", mixed.astype(work), np.asarray(value, dtype=work)).astype(np.float64)
    return _per_head(
        lambda p, v: [[_dot(p_row, column) for column in zip(*v)] for p_row in p], mixed, value
    )


def attention_vjp(
    q1: np.ndarray, k1: np.ndarray, q2: np.ndarray, k2: np.ndarray, value: np.ndarray, coefficient: float, causal: bool,
    cotangent: np.ndarray, *, absolute: bool = False,
) -> dict[str, np.ndarray | float]:  # fmt: skip
    """Return the gradients of <cotangent, O>: q1, k1, q2, k2, value (arrays) and coefficient (float).

    With ``absolute=True``, the same backward pass evaluated with absolute
    values (the softmax backward becomes A ⊙ (|dA| + rowsum(|dA| ⊙ A))): an
    elementwise bound on the true gradients' magnitudes, same keys.
    """
    a1, a2 = attention_maps(q1, k1, causal), attention_maps(q2, k2, causal)
    q1, k1, q2, k2, value, cotangent = (
        np.asarray(v, dtype=np.float64) for v in (q1, k1, q2, k2, value, cotangent)
    )
    # Every minus sign of the true backward pass becomes a plus in the
    # absolute-value evaluation (with |operands|), so one sign covers both.
    sign = -1.0
    if absolute:
        q1, k1, q2, k2, value, cotangent = map(np.abs, (q1, k1, q2, k2, value, cotangent))
        coefficient, sign = abs(coefficient), 1.0
    scale = math.sqrt(q1.shape[-1])
    d_p = cotangent @ np.swapaxes(value, -1, -2)
    grads: dict[str, np.ndarray | float] = {}
    for suffix, q, k, a, d_a in (("1", q1, k1, a1, d_p), ("2", q2, k2, a2, sign * coefficient * d_p)):
        d_s = a * (d_a + sign * np.sum(d_a * a, axis=-1, keepdims=True))
        grads["q" + suffix] = d_s @ k / scale
        grads["k" + suffix] = np.swapaxes(d_s, -1, -2) @ q / scale
    grads["value"] = np.swapaxes(a1 + sign * coefficient * a2, -1, -2) @ cotangent
    if absolute:  # values centred over the tokens (see attention_output_magnitude): every key's gradient rounds at their mean
        weights = a1 + coefficient * a2
        grads["value"] = grads["value"] + (weights.sum(axis=-1, keepdims=True) * cotangent).mean(axis=-2, keepdims=True)
    grads["coefficient"] = sign * math.fsum((a2 * d_p).ravel().tolist())
    return grads



def logit_magnitude(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Return [B, H, T]: per query, the max over all keys (masked or not) of sum_d |q_d k_d| / sqrt(D)."""
    q, k = np.abs(np.asarray(q, dtype=np.float64)), np.abs(np.asarray(k, dtype=np.float64))
    return (q @ np.swapaxes(k, -1, -2)).max(axis=-1) / math.sqrt(q.shape[-1])


def attention_output_magnitude(
    q1: np.ndarray, k1: np.ndarray, q2: np.ndarray, k2: np.ndarray, value: np.ndarray, coefficient: float, causal: bool
) -> np.ndarray:
    """Return [B, H, T, 2D] sum_k (A1_ik + |coefficient| A2_ik) (|V_kc| + max_s |V_sc|), the absolute-value evaluation of O
    written as A (V − m) + (Σ_k A_ik) m for a shift m of the values over the tokens (their mean, say): a correct formula
    that rounds at the size of m, which may come from keys the mask hides."""
    weights = attention_maps(q1, k1, causal) + abs(coefficient) * attention_maps(q2, k2, causal)
    magnitude = np.abs(np.asarray(value, dtype=np.float64))
    return weights @ magnitude + weights.sum(axis=-1, keepdims=True) * magnitude.max(axis=-2, keepdims=True)
