"""Attention maps for the exercises' vectorised oracles: numpy in extended precision, never torch.

The oracles evaluate small problems row by row in Python floats and large ones
with :func:`softmax_maps`, in ``numpy.longdouble`` (where it is x87 extended
precision, unit roundoff 2⁻⁶⁴, a sum of T terms errs by about T·2⁻⁶⁴
relative, 2¹¹ times less than in float64), rounded to float64 at the end.
One head at a time: the arrays of a whole case (32 heads of 285 × 285
longdouble logits are 42 MB each) cost more in fresh memory than in
arithmetic, while a head's fit in the processor's caches.
"""

from __future__ import annotations

import numpy as np


def softmax_maps(queries: np.ndarray, keys: np.ndarray, causal: bool) -> np.ndarray:
    """The maps softmax_s(q_t·k_s / √D + M[t, s]) of queries [..., T, D] and keys [..., S, D] with the same leading axes.

    Returns float64 [..., T, S]; with ``causal``, keys s > t get exactly 0.
    """
    *lead, t, d = np.shape(queries)
    s = np.shape(keys)[-2]
    queries = np.asarray(queries, dtype=np.longdouble).reshape(-1, t, d) / np.sqrt(np.longdouble(d))
    keys = np.asarray(keys, dtype=np.longdouble).reshape(-1, s, d)
    hidden = np.triu(np.ones((t, s), dtype=bool), 1) if causal else np.zeros((t, s), dtype=bool)
    maps = np.empty((len(queries), t, s), dtype=np.float64)
    for head, (query, key) in enumerate(zip(queries, keys)):
        logits = np.einsum("td,sd->ts", query, key)
        peak = np.where(hidden, -np.inf, logits).max(axis=-1, keepdims=True)
        weights = np.where(hidden, 0.0, _exp(logits - peak))
        maps[head] = weights / weights.sum(axis=-1, keepdims=True, dtype=np.longdouble)
    return maps.reshape(*lead, t, s)


def _exp(shifted: np.ndarray) -> np.ndarray:
    """exp of longdouble exponents in float64, to about two float64 ulps of each element.

    ``numpy.exp`` on longdouble costs 20 times its float64 vectorised version, and
    was most of the oracles' time. Each exponent is split as hi + lo, hi its
    float64 rounding and |lo| ≤ 2⁻⁵³·|hi|; exp(hi)·(1 + lo) then errs by
    exp(hi)'s own rounding, lo²/2 and the final rounding, each below a float64
    ulp: without lo, an exponent of -30 would err by 30 ulps. The error of each
    element stays its own: the sums over keys are made in longdouble. Exponents
    of hidden keys may be positive, and their weights infinite or NaN: the
    caller replaces them.
    """
    high = shifted.astype(np.float64)
    low = (shifted - high).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.exp(high)
        return exact + exact * low
