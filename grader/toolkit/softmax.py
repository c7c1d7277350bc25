"""Attention maps for the exercises' vectorised oracles: numpy in extended precision, never torch.

The oracles evaluate small problems row by row in Python floats and large ones
with :func:`softmax_maps`, in ``numpy.longdouble`` (where it is x87 extended
precision, unit roundoff 2⁻⁶⁴, a sum of T terms errs by about T·2⁻⁶⁴
relative, 2¹¹ times less than in float64), rounded to float64 at the end.
One head at a time: the arrays of a whole case (32 heads of 285 × 285
longdouble logits are 42 MB each) cost more in fresh memory than in
arithmetic, while a head's fit in the processor's caches.

The truth of a float32 call needs less: float64 arithmetic errs by about
T·2⁻⁵³ relative, below float32's unit roundoff 2⁻²⁴ by a factor of 2²⁹ / T,
more than 10⁵ at every length a check uses, and costs a tenth of longdouble's
(a causal map of 2,060 tokens: 0.1 s against 1.2 s). :func:`arithmetic_for`
chooses it for the computations of one call's truth (a context variable, so
that the oracles' signatures stay those of the maths and threads that compute
truths side by side do not share it).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

# The arithmetic of the vectorised paths for the inputs' dtype (see the module's docstring).
ARITHMETIC: dict[str, type[np.floating[Any]]] = {"float64": np.longdouble, "float32": np.float64}
_arithmetic: contextvars.ContextVar[type[np.floating[Any]]] = contextvars.ContextVar("arithmetic", default=np.longdouble)


@contextlib.contextmanager
def computed_in(work: type[np.floating[Any]]) -> Iterator[None]:
    """Within the block, vectorised maps and sums are computed in ``work`` (longdouble outside any block)."""
    token = _arithmetic.set(work)
    try:
        yield
    finally:
        _arithmetic.reset(token)


def arithmetic_for(dtype: str) -> contextlib.AbstractContextManager[None]:
    """:func:`computed_in` the arithmetic :data:`ARITHMETIC` gives inputs of ``dtype``: extended precision for float64
    ones, float64 for float32 ones."""
    return computed_in(ARITHMETIC[dtype])


def arithmetic() -> type[np.floating[Any]]:
    """The numpy type the vectorised paths compute in here (see :func:`arithmetic_for`)."""
    return _arithmetic.get()


_recent: dict[tuple[int, int, bool, type], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def recent_maps(q: np.ndarray, k: np.ndarray, causal: bool, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """``compute()``, the maps of ``q`` and ``k``, kept for the last few pairs (by identity, mask and arithmetic): a case's
    value, its bound and both gradient passes ask for the same maps. The maps returned are read-only."""
    key = (id(q), id(k), causal, arithmetic())
    found = _recent.get(key)
    if found is not None and found[0] is q and found[1] is k:
        return found[2]
    maps = compute()
    maps.flags.writeable = False
    if len(_recent) >= 16:
        _recent.clear()
    _recent[key] = (q, k, maps)
    return maps


def softmax_maps(queries: np.ndarray, keys: np.ndarray, causal: bool) -> np.ndarray:
    """The maps softmax_s(q_t·k_s / √D + M[t, s]) of queries [..., T, D] and keys [..., S, D] with the same leading axes.

    Returns float64 [..., T, S]; with ``causal``, keys s > t get exactly 0. Computed in :func:`arithmetic`.
    """
    *lead, t, d = np.shape(queries)
    s = np.shape(keys)[-2]
    work = arithmetic()
    queries = np.asarray(queries, dtype=work).reshape(-1, t, d) / np.sqrt(work(d))
    keys = np.asarray(keys, dtype=work).reshape(-1, s, d)
    hidden = np.triu(np.ones((t, s), dtype=bool), 1) if causal else np.zeros((t, s), dtype=bool)
    maps = np.empty((len(queries), t, s), dtype=np.float64)
    for head, (query, key) in enumerate(zip(queries, keys)):
        logits = np.einsum("td,sd->ts", query, key)
        peak = np.where(hidden, -np.inf, logits).max(axis=-1, keepdims=True)
        weights = np.where(hidden, 0.0, _exp(logits - peak))
        maps[head] = weights / weights.sum(axis=-1, keepdims=True, dtype=work)
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
    caller replaces them. Float64 exponents are simply exponentiated.
    """
    if shifted.dtype == np.float64:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.exp(shifted)
    high = shifted.astype(np.float64)
    low = (shifted - high).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.exp(high)
        return exact + exact * low
