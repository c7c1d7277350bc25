"""Call sequences: a function called twice, its second call meeting whatever the first one left behind.

Generic, for any exercise of tensor functions. An exercise draws its
sequences (:class:`~grader.toolkit.domain.CallSequence`, the kinds of
:data:`~grader.toolkit.domain.SEQUENCE_KINDS`), making each second call's case
with its :class:`Variations`, and gives a :class:`SequenceSuite` its request
builder and oracle. The suite sends a sequence as one worker request (both
calls, and a backward pass where the sequence has gradients), judges both
calls' results, and reads three faults out of the run's memo for the
diagnosis: an answer kept from the first call, a backward pass that used the
second forward call's state for the first call's gradients, and state that
ignores a change of the option or of the dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import numpy as np

from grader.core.invoke import Call, Outcome, Request, TensorInput, invoke_each
from grader.core.plugin import GradingContext
from grader.toolkit import domain, verdicts
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison
from grader.toolkit.domain import SEQUENCE_KINDS, CallSequence
from grader.toolkit.rootcause import Finding
from grader.toolkit.slips import Observed
from grader.toolkit.tolerance import Memo, Truth, remember

_Case = TypeVar("_Case")
Vary = Callable[[_Case, np.random.Generator], _Case]
RequestOf = Callable[[Any, bool], Request]
Ask = Callable[[GradingContext, tuple[Any, ...], Request], Outcome]
"""(grading, memo key, request) -> the request's outcome, made once per run (the exercise's way of sending a request)."""
CHANGES = {"reflagged": ("interleaved",), "retyped": ()}
"""Kinds of sequence whose second call changes one thing besides the values (the option, the dtype) -> the other kinds that change it too."""
Keyed = Mapping[str, Mapping[str, tuple[str, str]]]
"""A kind of :data:`CHANGES` -> function -> (the component that state ignoring that change belongs to, the change in words)."""
SECOND_PASSES = {
    "retained": ("backward", "A second backward pass through one output fails",
                 "the backward pass frees or changes what it saved (a ctx attribute set to None, a saved tensor released or written "
                 "in place), which autograd keeps for every pass while the graph is retained.",
                 "keep what backward needs on ctx (ctx.save_for_backward) and only read it in backward: autograd frees it with the graph"),
    "stepped": ("state", "A second call on the same inputs returns an output already differentiated",
                "the second call returned something kept from the first (a result memoised by id(), version or value) whose graph "
                "the first backward pass had already freed.",
                "return a new result from every call made with gradients: keep nothing between calls that carries a graph"),
}
"""The kinds of sequence whose last backward pass is a second one -> (component, title, what its failure means, advice)."""
STALE = "the second call returned the first call's result: the answer is stale (cached by id(), data_ptr(), shape or a global?)"


@dataclass(frozen=True)
class Variations(Generic[_Case]):
    """How an exercise makes the second call's case of a sequence from the first's.

    ``redrawn``: new values of the same shapes (every kind but those below);
    ``shuffled``: each input's own values in another order (inputs refilled
    in place; default: ``redrawn``);
    ``retyped``: the same in the other dtype; ``reflagged``: the same with
    another value of the function's option (a flag, a constant);
    ``resized``: new values of other shapes, fewer tokens (one,
    ``decoding``) and other counts; ``layered``: the second of two calls
    differentiated together, as another layer makes it (default:
    ``reflagged``; an exercise whose functions take hyperparameters that
    differ per layer changes them too); ``stacked``: the same with the
    option unchanged (default: ``redrawn``); ``rescaled``: new values of the same shapes at another scale (logits hundreds
    of times larger; without it, an exercise draws no sequence of the kinds of
    :data:`~grader.toolkit.domain.SCALED_KINDS`); ``alone``: the same case
    with one argument, named, given another value (new values for a tensor,
    another number, the other flag) and every other one as it was, for each
    name in ``arguments`` of the case's function (without it, an exercise draws
    no sequence of the kinds of :data:`~grader.toolkit.domain.ONE_ARGUMENT`).
    """

    redrawn: Vary[_Case]
    retyped: Vary[_Case]
    reflagged: Vary[_Case]
    resized: Callable[[_Case, np.random.Generator, bool], _Case]
    layered: Vary[_Case] | None = None
    stacked: Vary[_Case] | None = None
    shuffled: Vary[_Case] | None = None
    rescaled: Vary[_Case] | None = None
    alone: Callable[[_Case, np.random.Generator, str], _Case] | None = None
    arguments: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def second(self, first: _Case, kind: str, mode: str, rng: np.random.Generator) -> _Case:
        """The second call's case of a sequence of ``kind`` in ``mode`` that starts with ``first`` (the same tensors: ``first``)."""
        if kind in ("repeat", "retrained", "stepped", *domain.ONE_CALL):
            return first
        if kind == "resized":
            return self.resized(first, rng, mode in ("no_grad", "inference_mode"))  # generation decodes without gradients
        changes = {"retyped": self.retyped, "reflagged": self.reflagged, "interleaved": self.layered or self.reflagged,
                   "stacked": self.stacked or self.redrawn, "refill": self.shuffled or self.redrawn,
                   "refill_data": self.shuffled or self.redrawn, "rescaled": self.rescaled or self.redrawn}  # fmt: skip
        return changes.get(kind, self.redrawn)(first, rng)


