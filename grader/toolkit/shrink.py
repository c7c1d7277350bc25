"""Shrunk counterexamples: the smallest cut of a failing input that still fails.

When a value or gradient check fails because numbers came back wrong, the
failing case with the fewest elements (by the exercise's order) becomes the
template. The exercise cuts it down (:class:`Shrinker`): to the part of it
that holds its worst element (for attention, that element's batch and head)
and to every smaller size it allows, smallest first. A cut keeps everything
else of the template (dtype, how arguments are passed, layouts, frozen
inputs, the cotangent cut the same way), so the candidates follow from the
run's seed alone and need no new randomness.

All cuts of a template go to the worker in diagnostic round trips
(:func:`grader.core.invoke.invoke_many`), the smallest few first; a failed
one is not retried and ends the searches of the run. The cuts are judged
against the truth with the check's own tolerances. The first failing cut is
recorded with ``grading.explain(counterexample=...)``; docs/report-schema.md
describes the record. Nothing here changes a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from grader.core.invoke import Outcome, Request, ResultOf, TensorInput, invoke_many
from grader.core.plugin import GradingContext
from grader.toolkit.casesets import CaseSet, OutcomeOf
from grader.toolkit.compare import Comparison, error_ratios
from grader.toolkit.signatures import Signature
from grader.toolkit.tolerance import Memo, Truth, remember
from grader.toolkit.verdicts import tensor_result

FIRST_STAGE = 3
"""Cuts in the first diagnostic request: the three smallest. Most bugs show on them; the others are asked for only if none fails."""
GAVE_UP = ("counterexample", "gave up")
"""Cache key set once an extra round trip failed: no further search in the run, so a hang costs one timeout."""
Cuts = list[tuple[dict[str, int], Any]]
"""Cuts of a case, smallest first: (its sizes by name, e.g. {"T": 2, "D": 1}, the cut case)."""


@dataclass(frozen=True)
class Failure:
    """One result outside its tolerance: which result, what came back, the truth, the worst element."""

    with_respect_to: str | None  # None for the output, else the input whose gradient this is
    got: np.ndarray
    truth: Truth
    worst: tuple[int, ...]


Judgement = Union[Failure, str, None]
"""A Failure; a sentence saying why the values could not be compared; or None (within tolerance)."""
Judge = Callable[[Any, Outcome], Judgement]
"""(case, its outcome) -> the judgement of a check on it."""

_CUTS: Memo = {}


def first_failing(judgements: Sequence[Judgement]) -> tuple[int, Failure] | None:
    """The first judgement that is a failure, with its position (candidates come smallest first), or None."""
    return next(((i, judged) for i, judged in enumerate(judgements) if isinstance(judged, Failure)), None)


def _exceeds(with_respect_to: str | None, got: np.ndarray, truth: Truth) -> Judgement:
    """A Failure when ``got`` has the truth's shape and some element is outside its allowance."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != truth.values.shape:
        what = "output" if with_respect_to is None else f"gradient with respect to {with_respect_to}"
        return f"the {what} has shape {list(got.shape)}, not {list(truth.values.shape)}"
    ratio = error_ratios(got, truth.values, np.broadcast_to(truth.allowed, got.shape))[1]
    if not (ratio > 1.0).any():
        return None
    return Failure(with_respect_to, got, truth, tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape)))


def output_failure(outcome: Outcome, truth: Truth) -> Judgement:
    """Judge the last call's output against ``truth``."""
    result, problem = tensor_result(outcome, len(outcome.functions) - 1)
    if result is None or result.value is None:
        return problem or "the output's values could not be read"
    return _exceeds(None, result.value, truth)


def gradient_failure(outcome: Outcome, truths: dict[str, Truth], keys: dict[str, int]) -> Judgement:
    """Judge the gradients of ``keys`` (name -> input tensor position); the first one outside tolerance fails."""
    result, problem = tensor_result(outcome, len(outcome.functions) - 1)
    if result is None:
        return problem
    if outcome.backward_error is not None:
        return f"the backward pass failed: {outcome.backward_error}"
    reasons = []
    for key, position in keys.items():
        grad = outcome.grads.get(position)
        if grad is None:
            if (truths[key].values != 0).any():
                reasons.append(f"no gradient reached {key}")
            continue
        judged = _exceeds(key, grad, truths[key])
        if isinstance(judged, Failure):
            return judged
        if judged is not None:
            reasons.append(judged)
    return "; ".join(reasons) or None


