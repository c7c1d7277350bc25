"""The rounding-error model that sizes every tolerance, and the per-case memo that keeps truths once per process.

A result computed in a format with unit roundoff ``u`` from ``n`` rounded
operations is within ``n·u`` times its absolute-value evaluation (the same
formula with every operand replaced by its magnitude). An exercise supplies,
for each result, the operation count ``n`` (quantities amplified on the way
join it: a logit's absolute error ``L·u`` becomes, through ``exp``, a relative
error of the same size, so the largest logit ``L`` is added to ``n``) and the
absolute-value evaluation from its oracle; :func:`allowance` turns them into
the absolute error allowed per element, with a safety factor for the
constants the model leaves out. docs/tolerances.md has the derivation and the
measured margins.

Case sets are drawn once per seed and process (:mod:`grader.toolkit.casesets`),
so one case object stands for one case for the whole process. :func:`remember`
and :func:`per_case` key results by the identity of the objects they depend
on: the oracle's truths, a variant's predictions and a case's counterexample
cuts are computed once, however many submissions a batch grades.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import numpy as np

from grader.toolkit import softmax

SAFETY = 16.0
"""Multiplies every allowance: the constants the rounding model leaves out."""
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
"""u per dtype: half the gap between 1 and the next number of the format."""
FLOOR_SHARE = 2.0**-10
"""The smallest allowance of an element, as a share of the largest allowance of its result: n/64 roundings of the largest
element (the largest allowance is SAFETY·n of them), above the rounding that a term cancelling exactly leaves on elements
near 0."""

_Case = TypeVar("_Case")
_Result = TypeVar("_Result")
Memo = dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]]
"""A store of :func:`remember`: key -> (the objects the key was made of, the result)."""
Identify = Callable[[Any], tuple[tuple[Any, ...], tuple[Any, ...]]]
"""Case -> (the objects its result depends on, compared by identity; the hashable values it depends on)."""

_PER_CASE: Memo = {}


@dataclass(frozen=True)
class Truth:
    """The exact value of a result and the absolute error allowed per element."""

    values: np.ndarray  # a scalar result (lambda, a coefficient's gradient) is a 0-dim array
    allowed: np.ndarray


def allowance(dtype: str, operations: float, magnitude: np.ndarray | float) -> np.ndarray:
    """SAFETY·u·n·magnitude per element (u of ``dtype``, n = ``operations``), never below :data:`FLOOR_SHARE` of that bound's
    largest value.

    ``magnitude`` is the result's absolute-value evaluation: it bounds the
    rounding of the formula as written. The floor covers elements whose every
    term underflowed (a softmax weight below the format's smallest normal
    number is flushed towards zero), and a correct formula written otherwise,
    whose rounding comes from terms that cancel exactly (keys centred over the
    tokens: each row's logits move by one constant, which the softmax removes,
    so its gradient cancels too, to the rounding of the largest gradients). A
    magnitude past float64's range (two exponentials each within it, summed)
    counts as the largest float64: no allowance is infinite, which would accept
    anything.
    """
    unit = UNIT_ROUNDOFF[dtype]
    bound = SAFETY * unit * operations * np.minimum(np.asarray(magnitude, dtype=np.float64), np.finfo(np.float64).max)
    return np.maximum(bound, FLOOR_SHARE * bound.max(initial=0.0))


def remember(store: Memo, objects: tuple[Any, ...], compute: Callable[[], _Result], values: tuple[Any, ...] = ()) -> _Result:
    """``compute()`` once per tuple of ``objects`` (by identity) and of hashable ``values`` (by value) in ``store``.

    The objects are kept in the store with the result, so that their ids stay
    theirs. Case sets are drawn once per seed, so one case object stands for
    one case for the whole process: a batch fills the stores once. A single
    run computes the truths in a thread while its checks run (grader.core.session):
    a thread that asks for a result another thread is computing waits for it
    instead of computing it again. A computation that raises stores nothing,
    and whoever waited computes it in turn (and meets the error itself).
    """
    key = (*map(id, objects), *values)
    found = _kept(store, key, objects)
    return found[1] if found is not None else _computed_once(store, key, objects, compute)


def _kept(store: Memo, key: tuple[Any, ...], objects: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any] | None:
    """The entry of ``key`` if it was made of ``objects`` themselves (an id may have been reused since)."""
    found = store.get(key)
    return found if found is not None and all(kept is given for kept, given in zip(found[0], objects)) else None


def _computed_once(store: Memo, key: tuple[Any, ...], objects: tuple[Any, ...], compute: Callable[[], _Result]) -> _Result:
    """Compute and store the entry of ``key``, or wait for the other thread that is computing it.

    A computation that asks for its own key again, in its own thread, computes
    it again (as it would without threads) instead of waiting for itself.
    """
    me = threading.get_ident()
    while True:
        with _COMPUTING_LOCK:
            found = _kept(store, key, objects)  # (stored since the caller looked)
            if found is not None:
                return found[1]
            busy = _COMPUTING.get((id(store), key))
            if busy is None:
                done = _COMPUTING[(id(store), key)] = (me, threading.Event())
                break
        if busy[0] == me:
            return compute()
        busy[1].wait()
    try:
        result = compute()
        store[key] = (objects, result)
        return result
    finally:
        with _COMPUTING_LOCK:
            del _COMPUTING[(id(store), key)]
        done[1].set()


# (store, key) -> the thread computing it, and the event set when it is done
_COMPUTING: dict[tuple[int, tuple[Any, ...]], tuple[int, threading.Event]] = {}
_COMPUTING_LOCK = threading.Lock()


def per_case(identify: Identify, dtype: Callable[[Any], str] | None = None) -> Callable[[Callable[[_Case], _Result]], Callable[[_Case], _Result]]:
    """A decorator that computes a function of a case once per set of input arrays and numbers that decide it.

    ``identify(case)`` gives the arrays the result depends on (compared by
    identity) and the numbers that decide it (by value). Cases that differ
    only in what the result does not depend on (which inputs require grad,
    how arguments are bound, the autograd mode, the layout) and share their
    arrays, as ``dataclasses.replace`` makes them, share one result. With
    ``dtype``, the function runs in the oracles' arithmetic for a call in
    ``dtype(case)`` (grader.toolkit.softmax.arithmetic_for); that dtype must be
    among the numbers ``identify`` gives.
    """

    def decorate(function: Callable[[_Case], _Result]) -> Callable[[_Case], _Result]:
        def computed(case: _Case) -> _Result:
            if dtype is None:
                return function(case)
            with softmax.arithmetic_for(dtype(case)):
                return function(case)

        @functools.wraps(function)
        def cached(case: _Case) -> _Result:
            objects, values = identify(case)
            return remember(_PER_CASE, (function, *objects), lambda: computed(case), values)

        return cached

    return decorate