SHORT = 16
"""The most tokens of a first call after which one argument changes alone: what such a sequence tries is the key of what a
function keeps between calls, not the length."""


@dataclass(frozen=True)
class FirstCall:
    """How the first call of a sequence is made, whatever the exercise (see :func:`first_call`)."""

    dtype: str
    causal: bool | None  # the function's option, for an exercise whose option is the causal flag (None: left out)
    grad_mode: str  # a member of domain.GRAD_MODES: the autograd mode of the calls (mode "grads": grad enabled)
    decoding: bool  # one token (the second call's too): a decoding step
    fresh_length: int | None = None  # a length no other call of the run has (see first_call); None: the exercise draws one
    longest: int | None = None  # the most tokens it may have (None: the whole domain's); SHORT when one argument changes alone


def first_call(rng: np.random.Generator, kind: str, mode: str, fresh_length: int | None = None) -> FirstCall:
    """How the first call of a sequence of ``kind`` in ``mode`` is made: a drawn dtype (float64 first for "retyped", float32
    first under no_grad); a drawn causal flag, but causal before a change of the option, of the dtype and of two calls
    differentiated together, causal=False under no_grad (a reflagged second call then leaves the flag out, and the
    default must apply whatever came before) and causal (given or left out) for an evaluation before training; one token
    for reallocated calls without autograd (decoding steps); at most :data:`SHORT` tokens when one argument changes
    alone (the kinds of :data:`~grader.toolkit.domain.ONE_ARGUMENT`). An evaluation before training ("retrained") is made at
    ``fresh_length``: longer than every other call of the run, so that whatever the function keeps per length, or grows
    to the longest length seen (a mask, a buffer), is made by this call, in its mode, and then met by the training call.
    """
    dtype = str(rng.choice(["float32", "float64"]))
    if kind == "retyped":
        dtype = "float32" if mode == "no_grad" else "float64"
    causal: bool | None = (True, False, None)[int(rng.integers(3))]
    if kind in ("retyped", "reflagged", *domain.TWO_LAYERS):
        causal = mode != "no_grad"
    elif kind == "retrained":
        causal = True if causal is False else causal
    decoding = kind == "reallocate" and mode in ("no_grad", "inference_mode")
    fresh = fresh_length if kind == "retrained" else None
    return FirstCall(dtype, causal, mode if mode in domain.GRAD_MODES else "enabled", decoding, fresh, SHORT if kind in domain.ONE_ARGUMENT else None)


FirstCase = Callable[[np.random.Generator, str, FirstCall], Any]
"""(generator, function, how the call is made) -> the first call's case of a sequence (see :func:`draw_sequences`)."""


