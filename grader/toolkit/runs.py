"""A case set's calls in the submission's worker: each made once per run, a set in one round trip.

Generic (added with the DIFF V2 exercise; the first exercise's suite.py still
has its own version of this): an exercise gives a :class:`Runner` its
request builder (case, with gradients -> :class:`~grader.core.invoke.Request`)
and its functions' contract signatures, and its checks, hints and
counterexample searches ask the runner for outcomes by case set object and
index. Several checks read the same calls (a contract check looks at the
types of the outputs whose values a value check compares): the first one
asked for sends every case of the set in one message (:func:`invoke_each`:
each request is still made, timed, differentiated and counted as if sent
alone), and the run's memo keeps the outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from grader.core.invoke import Argument, Call, Outcome, Request, invoke, invoke_each
from grader.core.plugin import GradingContext
from grader.toolkit import signatures, verdicts
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison
from grader.toolkit.tolerance import Truth

RequestOf = Callable[[Any, bool], Request]
"""(case, with gradients) -> the request that evaluates it."""


def bound_call(function: str, names: tuple[str, ...], values: tuple[Argument, ...], optional: str, given: Argument, binding: str,
               order: tuple[str, ...] = ()) -> Call:  # fmt: skip
    """A call of ``function`` with ``values`` for ``names`` and ``given`` for ``optional`` (None: left out), bound as ``binding`` says.

    ``binding`` is one of :data:`grader.toolkit.domain.BINDINGS`: "keyword"
    passes ``values`` by position and ``optional`` by name, "positional"
    passes everything by position, "names" everything by name in ``order``.
    """
    arguments = dict(zip(names, values))
    if given is not None:
        arguments[optional] = given
    if binding == "names":
        return Call(function, (), {name: arguments[name] for name in order if name in arguments})
    if binding == "positional":
        return Call(function, tuple(arguments.values()))
    return Call(function, tuple(values), {} if given is None else {optional: given})


@dataclass(frozen=True)
class Runner:
    """How an exercise's cases become worker requests, and the contract signatures of its functions."""

    request_of: RequestOf
    contracts: Mapping[str, signatures.Signature]

    def signature_problem(self, grading: GradingContext, function: str) -> str | None:
        """Why the submitted signature of ``function`` cannot take the grader's calls, or None (once per run)."""
        contract = self.contracts.get(function)
        parameters = grading.functions.get(function, {}).get("parameters")
        return None if contract is None else grading.memo(("signature", function), lambda: signatures.call_problem(contract, parameters))

    def order_problem(self, grading: GradingContext, function: str) -> str | None:
        """Which submitted parameter of ``function`` stands where its contract has another, or None."""
        contract = self.contracts.get(function)
        return None if contract is None else signatures.order_problem(contract, grading.functions.get(function, {}).get("parameters"))

    def request_outcome(self, grading: GradingContext, key: tuple[Any, ...], request: Request) -> Outcome:
        """The outcome of ``request``, made once per run for ``key``; a request needing a function the submission lacks is not sent."""
        notes = {}
        for call in request.calls:
            problem = verdicts.function_problem(grading, call.function)
            if problem is not None:
                return Outcome(failure=problem)
            note = self.signature_problem(grading, call.function)
            if note is not None:
                notes[call.function] = note
        worker = grading.worker
        if worker is None:
            return Outcome(failure=grading.load_failure or "the submission could not be run")
        found: Outcome = grading.memo(key, lambda: invoke(worker, request))
        found.notes = notes
        return found

    def prefetch(self, grading: GradingContext, case_set: CaseSet[Any], grads: bool) -> None:
        """Ask for every case of ``case_set`` in one worker round trip, once per run.

        A round trip costs both processes about 0.6 ms. After a failed round
        trip (a crash, a hang) the cases not run yet are asked for alone, as
        they would have been anyway. One round trip is for requests that call
        the same functions (see Worker.run_each).
        """
        done = ("prefetched", case_set.name, grads)
        if done in grading.cache or grading.worker is None:
            return
        grading.cache[done] = True
        wanted = [(i, self.request_of(case, grads)) for i, case in enumerate(case_set(grading.seed))]
        wanted = [(i, r) for i, r in wanted if (case_set.name, i, grads) not in grading.cache]
        functions = {tuple(sorted({c.function for c in r.calls})) for _, r in wanted}
        if len(wanted) < 2 or len(functions) != 1 or any(verdicts.function_problem(grading, f) for f in functions.pop()):
            return
        for (i, _), found in zip(wanted, invoke_each(grading.worker, [r for _, r in wanted])):
            grading.cache[(case_set.name, i, grads)] = found

    def outcome(self, grading: GradingContext, case_set: CaseSet[Any], index: int, case: Any, grads: bool = False) -> Outcome:
        """The outcome of case ``index`` of ``case_set`` (with gradients: its inputs require grad and a backward pass follows)."""
        self.prefetch(grading, case_set, grads)
        return self.request_outcome(grading, (case_set.name, index, grads), self.request_of(case, grads))

    def value_verdicts(self, grading: GradingContext, case_set: CaseSet[Any], truth: Callable[[Any], Truth], grads: bool = False) -> list[Comparison]:
        """The verdict on every case of ``case_set``: its last call's output against ``truth(case)``."""
        found = []
        for i, case in enumerate(case_set(grading.seed)):
            outcome = self.outcome(grading, case_set, i, case, grads)
            what = f"{case.function}({case.label(grads)})" + (" with inputs that require grad" if grads else "")
            found.append(verdicts.values_verdict(outcome, len(outcome.functions) - 1, what, truth(case)))
        return found
