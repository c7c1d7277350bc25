"""Case sets as registered objects: a name, whether students may see its inputs, and how it is drawn.

A check, a hint, a counterexample search and the handout all refer to a case
set by the object (``suite.attention_causal``), never by a string looked up
at run time. The set's name is what its generator is seeded with
(:func:`grader.toolkit.domain.generator`), the key of its outcomes in a run's
memo and of its calls in the handout, so each exercise keeps a registry
(:class:`CaseSets`) that refuses a name twice.

A set is drawn once per seed and process: the same case objects then key the
oracle's cached truths (:func:`grader.toolkit.tolerance.per_case`), which a
batch computes once before it forks.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from grader.core.invoke import Outcome
from grader.core.plugin import GradingContext

_Case = TypeVar("_Case")
_Case_co = TypeVar("_Case_co", covariant=True)
_Drawn = TypeVar("_Drawn")
Draw = Callable[[int], list[_Case]]
"""Seed -> the cases of a set."""


@dataclass(frozen=True, eq=False)
class CaseSet(Generic[_Case_co]):
    """A named, seeded list of cases; ``hidden`` sets' inputs never reach students (the handout leaves them out).

    A set of one kind of case is a set of any wider kind (``CaseSet`` is covariant): its draw only gives cases.
    """

    name: str
    draw: Callable[[int], list[_Case_co]] = field(repr=False)
    hidden: bool = False

    def __call__(self, seed: int) -> list[_Case_co]:
        """The cases drawn for ``seed`` (the same list, and case objects, on every call in the process)."""
        return self.draw(seed)


def drawn_once(draw: Callable[[int], _Drawn]) -> Callable[[int], _Drawn]:
    """``draw`` (seed -> case objects) called once per seed for the last four seeds, also when two threads ask at once.

    A single run computes the truths in a thread while its checks run: both
    must get the same case objects, which key the truths.
    """
    cached = functools.lru_cache(maxsize=4)(draw)
    lock = threading.RLock()

    @functools.wraps(draw)
    def drawn(seed: int) -> _Drawn:
        with lock:
            return cached(seed)

    return drawn


OutcomeOf = Callable[[GradingContext, CaseSet[Any], int, Any, bool], Outcome]
"""(grading, case set, index, case, with gradients) -> the run's memoised outcome of that case of the set."""


class CaseSets:
    """One exercise's case sets, in the order they were registered, each name once."""

    def __init__(self) -> None:
        self._sets: dict[str, CaseSet[Any]] = {}

    @overload
    def register(self, draw: Draw[_Case], *, hidden: bool = False) -> CaseSet[_Case]: ...

    @overload
    def register(self, draw: None = None, *, hidden: bool = False) -> Callable[[Draw[_Case]], CaseSet[_Case]]: ...

    def register(self, draw: Draw[_Case] | None = None, *, hidden: bool = False) -> CaseSet[_Case] | Callable[[Draw[_Case]], CaseSet[_Case]]:
        """Decorate a draw function (seed -> cases) to make it a case set named after it, drawn once per seed.

        ``@sets.register`` or ``@sets.register(hidden=True)``.
        """

        def make(function: Draw[_Case]) -> CaseSet[_Case]:
            name = function.__name__
            if name in self._sets:
                raise ValueError(f"a case set named {name!r} is already registered")
            found: CaseSet[_Case] = CaseSet(name, drawn_once(function), hidden)
            self._sets[name] = found
            return found

        return make if draw is None else make(draw)

    def __iter__(self) -> Iterator[CaseSet[Any]]:
        """Every registered set, in the order of registration."""
        return iter(self._sets.values())