def draw_sequences(rng: np.random.Generator, functions: tuple[str, ...], first_case: FirstCase, variations: Variations[Any]) -> list[CallSequence[Any]]:
    """One sequence per kind of :data:`~grader.toolkit.domain.SEQUENCE_KINDS`, mode of
    :data:`~grader.toolkit.domain.SEQUENCE_MODES` (or of ``KIND_MODES``, for the kinds that have their own) and function.

    ``first_case(rng, function, how)`` draws the first call's case as
    ``how`` (:func:`first_call`) says; its inputs require grad in the
    sequences with gradients (mode "grads", and "retrained").
    """
    found: list[CallSequence[Any]] = []
    for kind in domain.SEQUENCE_KINDS:
        if (kind in domain.SCALED_KINDS and variations.rescaled is None) or (kind in domain.ONE_ARGUMENT and variations.alone is None):
            continue
        for mode in domain.KIND_MODES.get(kind, domain.SEQUENCE_MODES):
            for function in functions:
                grads = mode == "grads" or kind == "retrained"
                if kind in domain.ONE_ARGUMENT:
                    assert variations.alone is not None
                    for name in variations.arguments[function]:
                        first = first_case(rng, function, first_call(rng, kind, mode))
                        found.append(CallSequence(first, variations.alone(first, rng, name), kind, grads, name))
                    continue
                fresh = domain.LONGEST + 1 + sum(s.kind == "retrained" for s in found)  # one length per such sequence
                first = first_case(rng, function, first_call(rng, kind, mode, fresh))
                found.append(CallSequence(first, variations.second(first, kind, mode, rng), kind, grads))
    return found


def joined_request(sequence: CallSequence[Any], request_of: RequestOf) -> Request:
    """The two calls of ``sequence`` in one request: with gradients, a backward pass from the second call (from both when
    interleaved or stacked; from the first as soon as it returns too when stepped); the second call refills, reuses or
    replaces the first call's tensors as the sequence's kind says. A kind of :data:`~grader.toolkit.domain.ONE_CALL` is
    one call, differentiated as soon as it returns (its graph kept) and again at the end."""
    first, second = (request_of(case, sequence.grads) for case in (sequence.first, sequence.second))
    if len(first.calls) != 1 or len(second.calls) != 1:
        raise ValueError(f"a call sequence joins two requests of one call each (got {len(first.calls)} and {len(second.calls)} calls)")
    if sequence.kind in domain.TWO_LAYERS:
        assert first.backward_from is not None and first.cotangent is not None and second.backward_from is not None
        return replace(second, calls=(*first.calls, *second.calls), inputs=first.inputs + second.inputs,
                       backward_from=len(first.calls) + second.backward_from, also_backward=((first.backward_from, first.cotangent),))  # fmt: skip
    call = first.calls[-1]
    swap: dict[int, TensorInput] = {}  # a tensor of the second call's request -> the first call's, passed in its place
    if sequence.kind in ("refill", "refill_data"):
        inputs = [a for a in (*call.args, *call.kwargs.values()) if isinstance(a, TensorInput)]
        again = [a for a in (*second.calls[-1].args, *second.calls[-1].kwargs.values()) if isinstance(a, TensorInput)]
        swap = {id(new): old for new, old in zip(again, inputs)}
        call = replace(_passed_as(second.calls[-1], swap), refill=tuple((old, new.values) for new, old in zip(again, inputs)),
                       refill_through_data=sequence.kind == "refill_data")  # fmt: skip
    elif sequence.kind in domain.ONE_ARGUMENT:
        swap = _unchanged(call, second.calls[-1])
        call = _passed_as(second.calls[-1], swap)
    elif sequence.kind == "retrained":
        first = replace(first, calls=(*first.calls[:-1], replace(call, grad_mode=sequence.first.grad_mode)))
    elif sequence.kind in ("stepped", *domain.ONE_CALL):
        assert first.cotangent is not None
        now = replace(call, backward_now=(first.cotangent, sequence.kind in domain.ONE_CALL))
        first = replace(first, calls=(*first.calls[:-1], now))
        if sequence.kind in domain.ONE_CALL:
            return first
    elif sequence.kind != "repeat":
        call = replace(second.calls[-1], release=sequence.kind == "reallocate")
    numbered = first.inputs if sequence.kind in ("repeat", "refill", "refill_data", "retrained", "stepped") else second.inputs
    numbered = tuple(swap.get(id(t), t) for t in numbered)
    return replace(second, calls=(*first.calls, call), backward_from=None if second.backward_from is None else len(first.calls), inputs=numbered)