def plain(values: Any) -> Any:
    """Values as nested lists of Python floats (a bare float for 0-dim), non-finite ones as None."""
    array = np.asarray(values, dtype=np.float64)
    found = array.astype(object)
    found[~np.isfinite(array)] = None
    return found.tolist()


@dataclass(frozen=True)
class Shrinker:
    """How an exercise's failing cases are cut down, asked for again and written back.

    ``anchor(case, worst)`` is what every cut of a template keeps, given its
    worst element's index (for attention, that element's batch and head);
    ``cuts(case, anchor)`` lists the cuts, smallest first (computed once per
    case and anchor in the process); ``size(case)`` orders the failing cases,
    the smallest becoming the template. ``outcome`` is the run's memoised
    outcome of a case of a set, ``request`` the request that evaluates a
    case, ``positions`` the input numbers of a case's gradients by name.
    ``contract`` names the arguments of the call the record shows; tensors of
    an earlier call of the same request (one call's result feeding another)
    are named with ``prefixes[function]`` (default ``function_``) before
    their parameter's name. ``fixed`` are the sizes every cut has at 1, which
    the note of a search that found nothing leaves out.
    """

    anchor: Callable[[Any, tuple[int, ...]], tuple[int, ...]]
    cuts: Callable[[Any, tuple[int, ...]], Cuts]
    size: Callable[[Any], tuple[int, ...]]
    outcome: OutcomeOf
    request: Callable[[Any, bool], Request]
    positions: Callable[[Any], dict[str, int]]
    contract: Mapping[str, Signature]
    prefixes: Mapping[str, str] = field(default_factory=dict)
    fixed: tuple[str, ...] = ()

    def values(self, grading: GradingContext, case_set: CaseSet[Any], verdicts: Sequence[Comparison], truth: Callable[[Any], Truth]) -> None:
        """Attach the counterexample of a failed value check over ``case_set`` (its per-case ``verdicts``), outputs against ``truth(case)``."""

        def judge(case: Any, outcome: Outcome) -> Judgement:
            return output_failure(outcome, truth(case))

        self.search(grading, case_set, verdicts, judge, grads=False)

    def gradients(
        self, grading: GradingContext, case_set: CaseSet[Any], verdicts: Sequence[Comparison],
        truths: Callable[[Any], dict[str, Truth]], keys: tuple[str, ...] | None = None,
    ) -> None:  # fmt: skip
        """Attach the counterexample of a failed gradient check over ``case_set`` of the gradients named ``keys`` (None: every one requested)."""

        def judge(case: Any, outcome: Outcome) -> Judgement:
            wanted = {name: position for name, position in self.positions(case).items() if keys is None or name in keys}
            return gradient_failure(outcome, truths(case), wanted)

        self.search(grading, case_set, verdicts, judge, grads=True)

    def search(self, grading: GradingContext, case_set: CaseSet[Any], verdicts: Sequence[Comparison], judge: Judge, grads: bool) -> None:
        """Attach the counterexample of a failed check over ``case_set`` to the running check.

        Nothing happens for a check that passed, or once an extra round trip of
        the run failed (so a submission that hangs costs one timeout at most).
        """
        if all(v.ok for v in verdicts) or GAVE_UP in grading.cache:
            return
        grading.explain(counterexample=self.shrink(grading, case_set, verdicts, judge, grads))

    def shrink(self, grading: GradingContext, case_set: CaseSet[Any], verdicts: Sequence[Comparison], judge: Judge, grads: bool) -> dict[str, Any] | None:
        """The counterexample of a check over ``case_set`` (whose per-case ``verdicts`` it made), or None.

        None when every verdict is positive, when no failure is numeric (the call
        raised, crashed or returned another shape), when the extra round trip
        failed, or without a worker (a submission that could not be loaded).
        """
        worker = grading.worker
        if worker is None:
            return None
        cases = case_set(grading.seed)
        failed = sorted((self.size(case), index) for index, (case, verdict) in enumerate(zip(cases, verdicts)) if not verdict.ok)
        for _, index in failed:  # the smallest failing case with wrong numbers is the template
            case = cases[index]
            failure = judge(case, self.outcome(grading, case_set, index, case, grads))
            if isinstance(failure, Failure):
                break
        else:
            return None
        anchor = self.anchor(case, failure.worst)
        candidates: Cuts = remember(_CUTS, (self.cuts, case), lambda: self.cuts(case, anchor), values=anchor)
        requests = [self.request(cut, grads) for _, cut in candidates]
        judgements: list[Judgement] = []
        for stage, (start, stop) in enumerate(((0, FIRST_STAGE), (FIRST_STAGE, len(candidates)))):
            if start >= stop:
                break
            key = ("counterexample", case_set.name, index, grads, anchor, stage)
            outcomes = grading.memo(key, lambda: invoke_many(worker, requests[start:stop], diagnostic=True, shared=True))
            if outcomes[0].failure is not None:
                grading.cache[GAVE_UP] = outcomes[0].failure
                return None
            judgements += [judge(cut, outcome) for (_, cut), outcome in zip(candidates[start:stop], outcomes)]
            chosen = first_failing(judgements)
            if chosen is not None:
                position, found = chosen
                return self.record(requests[position], candidates[position][0], found, len(judgements))
        return self.not_found(requests[0].calls[-1].function, [size for size, _ in candidates], judgements)

    def call_text(self, request: Request) -> tuple[str, list[tuple[TensorInput, str]]]:
        """The request's last call written like Python, and its input tensors named after their parameters.

        Tensors are listed in the order the worker numbers them; those of an
        earlier call are prefixed (see :class:`Shrinker`), and its result
        appears inline as an argument.
        """
        named: list[tuple[TensorInput, str]] = []
        texts: list[str] = []
        for position, call in enumerate(request.calls):
            parameters = self.contract[call.function].parameters
            prefix = "" if position == len(request.calls) - 1 else self.prefixes.get(call.function, f"{call.function}_")

            def text(argument: Any, name: str) -> str:
                if isinstance(argument, TensorInput):
                    if not any(argument is t for t, _ in named):
                        named.append((argument, prefix + name))
                    return next(n for t, n in named if t is argument)
                if isinstance(argument, ResultOf):
                    return texts[argument.call]
                return repr(argument)

            words = [text(a, parameters[i] if i < len(parameters) else f"arg{i}") for i, a in enumerate(call.args)]
            words += [f"{name}={text(a, name)}" for name, a in call.kwargs.items()]
            texts.append(f"{call.function}({', '.join(words)})")
        return texts[-1], named

    def record(self, request: Request, size: dict[str, int], failure: Failure, searched: int) -> dict[str, Any]:
        """The JSON-safe counterexample of ``failure``, found among ``searched`` cuts (docs/report-schema.md)."""
        call, named = self.call_text(request)
        truth = failure.truth
        ratio = error_ratios(failure.got, truth.values, np.broadcast_to(truth.allowed, failure.got.shape))[1]
        worst = float(ratio.max())
        return {
            "found": True,
            "note": f"The smallest failing input of the {searched} tried, all cut down from a failing call.",
            "function": request.calls[-1].function,
            "size": size,
            "call": call,
            "inputs": [
                {
                    "name": name,
                    "shape": list(t.values.shape),
                    "dtype": t.dtype,
                    "layout": t.layout,
                    "requires_grad": t.requires_grad,
                    "values": plain(t.values),
                }
                for t, name in named
            ],
            "cotangent": None if request.backward_from is None else plain(request.cotangent),
            "result": "output" if failure.with_respect_to is None else "gradient",
            "with_respect_to": failure.with_respect_to,
            "expected": plain(truth.values),
            "got": plain(failure.got),
            "difference": plain(failure.got - truth.values),
            "allowed": plain(np.broadcast_to(truth.allowed, failure.got.shape)),
            "mismatched": int((ratio > 1.0).sum()),
            "elements": int(ratio.size),
            "worst_ratio": worst if np.isfinite(worst) else None,
            "searched": searched,
        }

    def not_found(self, function: str, sizes: list[dict[str, int]], judgements: Sequence[Judgement]) -> dict[str, Any]:
        """The record saying that no cut fails (and why some could not be compared)."""
        limits = ", ".join(f"{k} ≤ {max(s[k] for s in sizes)}" for k in sizes[-1] if k not in self.fixed)
        note = f"None of the {len(sizes)} inputs cut down from a failing call ({limits}) fails"
        reasons = [j for j in judgements if isinstance(j, str)]
        if reasons:
            note += f"; {len(reasons)} could not be compared, for example because {reasons[0]}."
        else:
            note += ": the bug shows only on larger inputs."
        absent = ("size", "call", "inputs", "cotangent", "result", "with_respect_to", "expected", "got", "difference", "allowed")
        empty = dict.fromkeys(absent)
        return {"found": False, "note": note, "function": function, **empty,
                "mismatched": None, "elements": None, "worst_ratio": None, "searched": len(sizes)}  # fmt: skip
