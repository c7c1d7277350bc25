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
    queries = np.asarray(queries, dtype=np.longdouble).reshape(-1, t, d)
    keys = np.asarray(keys, dtype=np.longdouble).reshape(-1, s, d)
    scale = np.sqrt(np.longdouble(d))
    hidden = np.triu(np.ones((t, s), dtype=bool), 1) if causal else None
    maps = np.empty((len(queries), t, s), dtype=np.float64)
    for head, (query, key) in enumerate(zip(queries, keys)):
        logits = np.einsum("td,sd->ts", query, key) / scale
        if hidden is not None:
            logits[hidden] = -np.inf
        weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
        maps[head] = weights / weights.sum(axis=-1, keepdims=True)
    return maps.reshape(*lead, t, s)