def _passed_as(call: Call, swap: Mapping[int, TensorInput]) -> Call:
    """``call`` with each tensor argument that ``swap`` maps (by id) replaced by the tensor it maps it to."""
    return replace(call, args=tuple(swap.get(id(a), a) for a in call.args), kwargs={name: swap.get(id(a), a) for name, a in call.kwargs.items()})


def _unchanged(earlier: Call, later: Call) -> dict[int, TensorInput]:
    """The tensors of ``later`` that hold what ``earlier``'s tensor in the same place (position or name) held, in values,
    dtype, layout and how it requires grad, each mapped (by id) to that tensor of ``earlier``: what the second call of a
    sequence that changes one argument alone passes again as the same object."""
    kept = ("dtype", "requires_grad", "layout", "activation", "held_grad", "parameter")
    swap: dict[int, TensorInput] = {}
    for old, new in [*zip(earlier.args, later.args), *((earlier.kwargs.get(name), a) for name, a in later.kwargs.items())]:
        if isinstance(old, TensorInput) and isinstance(new, TensorInput) and np.array_equal(old.values, new.values) \
                and all(getattr(old, a) == getattr(new, a) for a in kept):  # fmt: skip
            swap[id(new)] = old
    return swap


def _non_tensor_changed(sequence: CallSequence[Any]) -> bool:
    """Whether ``sequence`` changes one argument alone and its case holds that argument as no array (a flag, a number, a
    coefficient however it is passed): a second call that returns the first call's result then ignored that argument (what
    the probes of the option, or the part that reads it, name), not the inputs."""
    return sequence.kind in domain.ONE_ARGUMENT and not isinstance(getattr(sequence.first, sequence.changed, None), np.ndarray)


_REQUESTS: Memo = {}


def stale_input(name: str, when: str) -> tuple[str, str, str]:
    """The title, evidence and advice of an answer computed with the ``name`` of an earlier call (``when``: the call that showed
    it, as a sentence's opening that its output completes)."""
    return (f"The answer uses the {name} of an earlier call",
            f"{when} output was the right one for its own inputs but with the {name} of the earlier call: what you compute from "
            f"{name} is kept between calls (cached by shape, id(), data_ptr() or version) and is stale once the inputs change.",
            f"compute what depends on {name} in every call: cache nothing keyed by shape or by a tensor's identity")  # fmt: skip


@dataclass(frozen=True)
class SequenceSuite:
    """An exercise's call sequences: how to send them, and what their calls must return.

    ``sequences`` is the case set of the sequences; ``request_of(case,
    grads)`` the request of one call; ``positions(case)`` input name ->
    tensor number in that request for the inputs whose gradients are asked
    for; ``value(case)`` and ``gradients(case)`` the oracle's truths;
    ``ask`` sends a request once per run (see :data:`Ask`).
    """

    sequences: CaseSet[CallSequence[Any]]
    request_of: RequestOf
    positions: Callable[[Any], dict[str, int]]
    value: Callable[[Any], Truth]
    gradients: Callable[[Any], dict[str, Truth]]
    ask: Ask

    def request(self, sequence: CallSequence[Any]) -> Request:
        """:func:`joined_request` of ``sequence``, built once per sequence object and process."""
        return remember(_REQUESTS, (sequence, self.request_of), lambda: joined_request(sequence, self.request_of))

    def ends(self, sequence: CallSequence[Any]) -> tuple[int, int]:
        """The positions of the first and of the second call in the sequence's request (each joined request is of one call)."""
        return 0, len(self.request(sequence).calls) - 1

    def prepare(self, seed: int) -> None:
        """Compute the oracle's truths of both calls of every sequence for ``seed``, once (a batch does, before it forks)."""
        for sequence in self.sequences(seed):
            for called in (sequence.first, sequence.second):
                self.value(called)
                if sequence.grads:
                    self.gradients(called)

    def differentiated(self, sequence: CallSequence[Any]) -> list[tuple[int, Any, dict[str, int]]]:
        """The calls of ``sequence`` whose gradients its request asks for: (call, its case, input name -> tensor number)."""
        if not sequence.grads:
            return []
        first, second = self.ends(sequence)
        if sequence.kind not in domain.TWO_LAYERS:
            return [(second, sequence.second, self.positions(sequence.second))]
        shift = len(self.request_of(sequence.first, True).inputs)
        return [(first, sequence.first, self.positions(sequence.first)),
                (second, sequence.second, {name: shift + i for name, i in self.positions(sequence.second).items()})]  # fmt: skip

    def outcome(self, grading: GradingContext, index: int, sequence: CallSequence[Any]) -> Outcome:
        """The outcome of sequence ``index``; the first one asked for sends every sequence of each working function in one round trip."""
        done = ("prefetched", self.sequences.name)
        if done not in grading.cache and grading.worker is not None:
            grading.cache[done] = True
            everything = list(enumerate(self.sequences(grading.seed)))
            for function in dict.fromkeys(s.second.function for _, s in everything):
                wanted = [(i, self.request(s)) for i, s in everything if s.second.function == function]
                if any(verdicts.function_problem(grading, c.function) for c in wanted[0][1].calls):
                    continue
                for (i, _), found in zip(wanted, invoke_each(grading.worker, [r for _, r in wanted], shared=True)):
                    grading.cache[(self.sequences.name, i)] = found
        return self.ask(grading, (self.sequences.name, index), self.request(sequence))

    def verdicts(self, grading: GradingContext) -> list[Comparison]:
        """Every call of every sequence: its output right when it was returned and still right after the other call, and its
        gradients where asked for; a second call that returned the first call's answer says so."""
        return [v for index, sequence in enumerate(self.sequences(grading.seed)) for v in self.judged(self.outcome(grading, index, sequence), sequence)]

    def judged(self, outcome: Outcome, sequence: CallSequence[Any]) -> list[Comparison]:
        """The verdicts on the calls of one sequence (see :meth:`verdicts`)."""
        found = []
        ends = self.ends(sequence)
        for position, case, which in zip(ends, (sequence.first, sequence.second), ("first", "second")):
            what = f"{sequence.label()}: the {which} call"
            verdict = verdicts.values_verdict(outcome, position, what, self.value(case))
            if not verdict.ok and which == "second" and self.stale(outcome, sequence):
                verdict = Comparison(False, STALE, verdict.worst_ratio, what)
            found.append(verdict)
        for position, case, wanted in self.differentiated(sequence):
            what = f"{sequence.label()}: the {'first' if position == ends[0] else 'second'} call"
            found.append(verdicts.grads_verdict(outcome, position, what, self.gradients(case), wanted))
        return found

    def stale(self, outcome: Outcome, sequence: CallSequence[Any]) -> bool:
        """Whether the second call of a sequence that changed its inputs returned what the first call should have (and did).

        Not when the first call's answer is all zeros (a gate shut on one token, say): a result kept from it cannot be told
        from a function that answers zeros there, as some wrong formulas do."""
        if sequence.second is sequence.first:
            return False
        before = self.value(sequence.first)
        return bool(np.any(before.values)) and self._later_wrong(outcome, sequence) and verdicts.values_verdict(outcome, self.ends(sequence)[1], "", before).ok

    def observed(self, grading: GradingContext, attributes: Callable[[Any, bool], Mapping[str, str]]) -> list[Observed]:
        """Both calls of every sequence the checks sent (from the run's memo: no new call), as the slip analysis reads them
        (``attributes(case, grads)``: how a call was made, in words; the sequence's kind is added)."""
        found = []
        for index, sequence in enumerate(self.sequences(grading.seed)):
            outcome: Outcome | None = grading.cache.get((self.sequences.name, index))
            if outcome is None:
                continue
            for position, case, which in zip(self.ends(sequence), (sequence.first, sequence.second), ("first", "second")):
                grads = sequence.grads and not (sequence.kind == "retrained" and which == "first")  # an evaluation builds no graph
                made = {**attributes(case, grads), "the call sequence": sequence.kind}
                found.append(Observed(case.function, outcome, position, case.output_shape, case.dtype, made, (), grads))
        return found

    def stale_part(self, outcome: Outcome, sequence: CallSequence[Any], parts: Collection[str]) -> str | None:
        """The input of ``parts`` that the second call of ``sequence``, wrong for its own inputs, answered with as it was in
        the first call (the second call's other inputs its own), or None; not when that answer is all zeros (see :meth:`stale`)."""
        if sequence.second is sequence.first or not parts:
            return None
        second = self.ends(sequence)[1]
        if verdicts.values_verdict(outcome, second, "", self.value(sequence.second)).ok:
            return None
        for name in parts:
            before, now = getattr(sequence.first, name, None), getattr(sequence.second, name, None)
            if before is None or now is None or np.shape(before) != np.shape(now) or np.array_equal(before, now):
                continue
            kept = self.value(replace(sequence.second, **{name: before}))
            if np.any(kept.values) and verdicts.values_verdict(outcome, second, "", kept).ok:  # (all zeros: see stale)
                return name
        return None

    def memo_findings(self, grading: GradingContext, whole_answer: Mapping[str, str], keyed: Keyed, alone: Collection[str] = (),
                      parts: Mapping[str, Mapping[str, str]] = MappingProxyType({})) -> list[Finding]:  # fmt: skip
        """What the sequences the checks sent show (read from the run's memo: no new call), at most one finding per function:
        a backward pass of two calls differentiated together that got only the first call's gradients wrong, while every
        other sequence of the function is right; for a function
        of ``whole_answer`` (function -> the component that computes its whole answer), a stale answer; for one of ``parts``
        (function -> input -> the component that computes from it), an answer with one input of the first call; else, when the only
        sequences that fail are those whose second call changes one thing of :data:`CHANGES` and the function fails no check
        of single calls (``alone``: the functions whose only failed checks are call sequences'), state kept between calls that
        ignores it (``keyed``, :data:`Keyed`)."""
        found: list[Finding] = []
        failing: dict[str, set[str]] = {}
        made = []
        for index, sequence in enumerate(self.sequences(grading.seed)):
            outcome: Outcome | None = grading.cache.get((self.sequences.name, index))
            if outcome is not None:
                made.append((sequence, outcome))
                if not all(v.ok for v in self.judged(outcome, sequence)):
                    failing.setdefault(sequence.second.function, set()).add(sequence.kind)
        for sequence, outcome in made:
            function = sequence.second.function
            if any(f.function == function for f in found):
                continue
            if sequence.kind in domain.TWO_LAYERS and failing.get(function, set()) <= set(domain.TWO_LAYERS):  # right in every other sequence
                found += self._crossed_backward(function, outcome, sequence)
            elif sequence.kind in SECOND_PASSES and failing.get(function, set()) <= set(SECOND_PASSES):
                found += self._second_pass(function, outcome, sequence)
            elif function in whole_answer and not _non_tensor_changed(sequence) and self.stale(outcome, sequence):
                found.append(Finding(function, whole_answer[function], "forward", f"{function} answers with a result kept from an earlier call",
                                     f"When {function} was {SEQUENCE_KINDS[sequence.kind]}, the second call returned the first call's result: "
                                     "the answer is kept between calls (cached by id(), data_ptr(), shape or in a global) and is stale once the "
                                     "inputs change.", "compute the result on every call: cache nothing keyed by a tensor's identity, address or shape",
                                     aspect="values", explains=frozenset({"values", "gradients"}), signature="the answer is stale"))  # fmt: skip
            elif (name := self.stale_part(outcome, sequence, parts.get(function, {}))) is not None:
                found.append(Finding(function, parts[function][name], "forward",
                                     *stale_input(name, f"When {function} was {SEQUENCE_KINDS[sequence.kind]}, the second call's"),
                                     aspect="values", explains=frozenset({"values", "gradients"})))  # fmt: skip
        for function, kinds in failing.items():
            changed = next((kind for kind in CHANGES if kind in kinds and kinds <= {kind, *CHANGES[kind]}), None)
            named = keyed.get(changed or "", {}).get(function)
            if named is None or function not in alone or any(f.function == function for f in found):
                continue
            component, what = named
            found.append(Finding(function, component, "forward", f"What {function} keeps between calls ignores {what}",
                                 f"Only the call sequences that change {what} between two calls fail ({', '.join(sorted(kinds))}): calls on new "
                                 f"values, on inputs refilled in place, reallocated or of other shapes are right. Something kept from an earlier "
                                 f"call (a mask, a constant, a cached tensor) is reused although {what} changed.",
                                 f"build it in every call, or key what you keep by everything it depends on ({what} included)",
                                 aspect="values", explains=frozenset({"values", "gradients"})))  # fmt: skip
        for function in failing:
            if function in alone and not any(f.function == function for f in found):
                found += self._carried_over(function, failing[function], made)
        return found

    def _carried_over(self, function: str, kinds: Collection[str], made: Sequence[tuple[CallSequence[Any], Outcome]]) -> list[Finding]:
        """A finding when ``function``, right in every single call of the checks, answered a sequence's first call right and its
        second wrong (the same tensors again first, when that sequence shows it): what a call leaves behind changes the next."""
        shown = [(sequence, outcome) for sequence, outcome in made if sequence.second.function == function and self._later_wrong(outcome, sequence)]
        if not shown:
            return []
        sequence, _ = min(shown, key=lambda pair: pair[0].kind != "repeat")
        return [Finding(function, "state", "forward", f"What {function} keeps between calls makes a later call wrong",
                        f"When {function} was {SEQUENCE_KINDS[sequence.kind]}, the first call was right and the second wrong, and every "
                        f"single call of the checks is right (the sequences that fail: {', '.join(sorted(kinds))}): something kept from "
                        "call to call (a workspace or buffer reused without being reset, a cache, a running statistic) carries an earlier "
                        "call into a later one.", "start every call from fresh buffers: keep nothing that one call writes and a later call reads",
                        aspect="values", explains=frozenset({"values", "gradients"}))]  # fmt: skip

    def _later_wrong(self, outcome: Outcome, sequence: CallSequence[Any]) -> bool:
        """Whether the first call of ``sequence`` returned a right output and the second a wrong one (each for its own inputs)."""
        first, second = self.ends(sequence)
        return (verdicts.values_verdict(outcome, first, "", self.value(sequence.first)).ok
                and not verdicts.values_verdict(outcome, second, "", self.value(sequence.second)).ok)  # fmt: skip

    def _second_pass(self, function: str, outcome: Outcome, sequence: CallSequence[Any]) -> list[Finding]:
        """A finding when the last backward pass of a sequence of :data:`SECOND_PASSES` raised although every output was right:
        the function cannot be differentiated twice (through one graph, or after a step on the same inputs)."""
        if outcome.backward_error is None or not all(v.ok for v in self.judged(outcome, sequence)[:2]):
            return []
        component, title, because, advice = SECOND_PASSES[sequence.kind]
        return [Finding(function, component, "gradients", title,
                        f"When {function} was {SEQUENCE_KINDS[sequence.kind]}, every output was right but the last backward pass raised "
                        f"{outcome.backward_error.rstrip('.')}: {because}", advice, aspect="gradients", explains=frozenset({"gradients"}))]  # fmt: skip

    def _crossed_backward(self, function: str, outcome: Outcome, sequence: CallSequence[Any]) -> list[Finding]:
        """A finding when, of two calls differentiated together, the second call's gradients are right and the first call's
        finite but wrong: the backward pass of the first call used what the second forward left behind."""
        differentiated = self.differentiated(sequence)
        judged = [verdicts.grads_verdict(outcome, position, "", self.gradients(case), wanted).ok for position, case, wanted in differentiated]
        first = [outcome.grads.get(i) for i in differentiated[0][2].values()] if differentiated else []
        if judged != [False, True] or not all(g is not None and np.isfinite(g).all() for g in first):
            return []  # (a NaN or infinite gradient of the first call is a fault of its own, not another call's state)
        return [Finding(function, "backward", "gradients", "The backward pass uses the last forward call's state, not its own",
                        f"When {function} was {SEQUENCE_KINDS[sequence.kind]}, the second call's gradients were right and the first "
                        "call's wrong: its backward pass read what the second forward left behind (tensors kept on the Function class, "
                        "the module or a global instead of saved on ctx).",
                        "save what the backward pass needs with ctx.save_for_backward (or on ctx) in each forward call, never on the "
                        "class or in a global", aspect="gradients", explains=frozenset({"gradients"}), signature="differentiated through both results")]  # fmt: skip
