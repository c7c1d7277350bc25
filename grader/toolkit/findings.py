"""What the generic probes find, as root-cause findings, for any exercise.

The probes of :mod:`grader.toolkit.probes` report facts about a submission's
own behaviour; this module turns them into :class:`~grader.toolkit.rootcause.Finding`
objects an exercise's diagnosis hands to the harness, and holds the probes
whose meaning is the same in every exercise:

* :func:`randomness_probe`: two identical calls must agree bit for bit;
* :func:`layout_probe`: the same values in non-contiguous memory give the same output;
* :func:`precision_finding`: a float64 result right only to float32's accuracy;
* :func:`gradients_probe`: the gradients against finite differences of the
  submission's own forward, run after run (some inputs frozen), naming the
  inputs whose gradient is missing (``graph``) or wrong (``backward``);
* :func:`hint_findings`: the named misconceptions of the failed checks, as
  findings of the function, component and stage the exercise declares.

:class:`Found` collects what the probes of one run found. First written for
the differential-attention exercise (grader/exercises/diffattn/probes.py),
moved here when DIFF V2 got its diagnosis.
"""

from __future__ import annotations

import hashlib
import io
import re
import tokenize
from types import MappingProxyType
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from grader.core.invoke import Outcome
from grader.toolkit import attention_maps, domain, probes, sequences, slips, softmax
from grader.toolkit.probes import Consistency, Layout, Subject, Values
from grader.toolkit.rootcause import Finding, Role
from grader.worker.client import Worker

RIGHT = 1e-9  # a float64 probe's output is right within this share of its largest true magnitude
HALF_PRECISION_LIKE = 0.05  # bfloat16 rounds to 2⁻⁸ (0.4 %): a few operations' worth, never an error of this share or more
FLOAT32_LIKE = 1e-4  # ... and only as accurate as float32 when off by at most this share
DENSE = 0.5  # float32 arithmetic leaves nearly every element of a float64 output off (over 90 % measured); a fault of a few keys far fewer
FORWARD_NOTE = "the forward output of these calls is already wrong, so their gradients cannot match; fix the values first"
VALUES_AND_GRADIENTS = frozenset({"values", "gradients"})
INPLACE_BACKWARD = "modified by an inplace operation"  # how torch says the backward pass found a saved tensor changed
NO_GRAPH = "does not require grad"  # how torch says a backward pass found no graph: a check failing so suffers a cut path


def is_right(got: np.ndarray | None, expected: np.ndarray, share: float = RIGHT) -> bool:
    """Whether ``got`` equals ``expected`` within ``share`` of its largest magnitude."""
    if got is None or got.shape != expected.shape or not np.isfinite(got).all():
        return False
    return bool(np.max(np.abs(got - expected)) <= share * max(1.0, float(np.max(np.abs(expected)))))


@dataclass
class Found:
    """What the probes of one run found: findings, the probes that ran, maps to show."""

    findings: list[Finding] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)
    maps: list[dict[str, Any]] = field(default_factory=list)

    def first(self, function: str, *candidates: tuple[bool, str, str, str, str]) -> bool:
        """Record the first forward finding (component, title, evidence, advice) whose condition holds; whether one did."""
        for holds, component, title, evidence, advice in candidates:
            if holds:
                self.add(function, component, "forward", title, evidence, advice)
                return True
        return False

    def add(self, function: str, component: str, stage: str, title: str, evidence: str, advice: str, **extra: Any) -> None:
        """Record a finding of the probes (forward ones explain value and, as a consequence, gradient checks; a cut graph also
        explains checks that outputs have a graph)."""
        if stage == "forward":
            extra = {"aspect": "values", "explains": VALUES_AND_GRADIENTS, "note": FORWARD_NOTE, **extra}
        elif stage == "gradients":  # a path cut for some inputs also leaves outputs without a graph when only those require grad
            extra = {"aspect": "gradients", "explains": frozenset({"gradients", "graph"} if component == "graph" else {"gradients"}), **extra}
        self.findings.append(Finding(function, component, stage, title, evidence, advice, **extra))


def layout_probe(worker: Worker, subject: Callable[..., Subject], values: Values, found: Found, expansions: Mapping[int, str] = MappingProxyType({}),
                 handled_by: Mapping[str, str] = MappingProxyType({}), alike: Values | None = None,
                 within: Callable[[str], bool] | None = None) -> bool:  # fmt: skip
    """The same values in non-contiguous memory must give the same output; whether they do not.

    ``within(layout)``: the exercise's probes of the forward run with the inputs in that layout; when one of the plain
    non-contiguous layouts gives another output and they localise the fault there (a path taken for that layout alone,
    with a part of its own wrong), their findings stand, saying in which memory alone it shows.

    Every two inputs of one shape (in ``alike``, values whose inputs share more shapes, or else in ``values``) are also
    passed as one tensor object, against two distinct tensors holding the same values: an output that differs is a fault
    of the part that handles the first of them (``handled_by``: input name -> component, "*" for every input; ``strided``
    for one not named).

    The layouts that constrain values are compared with the same values in contiguous memory: the aliased one (every input
    at one address) on values that agree where the inputs share memory, and each expansion (one element broadcast along a
    dim of ``expansions``, which names them: 0 "over the batch"), of every input and then of each input alone (code that
    checks one input's strides and takes the others to match meets the second), on ``values`` made constant along it."""
    found.probes.append(f"{subject().function}: the same inputs in other memory layouts")
    layouts = (*domain.NON_CONTIGUOUS, "offset", domain.PACKED, domain.STACKED)
    requests = [subject(layout=layout).request(values) for layout in ("contiguous", *layouts)]
    tensors = [name for name, v in values.items() if np.ndim(v) >= 1]
    # (how the inputs are held, in words; their layouts; the values they then hold), each against those values in contiguous memory
    shaped: list[tuple[str, Layout, Values]] = [(
        "held by distinct tensors that start at one address of one storage (one data_ptr(), memory that overlaps: tensors with "
        "one address are not the same tensor)", domain.ALIASED,
        {**values, **dict(zip(tensors, domain.aliased([np.asarray(values[name]) for name in tensors])))})]  # fmt: skip
    for axis, along in expansions.items():
        spread = {name: domain.broadcast_along(v, axis) for name, v in values.items() if np.ndim(v) > max(axis, 1)}
        stride = "stride 0: its elements along that dim share the first one's memory"
        if spread:
            shaped.append((f"expanded {along} ({stride})", domain.expanded_on(axis), {**values, **spread}))
            shaped += [(f"and only {name} expanded {along} ({stride})", {name: domain.expanded_on(axis)}, {**values, name: spread[name]})
                       for name in spread]  # fmt: skip
    for _, layout, inputs in shaped:
        requests += [subject(layout=layout).request(inputs), subject(layout="contiguous").request(inputs)]
    # every two inputs of one shape, equal in value, passed as one tensor object and as two distinct tensors
    shared = values if alike is None else alike
    pairs_alike = [(a, b) for i, a in enumerate(tensors) for b in tensors[i + 1 :] if np.shape(shared[a]) == np.shape(shared[b])]
    for first, second in pairs_alike:
        plain = subject(layout="contiguous").request({**shared, second: shared[first]})
        requests += [probes.Built(probes.one_object_for_equal(plain.request), plain.positions), plain]
    outcomes = probes.ask(worker, requests)
    base = probes.output(outcomes[0])
    if base is None:
        return False
    # how each outcome's inputs were held, the outcome, and the contiguous output it must equal
    held = "held in {} memory (a non-contiguous view, a storage offset, or all inputs in one storage)"
    compared: list[tuple[str, Outcome, np.ndarray | None]] = [(held.format(domain.LAYOUT_WORDS.get(layout, layout)), outcome, base)
                                                              for layout, outcome in zip(layouts, outcomes[1:])]  # fmt: skip
    pairs = outcomes[len(layouts) + 1 :]
    compared += [(where, pairs[2 * n], probes.output(pairs[2 * n + 1])) for n, (where, _, _) in enumerate(shaped)]
    failing = [(where, o) for where, o, right in compared if right is not None and not is_right(probes.output(o), right)]
    ones = pairs[2 * len(shaped) :]
    read = [(pair, ones[2 * n], probes.output(ones[2 * n + 1])) for n, pair in enumerate(pairs_alike)]
    tied = [(pair, o) for pair, o, right in read if right is not None and not is_right(probes.output(o), right)]
    if tied:
        (first, _), outcome = tied[0]
        names = listed(tied[0][0])
        two_tensors = "two distinct tensors holding the same values"
        error = probes.raised_text(outcome)
        what = f"raises {error.rstrip('.')} (it does not with {two_tensors})" if error else f"gives another output than with {two_tensors}"
        also = f" (so it does with one tensor as {', '.join(listed(pair) for pair, _ in tied[1:])})" if len(tied) > 1 else ""
        found.add(subject().function, handled_by.get(first, handled_by.get("*", "strided")), "forward", f"One tensor passed as {names} gives another result",
                  f"With one tensor object passed as {names}, the function {what}{also}: it tells its arguments apart by identity "
                  "(a fast path for shared inputs, a cache keyed by id() or data_ptr()).",
                  "never branch on `is`, id() or data_ptr() between arguments: a caller may pass one tensor for several of them "
                  "(tied weights, self-attention), and the answer must be the one for those values", explains=VALUES_AND_GRADIENTS)  # fmt: skip
        return True
    if not failing:
        return False
    where, outcome = failing[0]
    error = probes.raised_text(outcome)
    held_in = next((name for name, other in zip(layouts, outcomes[1:]) if other is outcome), None)  # a layout of one name
    if within is not None and not error and held_in is not None and _localised_within(found, within, held_in, where):
        return True
    what = f"the function raises {error.rstrip('.')} (it does not in contiguous memory)" if error else "the output differs from the one in contiguous memory"
    kind = slips.exception_kind(error) if error else None
    found.add(subject().function, "strided", "forward", "Non-contiguous inputs give other results", f"With the same input values {where}, {what}.",
              "do not assume a memory layout: use reshape (not view), never as_strided or empty_strided with an input's strides, "
              "never write into a view of an input, and never tell tensors apart by data_ptr()", explains=VALUES_AND_GRADIENTS | {"strided"},
              signature=kind[3] if kind is not None and kind[0] == "shape" else None)  # fmt: skip
    return True


FORMULA_PARTS = frozenset({"scale", "mask", "softmax", "gate", "coefficient", "sign", "lambda", "stability"})
"""The parts of a forward whose fault a readout tells from inputs read in the wrong places: a wrong scale, mask, softmax,
gate or coefficient is a formula, the same whatever the values. A fault of where data is read (heads, features, tokens,
branches) is also what an input read with the wrong strides gives, so in one memory layout alone it is the strides'."""


def _localised_within(found: Found, within: Callable[[str], bool], layout: str, where: str) -> bool:
    """Whether ``within(layout)`` localised a fault of the forward in a part of :data:`FORMULA_PARTS`; its findings then say
    that the inputs were held ``where`` and that contiguous memory gives the right output (others are dropped, with the
    maps their readouts showed)."""
    before, shown = len(found.findings), len(found.maps)
    if not within(layout) or any(f.component not in FORMULA_PARTS for f in found.findings[before:]):
        del found.findings[before:], found.maps[shown:]
        return False
    found.findings[before:] = [replace(f, title=f"{f.title}, with the inputs in {domain.LAYOUT_WORDS.get(layout, layout)} memory only",
                                       evidence=f"{f.evidence} This shows only with the inputs {where}: the same values in contiguous "
                                                "memory give the right output, so a path taken for that memory layout computes it.")
                               for f in found.findings[before:]]  # fmt: skip
    return True


@dataclass(frozen=True)
class TokenAxes:
    """Where the tokens are: the input that holds the keys' values, its token axis, and the output's token axis; and the
    component of an output whose tokens come back in another order (what assembles the output, in the exercise's words)."""

    value: str
    value_axis: int
    output_axis: int
    assembly: str


def scale_free(doubled: np.ndarray, plain: np.ndarray) -> bool:
    """Whether an output computed with its values doubled (``doubled``) stayed near the plain one (within a tenth of its
    largest magnitude), as a norm's does, ε aside, where a linear map's doubles."""
    return bool(np.abs(doubled - plain).max(initial=0.0) <= 0.1 * np.abs(plain).max(initial=0.0))


def _moved_tokens(out: np.ndarray | None, expected: np.ndarray, axis: int) -> str | None:
    """"order" when ``out`` holds the right output of every token, but some at another token's place (rows along ``axis`` a
    permutation of the expected ones other than the identity, each row matched exactly); "copies" when every row is some
    token's right output and some tokens' outputs stand in several places (others' lost); "unwritten" when every row is its
    own token's right output or all zeros, some of them zeros that should not be; else None."""
    if out is None or out.shape != expected.shape:
        return None
    got = np.moveaxis(out, axis, 0).reshape(out.shape[axis], -1)
    want = np.moveaxis(expected, axis, 0).reshape(expected.shape[axis], -1)
    tolerance = RIGHT * max(1.0, float(np.max(np.abs(want), initial=0.0)))
    with np.errstate(invalid="ignore"):
        own = np.abs(got - want).max(axis=-1, initial=0.0) <= tolerance
    blank = (got == 0.0).all(axis=-1) & (np.abs(want).max(axis=-1, initial=0.0) > tolerance)
    if blank.any() and (own | blank).all():
        return "unwritten"
    with np.errstate(invalid="ignore"):
        matches = np.abs(got[:, None, :] - want[None, :, :]).max(axis=-1) <= tolerance
    if not matches.any(axis=1).all() or matches[np.arange(len(got)), np.arange(len(got))].all():
        return None
    order = matches.argmax(axis=1)
    return "order" if len(set(order.tolist())) == len(order) else "copies"


def width_probe(worker: Worker, function: str, subject: Subject, points: Sequence[Values], widths: Sequence[int],
                truth: Callable[[Values], np.ndarray], tokens: int, how: str, found: Found) -> bool:  # fmt: skip
    """``function``'s outputs at ``points``, one per head width of ``widths`` (the probes' own first, then past common slab
    widths), each with one-hot values whose first ``tokens`` features give the map read out (``how`` says how it was called),
    against ``truth``; whether wide heads alone are wrong while every row of the map is still a distribution: the logits,
    not the normaliser, change with the width other than as q·k/√D (a scale taken from part of the head, or a power of two
    where √D is not one)."""
    found.probes.append(f"{function}: the maps at head widths {', '.join(map(str, widths))}")
    outs = probes.sweep(worker, subject, points)
    wrong = [d for d, out, point in zip(widths, outs, points) if not is_right(out, truth(point))]
    if not wrong or wrong[0] == widths[0]:
        return False
    read = [np.asarray(out)[..., :tokens] for d, out in zip(widths, outs) if d in wrong and out is not None]
    if not read or not all(np.isfinite(m).all() and m.min() >= 0.0 and np.allclose(m.sum(axis=-1), 1.0, atol=1e-9) for m in read):
        return False
    right, bad = [str(d) for d in widths if d not in wrong], [str(d) for d in wrong]
    found.add(function, "scale", "forward", f"Heads of width {listed(bad)} get the wrong logits",
              f"With {how}, the map is right at head width D = {listed(right)} but wrong at D = {listed(bad)}, though each row still "
              "sums to 1: the logits change with the head width other than as q·k/√D (a scale taken from part of the head, such "
              "as one slab of a split dot product, or rounded to a power of two?).",
              "compute the whole dot product q·k over all D features, then scale it once by exactly 1/√D")  # fmt: skip
    return True


def listed(words: Sequence[str]) -> str:
    """``words`` in a sentence: "q", "q and k", "8, 32 and 40"."""
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


def length_probe(worker: Worker, function: str, subject: Callable[[bool], Subject], points: Sequence[Values], lengths: Sequence[int],
                 truth: Callable[[Values, bool], np.ndarray], found: Found, tokens: TokenAxes) -> bool:  # fmt: skip
    """``function``'s outputs at ``points``, one per sequence length of ``lengths`` (the probes' own first, then past common
    block sizes), causal and not (``subject(causal)``), against ``truth(point, causal)``; whether long sequences alone are
    wrong (a finding says from which length, whether with one causal mode only, and which queries never read the first or
    the last key: :func:`_unread_keys`). The longer points are sent only when the first is right in both modes (a fault
    there is not one of long sequences), and their truths are kept for the points' values (:func:`_long_truth`)."""
    found.probes.append(f"{function}: long sequences, causal and not")
    wrong: dict[bool, list[int]] = {True: [], False: []}
    failed = []  # (output, its truth) of every wrong call
    for first, last in ((0, 1), (1, len(points))):
        for causal, lengths_wrong in wrong.items():
            for t, out, point in zip(lengths[first:last], probes.sweep(worker, subject(causal), points[first:last]), points[first:last]):
                expected = _long_truth(function, truth, point, causal)
                if not is_right(out, expected):
                    lengths_wrong.append(t)
                    failed.append((out, expected))
        if wrong[True] or wrong[False]:
            break
    failing = sorted(set(wrong[True]) | set(wrong[False]))
    if not failing or failing[0] == min(lengths):
        return False  # right at every length, or wrong already at the shortest: not a fault of long sequences
    shortest = failing[0]
    span = f"right up to T = {max(t for t in lengths if t < shortest)} and wrong from T = {shortest}"
    if all(is_right(out, expected, FLOAT32_LIKE) for out, expected in failed):
        shares, errors = zip(*((off_share(out, expected), float(np.max(np.abs(out - expected)))) for out, expected in failed if out is not None))
        if max(shares) < DENSE:
            return faint_weights_finding(found, function, max(shares), max(errors), f" on long sequences ({span})")
        found.add(function, "dtype", "forward", "Long sequences are computed in float32",
                  f"Your float64 output is {span}, where it is off by no more than float32's accuracy: past some length "
                  "something computes in float32 (a cast, or a buffer, chosen by the sequence length).",
                  "compute in the inputs' dtype at every length")  # fmt: skip
        return True
    only = [causal for causal in (True, False) if wrong[causal] and not wrong[not causal]]
    if only:
        mode = f"causal={only[0]}"
        found.add(function, "mask", "forward", f"Long sequences are wrong with {mode} only",
                  f"With {mode}, your output is {span}; with causal={not only[0]} it is right at every length: what differs between "
                  "the two modes (the mask, or the keys each query block reads) breaks past a block or buffer size.",
                  "without the causal mask every query reads every key: a block of queries needs all keys, not those up to its end")  # fmt: skip
        return True
    if all(out is not None and not np.isfinite(out).all() for out, _ in failed):
        found.add(function, "stability", "forward", "Long sequences give NaN or infinite outputs",
                  f"Your float64 output is {span}, where it is NaN or infinite, with and without the mask: something grows with "
                  "the sequence length until exp overflows or every weight of a row underflows (a shift other than the row's "
                  "largest logit, a sum of exponentials taken unshifted).",
                  "subtract each row's largest logit (its value) before exp: every exponent is then at most 0, the largest 0")  # fmt: skip
        return True
    moved = {_moved_tokens(out, expected, tokens.output_axis) for out, expected in failed}
    if moved == {"order"}:
        found.add(function, tokens.assembly, "forward", "On long sequences the output's tokens come back in another order",
                  f"Your output is {span}, and then every token's output is right but in another token's place: the blocks or "
                  "chunks of a long sequence are put back together in the wrong order.",
                  "assemble the chunks in the order of their first token (torch.cat of chunks visited first to last)")  # fmt: skip
        return True
    if moved == {"unwritten"}:
        found.add(function, tokens.assembly, "forward", "On long sequences some tokens' outputs are never written: they are 0",
                  f"Your output is {span}, and then every token's output is either right or all zeros: the result computed for "
                  "those tokens never reaches the output (written in place into a copy, as `out[..., index, :].copy_(part)` or "
                  "`out[index].add_(part)` with an index tensor make, or a chunk left out of the output).",
                  "put each chunk's result into the output by assignment (`out[..., rows, :] = part`, which writes into out) or "
                  "build the output with torch.cat of the chunks")  # fmt: skip
        return True
    if None not in moved:
        found.add(function, tokens.assembly, "forward", "On long sequences some tokens' outputs are copies of other tokens'",
                  f"Your output is {span}, and then every token's output is some token's right output, but some stand in several "
                  "places and others are lost: the chunks of a long sequence are written into one buffer that later chunks "
                  "overwrite (results kept as views of a reused buffer), or put back over one another.",
                  "give every chunk's result memory of its own (a new tensor per chunk, or .clone() before the buffer is reused), "
                  "and put each at its own tokens")  # fmt: skip
        return True
    longest = max(failing)
    if _unread_keys(worker, function, subject(False), points[list(lengths).index(longest)], tokens, span, found):
        return True
    found.add(function, "softmax", "forward", "Long sequences are wrong",
              f"Your output is {span}, with and without the mask: a blocked or chunked computation goes wrong past its first "
              "block (an online softmax must rescale its running sum and output by exp(old max − new max) when the maximum grows; "
              "every key, the last partial block's too, must be visited).",
              "check the blocked computation against torch.softmax on a sequence several blocks long")  # fmt: skip
    return True


_long_truths: dict[tuple[Any, ...], np.ndarray] = {}


def _long_truth(function: str, truth: Callable[[Values, bool], np.ndarray], point: Values, causal: bool) -> np.ndarray:
    """``truth(point, causal)``, the output of ``function``, in float64 arithmetic (a probe judges at :data:`RIGHT`, 10⁴ times float64's error over the
    longest row it reads), kept for the point's values: the length probes draw the same points for every submission of a
    seed (grader.toolkit.domain.offshoot), so a batch computes their truths once per grading process."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(point):
        array = np.ascontiguousarray(point[name])
        digest.update(f"{name}{array.shape}{array.dtype}".encode())
        digest.update(array.tobytes())
    key = (truth.__module__, function, causal, digest.digest())
    if key not in _long_truths:
        if len(_long_truths) >= 64:
            _long_truths.clear()
        with softmax.computed_in(np.float64):
            _long_truths[key] = truth(point, causal)
    return _long_truths[key]


def _unread(worker: Worker, unmasked: Subject, point: Values, tokens: TokenAxes) -> dict[str, np.ndarray] | None:
    """For the first and the last key of ``point``, the queries whose output stays exactly as it was when that key's value
    changes (keys no query leaves out are not listed), without the mask; None when the outputs cannot be read."""
    length = np.shape(point[tokens.value])[tokens.value_axis]
    moved = []
    for key in (0, length - 1):
        value = np.array(point[tokens.value], dtype=np.float64)
        np.moveaxis(value, tokens.value_axis, 0)[key] += 1.0
        moved.append({**point, tokens.value: value})
    base, *outs = probes.sweep(worker, unmasked, [point, *moved])
    if base is None or any(out is None or out.shape != base.shape for out in outs) or base.ndim <= tokens.output_axis:
        return None
    unread = {}
    for key, out in zip(("first", "last"), outs):
        assert out is not None
        same = (np.moveaxis(out, tokens.output_axis, 0) == np.moveaxis(base, tokens.output_axis, 0)).reshape(length, -1).all(axis=1)
        if same.any():
            unread[key] = np.flatnonzero(same)
    return unread


def _unread_keys(worker: Worker, function: str, unmasked: Subject, point: Values, tokens: TokenAxes, span: str, found: Found) -> bool:
    """A finding when, without the mask, changing the value of the first or the last key of ``point`` (a long sequence the
    output is wrong for) leaves some query's output exactly as it was: without the mask every query reads every key with a
    weight above 0. A key no query reads is never visited (`softmax`: a loop over key blocks that stops short or steps past
    some); one that other queries leave out once the other inputs' tokens are put in reverse order is dropped by its weight
    (`softmax`: only the largest weights of a row kept); one the same queries leave out whatever the inputs is hidden from
    them by position (`mask`: a window, a buffer shorter than the sequence). Whether there was one."""
    unread = _unread(worker, unmasked, point, tokens)
    if not unread:
        return False
    length = np.shape(point[tokens.value])[tokens.value_axis]
    lead = f"Your output is {span}. With causal=False at T = {length}, where every query reads every key"
    never = [key for key, queries in unread.items() if len(queries) == length]
    if never:
        found.add(function, "softmax", "forward", "On long sequences some keys are never read",
                  f"{lead}, the {' and the '.join(never)} key's value changes no query's output: no query reads that key (a loop over "
                  "key blocks that stops before the last partial block, or steps past some keys).",
                  "visit every key: ceil(T / block) blocks, each as wide as the step between them")  # fmt: skip
        return True
    said = "; ".join(f"the {key} key's value changes nothing for {len(q)} of the {length} queries (first: query {int(q[0])})" for key, q in unread.items())
    mirrored = {n: np.flip(x, tokens.value_axis) if n != tokens.value and np.ndim(x) > tokens.value_axis else x for n, x in point.items()}
    again = _unread(worker, unmasked, mirrored, tokens)
    if again is not None and any(not np.array_equal(unread.get(key, []), again.get(key, [])) for key in ("first", "last")):
        found.add(function, "softmax", "forward", "On long sequences keys of small weight are dropped",
                  f"{lead}, {said}; with the other inputs' tokens in reverse order, other queries leave those keys out: which keys a "
                  "query reads depends on the logits, so weights are kept for the largest logits of each row only (a top-k or a "
                  "threshold), not for every key.",
                  "normalise over every key the mask lets a query see, however small its weight")  # fmt: skip
        return True
    found.add(function, "mask", "forward", "On long sequences some queries never read some keys",
              f"{lead}, {said}, and the same queries leave it out whatever the inputs: those queries leave that key out by its "
              "position (a window of keys, or a buffer shorter than the sequence).",
              "let every query read all T keys with causal=False, and every key up to its own position with causal=True")  # fmt: skip
    return True


def off_share(got: np.ndarray, expected: np.ndarray) -> float:
    """The share of the elements of ``got`` that are not right (:data:`RIGHT` of ``expected``'s largest magnitude)."""
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    return float(np.mean(np.abs(got - expected) > RIGHT * scale)) if expected.size else 0.0


def precision_finding(found: Found, function: str, got: np.ndarray | None, expected: np.ndarray) -> bool:
    """A finding when a float64 result is right only to float32's accuracy, whether there was one: a dtype finding when most
    elements are off, as float32 arithmetic leaves them; else :func:`faint_weights_finding`."""
    if got is None or is_right(got, expected) or not is_right(got, expected, FLOAT32_LIKE):
        return False
    error, share = float(np.max(np.abs(got - expected))), off_share(got, expected)
    if share < DENSE:
        return faint_weights_finding(found, function, share, error)
    found.add(function, "dtype", "forward", "float64 inputs are computed in float32",
              f"For float64 inputs your result is off by about {error:.1g}, the accuracy of float32, not of float64, in most of its elements.",
              "compute in the inputs' dtype throughout: no .float(), no float32 constants or tensors created without dtype=")  # fmt: skip
    return True


def faint_weights_finding(found: Found, function: str, share: float, error: float, where: str = "") -> bool:
    """A softmax finding for a float64 output off by tiny amounts (at most :data:`FLOAT32_LIKE` of its scale) in a few
    elements only (``share`` of them, below :data:`DENSE`): too little for a wrong formula, too few for float32 arithmetic,
    which leaves almost every element off. Weights far below their row's largest are lost. Returns True."""
    found.add(function, "softmax", "forward", "Small attention weights are lost",
              f"Your float64 output{where} is off in only {share:.1%} of its elements, by at most {error:.1g}: too little for a wrong "
              "formula, and too few elements for float32 arithmetic, which leaves nearly every element off. Errors this small "
              "and this sparse come from the smallest weights: weights tiny but not zero dropped or flushed to zero (a threshold "
              "below the row's largest logit, a top-k, an early underflow).",
              "keep every visible key's weight, however small: exp(logit − row max) for all of them, normalised by their whole sum")  # fmt: skip
    return True


ROUNDING_STEP = 1e-9
"""How far :func:`rounding_probe` moves each input, relative to its size: 60 times below float32's resolution, 10⁷ times
above float64's."""
HALF_ROUNDING_STEP = 1e-6
"""How far :func:`half_precision_finding` moves each float32 input, relative to its size: 8 times float32's resolution, 500
times below float16's."""
COARSE_STEP = 0.03
"""How far :func:`rounding_probe` moves each input to find the output elements that depend on the inputs at all: several
times bfloat16's resolution."""


def _moved(values: Values, step: float) -> dict[str, Any]:
    """``values`` with each element of each tensor grown by 0.5 to 1.5 ``step`` of its size (a product of two inputs then never
    stays put by their moves cancelling), drawn from a generator of its own (the probes after this one meet the inputs they
    always met); scalar options stay."""
    steps = np.random.default_rng(0)
    return {n: np.asarray(x) * (1.0 + step * steps.uniform(0.5, 1.5, np.shape(x))) if np.ndim(x) else x for n, x in values.items()}


def _unmoved_share(worker: Worker, subject: Subject, values: Values, base: np.ndarray | None, step: float) -> float | None:
    """The share of the output elements that depend on the inputs (those a move of :data:`COARSE_STEP` changes; ``base``: the
    output before any move) which stay exactly where they were when every input moves by about ``step`` of its size, or None
    when that cannot be told (no finite, non-zero output to compare, or a move that changes what comes back). Elements no
    move changes (zeros written as padding, a clamp's bound) tell nothing of precision."""
    if base is None or not np.isfinite(base).all() or not np.abs(base).max(initial=0.0) > 0.0:
        return None
    fine, coarse = probes.sweep(worker, subject, [_moved(values, step), _moved(values, COARSE_STEP)])
    if fine is None or coarse is None or np.shape(fine) != np.shape(base) or np.shape(coarse) != np.shape(base):
        return None
    depends = coarse != base
    return float(np.mean(fine[depends] == base[depends])) if depends.any() else None


def rounding_probe(worker: Worker, subject: Subject, values: Values, base: np.ndarray | None, found: Found) -> bool:
    """A dtype finding when float64 inputs moved by about :data:`ROUNDING_STEP` (each element of each tensor) leave most of the
    output elements that depend on the inputs exactly where they were (:func:`_unmoved_share`); whether they did. A
    computation in float64 moves every such element, by about 1e-9 of its size; one that rounds its inputs or its
    intermediate results to float32, float16 or bfloat16 absorbs so small a move. Run before the probes that read structure
    out of the output, which such rounding (errors of 1e-3 in bfloat16) would mislead."""
    if base is None or not np.isfinite(base).all() or not np.abs(base).max(initial=0.0) > 0.0:
        return False
    found.probes.append(f"{subject.function}: inputs moved by one part in 10⁹")
    still = _unmoved_share(worker, subject, values, base, ROUNDING_STEP)
    if still is None or still < 0.5:
        return False
    found.add(subject.function, "dtype", "forward", "Inside, your function computes in a lower precision than its inputs'",
              f"Moving every float64 input by one part in 10⁹ left {still:.0%} of the output elements that depend on them exactly "
              "unchanged; computed in float64, every such element moves (by about 1e-9 of its size). Something rounds the inputs or "
              "intermediate results to float32, float16 or bfloat16 (.float(), .half(), .to(torch.bfloat16), autocast, a tensor created without dtype=).",
              "compute in the inputs' dtype throughout, and cast nothing down")  # fmt: skip
    return True


RANDOM_STEPS = re.compile(r"dropout|\brand(n|int|perm)?(_like)?\s*\(|bernoulli|multinomial|poisson|\bnormal\s*\(|\.\s*(normal|uniform|exponential|"
                          r"random|cauchy|log_normal|geometric)_\s*\(|\brandom\b|\b(new_)?empty(_like|_strided)?\s*\(", re.IGNORECASE)
"""What makes a function's output vary from call to call in its code: dropout (nn.Dropout too), torch's and Python's random
draws, and uninitialised memory (torch.empty)."""


def code_of(source: str) -> str:
    """``source``'s tokens without its comments and string literals (docstrings: the stub's mention dropout), space-separated;
    the source itself when it does not tokenize."""
    try:
        return " ".join(t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in (tokenize.COMMENT, tokenize.STRING))
    except (tokenize.TokenError, SyntaxError):
        return source


def randomness_probe(worker: Worker, subject: Subject, values: Values, grads: tuple[str, ...], found: Found,
                     source: str | None = None) -> np.ndarray | None:  # fmt: skip
    """The output of two identical calls (``grads`` requiring grad), or None when they disagree (a randomness finding), when
    the same call made again after a call on other values disagrees (a ``state`` finding: the later probes, each a sequence
    of calls, would read that state as a fault of the forward) or when they gave none.

    Outputs that differ in a file with no random step in ``source`` come
    from state kept between calls, not randomness (a ``state`` finding).
    """
    found.probes.append(f"{subject.function}: two identical calls, and the same call after another")
    agreed = probes.determinism(worker, subject, values, grads)
    if agreed is None:
        return None
    gap, after, output = agreed
    if not gap and after:
        found.add(subject.function, "state", "forward", "The same call gives another output after a call on other values",
                  f"Called twice with the same inputs your function agreed with itself, but called with them again after a call on "
                  f"other values of the same shapes it returned outputs up to {after:.3g} apart: something it keeps from call to "
                  "call (running statistics or accumulators, a buffer reused without being reset, a cache keyed by the shapes) "
                  "carries the earlier call into the later one.",
                  "keep nothing between calls that depends on the inputs: start every call from fresh buffers")  # fmt: skip
        return None
    if not gap:
        return output
    if source is not None and not RANDOM_STEPS.search(code_of(source)):
        found.add(subject.function, "state", "forward", "Two identical calls give different outputs: something kept between calls changes",
                  f"Called twice with the same inputs, your function returned outputs up to {gap:.3g} apart, and your file has no random "
                  "step: something it keeps from call to call (a cached mask or buffer changed in place, a running maximum, a counter) "
                  "changes what the next call computes.",
                  "keep nothing between calls that a call modifies: build masks and buffers in every call, or never change what you keep")  # fmt: skip
        return None
    found.add(subject.function, "randomness", "forward", "Two identical calls give different outputs",
              f"Called twice with the same inputs, your function returned outputs up to {gap:.3g} apart: dropout or other randomness is left on.",
              "remove dropout and any random step: the function must be deterministic")  # fmt: skip
    return None


def stale_input_probe(worker: Worker, subject: Subject, first: Values, second: Values, truth: Callable[[Values], np.ndarray],
                      parts: Mapping[str, str], found: Found) -> bool:  # fmt: skip
    """Two calls on inputs of the same shapes: the second output must be the second inputs' own. When it is instead the right
    output for the second inputs with one input of ``parts`` (input -> its component) taken from the first call, what the
    function computes from that input is kept between calls; whether that was found."""
    found.probes.append(f"{subject.function}: two calls on other values of the same shapes")
    out = probes.output(probes.ask(worker, [subject.request(first), subject.request(second)])[1])
    if out is None or is_right(out, truth(second)):
        return False
    for name, component in parts.items():
        if is_right(out, truth({**second, name: first[name]})):
            found.add(subject.function, component, "forward", *sequences.stale_input(name, "Called right after a call on other values of the same shapes, your"))
            return True
    return False


OWN_BACKWARD = re.compile(r"\bdef\s+backward\b")
"""An autograd.Function's backward pass, written by hand."""
GRADIENT_HOOKS = re.compile(r"\bregister_(?:hook|(?:full_)?backward_hook|multi_grad_hook)\s*\(")
"""A hook that rewrites the gradient flowing through a tensor or a module: a gradient written by hand too."""
SAVED_TENSOR_HOOKS = re.compile(r"\bsaved_tensors_hooks\s*\(")
"""Hooks that rewrite what the backward pass reads of the tensors the forward saved (compressed, offloaded): part of the
backward pass written by hand."""


def uses_custom_backward(source: str | None) -> bool:
    """Whether the submission writes part of its backward pass itself (:data:`OWN_BACKWARD`, :data:`GRADIENT_HOOKS`,
    :data:`SAVED_TENSOR_HOOKS`)."""
    code = code_of(source or "")
    return any(pattern.search(code) is not None for pattern in (OWN_BACKWARD, GRADIENT_HOOKS, SAVED_TENSOR_HOOKS))


def _cutting_line(source: str | None, function: str, name: str) -> tuple[int, str, str] | None:
    """The first line of ``function`` that takes ``name`` out of the autograd graph: (number, code, "number" for a
    Python number made of it, "detach" for a tensor cut off, or handed to an autograd.Function's apply inside a list or
    tuple, which autograd does not look into), or None."""
    number = rf"\b{re.escape(name)}\b\S*\.(item|tolist)\(\)|\bfloat\(\s*{re.escape(name)}\b"
    detach = (rf"\b{re.escape(name)}\b\S*\.(detach\(\)|data\b|numpy\(\))|torch\.tensor\(\s*{re.escape(name)}\b"
              rf"|\.apply\((?:[^()\[\],]*,\s*)*[\[(][^\])]*\b{re.escape(name)}\b")  # fmt: skip
    found = slips.matching_line(source, function, re.compile(f"{detach}|{number}"))
    if found is None:
        return None
    line, code = found
    return line, code, "detach" if re.search(detach, code) else "number"  # `x.detach() if tensor else float(x)` cuts a tensor by detaching


def gradient_finding(found: Found, function: str, condition: str, result: Consistency, source: str | None,
                     parts: Mapping[str, str] | None = None) -> bool:  # fmt: skip
    """A finding from one gradient comparison: inputs without gradient (graph) or with a wrong one (backward); whether there was one.
    ``parts``: an input -> the component that handles it (a gate, a coefficient): a gradient hidden from autograd for that
    input alone is that component's fault."""
    if result.problem is not None:
        told = slips.exception_kind(result.problem)
        if told is not None and told[0] == "graph" and condition:
            found.add(function, "graph", "gradients", f"The output is cut off from autograd{condition}",
                      f"Differentiating your output{condition} raised {result.problem}", "keep the path to the output in torch whatever requires grad: "
                      "no torch.no_grad() or .detach() depending on which inputs require grad", signature=NO_GRAPH)  # fmt: skip
            return True
        if told is not None and told[0] == "mutation" and INPLACE_BACKWARD in result.problem:  # torch says so in the backward pass only
            found.add(function, "graph", "gradients", "The backward pass fails: an in-place operation overwrote a tensor autograd saved",
                      f"Differentiating your output{condition} raised {result.problem}", "compute on new tensors (`w = w.masked_fill(...)`, "
                      "not `w.masked_fill_(...)` or `w[...] = 0`) wherever autograd may need the old values", signature=INPLACE_BACKWARD)  # fmt: skip
            return True
        hand_written = result.in_backward and uses_custom_backward(source)  # whatever it raised, the student's backward raised it
        if not hand_written and (told is not None or "grad" not in result.problem.lower()):
            return False  # a detached output or an in-place operation is a contract slip; a failing forward is not the backward's fault
        found.add(function, "backward", "gradients", "The backward pass fails",
                  f"Differentiating your output raised {result.problem}{condition}.", "make the backward pass return one gradient per input, of its shape")  # fmt: skip
        return True
    missing, differs, infinite = result.named("missing"), result.named("differs"), result.named("not_finite")
    agree = result.named("agrees")
    rest = f"; {', '.join(agree)} agree" if agree else ""
    custom = uses_custom_backward(source)
    cut = {name: _cutting_line(source, function, name) for name in missing}
    if missing == ["coefficient"]:  # the coefficient's own path: how it enters the product is all that can cut it alone
        line = cut["coefficient"]
        number = line is not None and line[2] == "number"
        how = "" if line is None else f": line {line[0]}, `{line[1]}`, " + ("makes it a Python number" if number else "copies it out of the graph")
        found.add(function, "coefficient", "gradients",
                  "The coefficient is turned into a Python number, so it gets no gradient" if number else "No gradient reaches the coefficient",
                  f"Your output changes with the coefficient{condition}, yet no gradient reaches it{rest}{how}.",
                  "keep a tensor coefficient a tensor and use it as it is (coefficient * A2 works for a Python float and a tensor "
                  "alike): no .item(), float(), torch.tensor(coefficient) or .detach()", inputs=("coefficient",), signature=NO_GRAPH)  # fmt: skip
        return True
    if missing:
        lines = [f"line {line[0]}, `{line[1]}`" for line in cut.values() if line is not None]
        component = "backward" if custom and not lines else "graph"
        found.add(function, component, "gradients", f"No gradient reaches {', '.join(missing)}",
                  f"Your output changes with {', '.join(missing)}{condition}, yet no gradient reaches {'it' if len(missing) == 1 else 'them'}{rest}"
                  + (f"; the path is cut at {' and '.join(lines)}." if lines else "."),
                  "return a gradient for every input that requires grad" if component == "backward" else
                  "keep the path from every input to the output in torch: no .detach(), .item(), float(), torch.no_grad() or torch.tensor(...)",
                  inputs=tuple(missing), signature=NO_GRAPH)  # fmt: skip
        return True
    if infinite and not custom:
        found.add(function, "stability", "gradients", f"The gradient for {', '.join(infinite)} is not finite",
                  f"Your gradient for {', '.join(infinite)} holds NaN or infinity where finite differences of your own forward are finite{condition}{rest}.",
                  "a masked or discarded branch still enters the backward pass (torch.where keeps the gradient of both sides, so an exp "
                  "or division that overflows on the discarded side gives NaN): make every branch finite before selecting",
                  inputs=tuple(infinite))  # fmt: skip
        return True
    differs += infinite
    if differs:
        # without a hand-written backward, autograd differentiates the forward it ran: a gradient can only
        # disagree with that forward where part of the computation was hidden from it
        evidence = f"Your gradient for {', '.join(differs)} disagrees with finite differences of your own forward{condition}{rest}."
        if custom:  # a hook on one part's tensor, with no backward of its own, rewrites that part's gradient alone
            code = code_of(source or "")
            hooked = len(differs) == 1 and OWN_BACKWARD.search(code) is None and GRADIENT_HOOKS.search(code) is not None
            found.add(function, (parts or {}).get(differs[0], "backward") if hooked else "backward", "gradients",
                      f"The gradient for {', '.join(differs)} is wrong", evidence, "fix the backward pass for those inputs", inputs=tuple(differs))  # fmt: skip
        else:
            component = (parts or {}).get(differs[0], "graph") if len(differs) == 1 else "graph"
            found.add(function, component, "gradients", f"Part of the computation of {', '.join(differs)}'s gradient is hidden from autograd",
                      f"{evidence} Your file has no hand-written backward, so autograd differentiated a forward with a piece cut out of its graph.",
                      "look for .detach(), .data, torch.no_grad() or a value turned into a Python number or a new tensor in the forward, "
                      "and keep that piece in the graph", inputs=tuple(differs))  # fmt: skip
        return True
    return False


EXPANDED_BACKWARD = ("autograd itself sums the gradient of an expanded view over its stride-0 axes: return the gradient of "
                     "the tensor your backward was given, of its shape, and reduce or rescale nothing for its strides")
"""The advice for a hand-written backward pass wrong only for inputs expanded with stride 0 (:func:`expanded_runs`)."""

LONG_RUN_TOKENS = 130
"""The sequence length of the exercises' long gradient runs: past the block sizes 64 and 128, and a multiple of neither (a
blocked backward pass's later and partial blocks)."""


@dataclass(frozen=True)
class GradientRun:
    """One comparison of the gradients with the forward.

    ``values`` are the inputs and ``grads`` those that require grad; ``where`` says what is special about the run (e.g.
    " at coefficient 0"). ``component``: what a graph or backward fault found first in this run points at (None: the
    fault's own; ``cuts_too``: a gradient that reaches no input as well, not only a wrong or failing one), with
    ``explanation`` (its title and advice) when it needs other words and ``contrast`` (what the runs before showed) added
    to its evidence. ``subject`` and ``cotangent``: how the function is
    called and differentiated when not as in the probe's other runs (another causal flag, a longer sequence). ``truth``: for
    a run at inputs where the forward may be wrong when it is right at the probe's own (a longer sequence), the oracle's
    output there; a run whose forward is wrong at its inputs says nothing of the backward pass (the value checks report
    that forward), so it finds nothing."""

    values: Values
    grads: tuple[str, ...]
    where: str = ""
    component: str | None = None
    subject: Subject | None = None
    explanation: tuple[str, str] | None = None
    cotangent: np.ndarray | None = None
    truth: Callable[[Values], np.ndarray] | None = None
    cuts_too: bool = True
    contrast: str = ""


def expanded_runs(values: Values, grads: tuple[str, ...], laid_out: Callable[[str], Subject], expansions: Mapping[int, str]) -> list[GradientRun]:
    """Runs with every input expanded along each dim of ``expansions`` (which names them: 0 "over the batch"), in turn: stride 0
    there, its values the first element's (:func:`domain.broadcast_along`), each gradient read at the tensor the input
    expands. ``laid_out(layout)`` is the function with its inputs in memory ``layout``. Code that takes a stride-0 input for
    a setting, not a trained tensor, and cuts it from the graph shows there; a hand-written backward that is right for the
    same values in contiguous memory (the runs before) but wrong here handles the expansion itself ("strided")."""
    runs = []
    for axis, along in expansions.items():
        spread = {name: domain.broadcast_along(np.asarray(v), axis) for name, v in values.items() if np.ndim(v) > max(axis, 1)}
        runs.append(GradientRun({**values, **spread}, grads, f" with the inputs expanded {along} (stride 0)", "strided", laid_out(domain.expanded_on(axis)),
                                (f"The backward pass is wrong with the inputs expanded {along} (stride 0)", EXPANDED_BACKWARD), cuts_too=False,
                                contrast=" In contiguous memory, the probe's runs found your gradients right."))  # fmt: skip
    return runs


def long_run(values: Values, grads: tuple[str, ...], cotangent: np.ndarray, tokens: int, causal: bool, unmasked: Subject,
             truth: Callable[[Values, bool], np.ndarray]) -> GradientRun:  # fmt: skip
    """A run on ``values``, a sequence of ``tokens`` tokens (longer than the probe's own), with the mask or without it
    (``unmasked``: the subject with causal=False), that finds nothing where its forward is not ``truth(values, causal)``: a
    backward pass computed in blocks goes wrong only past its first block."""
    where = f" at T = {tokens}" + ("" if causal else " with causal=False")
    return GradientRun(values, grads, where, subject=None if causal else unmasked, cotangent=cotangent, truth=lambda v: truth(v, causal))


def replayed_runs(values: Values, replayed: Iterable[tuple[str, ...]], own: Iterable[tuple[str, ...]]) -> list[GradientRun]:
    """A run on ``values`` for each set of inputs requiring grad of ``replayed`` (the checks' calls whose output came back cut
    off from autograd: :func:`grader.toolkit.slips.cut_subsets`) that the probe's ``own`` sets do not already hold."""
    made = set(own)
    return [GradientRun(values, grads) for grads in replayed if grads not in made]


def gradients_probe(worker: Worker, subject: Subject, runs: Sequence[GradientRun], cotangent: np.ndarray,
                    rng: np.random.Generator, found: Found, source: str | None, parts: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """The gradients against finite differences of the forward, run after run (inputs, which require grad) until one finds a fault.

    When the forward is already known to be wrong, the first run alone tells
    whether the backward is wrong too; the others look for faults that only
    some inputs left without requires_grad, or special inputs, bring out.
    ``parts``: as for :func:`gradient_finding`.
    """
    found.probes.append(f"{subject.function}: gradients against finite differences of its own forward")
    everything = runs[0].grads
    if any(f.function == subject.function and f.stage == "forward" for f in found.findings):
        runs = runs[:1]
    for run in runs:
        frozen = [n for n in everything if n not in run.grads]
        condition = f" when {', '.join(frozen)} do{'es' if len(frozen) == 1 else ''} not require grad" if frozen else ""
        condition += run.where
        result = probes.consistency(worker, run.subject or subject, run.values, run.grads, cotangent if run.cotangent is None else run.cotangent, rng)
        if run.truth is not None and result.output is not None and not is_right(result.output, run.truth(run.values)):
            continue
        before = len(found.findings)
        if gradient_finding(found, subject.function, condition, result, source, parts) or (not condition and NO_GRAPH in (result.problem or "")):
            taken = len(found.findings) > before and found.findings[-1].component in ("graph", "backward")
            if run.component is not None and taken and (run.cuts_too or found.findings[-1].signature != NO_GRAPH):
                title, advice = run.explanation or (found.findings[-1].title, found.findings[-1].advice)
                last = found.findings[-1]
                found.findings[-1] = replace(last, component=run.component, title=title, advice=advice, evidence=last.evidence + run.contrast)
            return  # (with every input requiring grad, a detached output is the contract slip's to name)


def _shifted_within_rows(maps: np.ndarray, expected: np.ndarray, visible: np.ndarray) -> bool:
    """Whether ``maps`` are exponentials of the right logits (``expected``: the right maps, same shape) taken against
    different shifts for different keys: a wrong row that still weighs two of its visible keys in the right ratio (a
    block of keys shifted by its own maximum), or log-weights off from the right ones by one shift per key and one per
    query (a maximum taken over the queries' axis). Logits computed from other inputs (another branch's keys, a folded
    layout, a scale of 0) leave the errors of a row all different, and not one shift per key."""
    t = visible.shape[-1]
    rows, keys = np.nonzero(visible)
    design = np.zeros((rows.size, 2 * t))
    design[np.arange(rows.size), rows] = 1.0
    design[np.arange(rows.size), t + keys] = 1.0
    for got, want in zip(maps.reshape(-1, t, t), expected.reshape(-1, t, t)):
        if np.allclose(got, want, rtol=0.0, atol=attention_maps.FITS) or not np.all(want[visible] > 0.0):
            continue
        errors = np.where(visible, np.log(np.where(visible, got, 1.0)) - np.log(np.where(visible, want, 1.0)), 0.0)
        for i in range(t):
            row = np.sort(errors[i, visible[i]])
            if not np.allclose(got[i], want[i], rtol=0.0, atol=attention_maps.FITS) and np.any(np.diff(row) < attention_maps.FITS):
                return True
        shifts = np.linalg.lstsq(design, errors[rows, keys], rcond=None)[0]
        if np.max(np.abs(design @ shifts - errors[rows, keys])) < attention_maps.FITS:
            return True
    return False


def _counted_again(maps: np.ndarray, expected: np.ndarray, visible: np.ndarray) -> int:
    """The most times a visible key is counted in a row of ``maps`` (the right maps: ``expected``) whose weights are the
    right ones times whole numbers, renormalised: the weight of each key, over the row's lightest, is a whole multiple of
    its right weight (a key gathered several times, its index clamped into range or its window overlapping, and the
    copies left unmasked); 1 when no row is so."""
    most = 1
    for got, want in zip(maps.reshape(-1, *visible.shape), expected.reshape(-1, *visible.shape)):
        for row, right, seen in zip(got, want, visible):
            if not seen.any() or not np.all(right[seen] > 1e-12) or np.allclose(row, right, rtol=0.0, atol=attention_maps.FITS):
                continue
            ratio = row[seen] / right[seen]
            if ratio.min() <= 0.0:
                return 1
            counts = ratio / ratio.min()
            if not np.allclose(counts, np.round(counts), rtol=0.0, atol=1e-6):
                return 1
            most = max(most, int(np.round(counts.max())))
    return most


def _softmax_of_maps(maps: np.ndarray, expected: np.ndarray) -> bool:
    """Whether ``maps`` are the softmax, over every key, of the right maps ``expected`` (a softmax applied to its own output)."""
    with np.errstate(over="ignore", invalid="ignore"):
        weights = np.exp(expected - expected.max(axis=-1, keepdims=True))
        twice = weights / weights.sum(axis=-1, keepdims=True)
    return bool(np.isfinite(maps).all()) and np.allclose(maps, twice, rtol=0.0, atol=attention_maps.FITS)


def unexplained_maps(found: Found, function: str, maps: np.ndarray, how: str, expected: np.ndarray, causal: bool = True) -> bool:
    """A finding for causal maps ([..., T, T], read out of the output with ``how``) that no softmax model explains: weight on
    future keys (the mask), negative weights or rows that do not sum to 1, or rows that sum to 1 and hide exactly the future
    yet are not proportional to exp of the logits while some of their keys are (the softmax: different shifts within a
    row); whether there was one. ``expected``: the right maps, of the same shape. Rows that sum to 1 with no two keys in
    the right ratio are left unexplained: wrong logits (a scale, a branch, a layout) and a wrong normalisation both fit.
    Maps read with causal=False (``causal``) have no future keys."""
    sums = maps.sum(axis=-1)
    finite = np.isfinite(sums)
    if not finite.any():
        return False
    visible = attention_maps.keep(maps.shape[-1], "causal" if causal else "none")
    if _softmax_of_maps(maps, expected):
        found.add(function, "softmax", "forward", "The softmax is applied twice",
                  f"Read out of your output with {how}, each query's weights are a softmax of the right attention weights rather "
                  "than of the logits (hidden keys, whose weight is 0, get exp(0) again).",
                  "apply torch.softmax once, to the scaled and masked logits, and use its output as the weights")  # fmt: skip
        return True
    future = float(np.nan_to_num(np.abs(maps[..., ~visible])).max(initial=0.0))
    if future > attention_maps.FITS:  # the readout is causal: weight on a future key is the mask's fault, whatever else is wrong
        found.add(function, "mask", "forward", "Queries put weight on future keys under causal=True",
                  f"Read out of your output with {how} and causal=True, future keys get weights up to {future:.3g}; no softmax explains "
                  "the maps (a boolean mask with True where attention is forbidden, where scaled_dot_product_attention reads True as allowed?).",
                  "hide key s > query t: masked_fill(torch.triu(ones, 1).bool(), −∞), or a boolean attn_mask that is True where "
                  "attention is allowed (torch.tril(ones).bool())")  # fmt: skip
        return True
    advice = ("normalise each row over all its visible keys, after one shift by the row's own maximum; in an online softmax rescale "
              "the running sum and the accumulator by exp(old max − new max) whenever the maximum grows")  # fmt: skip
    lowest = float(np.nan_to_num(maps, nan=0.0, neginf=-np.inf).min(initial=0.0))
    if lowest < -attention_maps.FITS:
        found.add(function, "softmax", "forward", "Some attention weights are negative: they are not a softmax's",
                  f"Read out of your output with {how}, weights go down to {lowest:.4g}; a softmax gives weights in [0, 1] whose rows "
                  "sum to 1 (log-probabilities, or logits used without their softmax?).",
                  "weight the values with torch.softmax(scores, dim=-1), over the keys")  # fmt: skip
        return True
    if not np.allclose(sums[finite], 1.0, rtol=0.0, atol=1e-9):
        worst = float(sums[finite][np.argmax(np.abs(sums[finite] - 1.0))])
        found.add(function, "softmax", "forward", "The attention weights of a row do not sum to 1",
                  f"Read out of your output with {how}, a query's weights sum to {worst:.4g}, not 1, and no softmax of q kᵀ "
                  "explains them: the normaliser is wrong.", advice)  # fmt: skip
        return True
    if not (np.all(maps[..., ~visible] == 0.0) and np.all(maps[..., visible] > 0.0)):
        return False
    if (copies := _counted_again(maps, expected, visible)) > 1:
        found.add(function, "mask", "forward", "Some keys are counted more than once",
                  f"Read out of your output with {how}, each query's weights sum to 1, but some keys weigh a whole multiple (up to "
                  f"{copies}×) of their right share against the others: those keys enter the row several times (indices clamped into "
                  "range, or overlapping windows of keys), and the copies are not masked.",
                  "let each visible key enter each row once: mask every index that was clamped or repeated")  # fmt: skip
        return True
    if not _shifted_within_rows(maps, expected, visible):
        return False
    found.add(function, "softmax", "forward", "The weights are not a softmax of the logits",
              f"Read out of your output with {how}, each query's weights sum to 1 and hide exactly the future keys, but their "
              "ratios are not exp of the logits' differences for any scale: exponentials taken against different shifts within a row "
              "(a maximum taken over the wrong axis, or a blocked or online softmax that does not rescale what it accumulated)?", advice)  # fmt: skip
    return True


def row_scale_finding(found: Found, function: str, maps: Sequence[tuple[np.ndarray, Mapping[str, np.ndarray]]],
                      structure: attention_maps.MapModel, right: float) -> bool:  # fmt: skip
    """A scale finding when each row of the maps (each with its tensors) is ``structure``'s softmax at a logit scale of its
    own, and the scales differ between rows (one scale for every row is :func:`attention_maps.explain`'s to fit): named
    "queries made unit length" when each row's scale is 1 over its query's length; whether there was one."""
    scales = attention_maps.row_scales(maps, structure)
    if scales is None or not np.isfinite(scales).any():
        return False
    fitted = scales[np.isfinite(scales)]
    if np.ptp(fitted) <= 1e-3 * np.abs(fitted).max():
        return False
    lengths = np.array([np.linalg.norm(tensors[structure.query], axis=-1) for _, tensors in maps])
    unit = np.isfinite(scales) & (lengths > 0)
    if np.allclose(scales[unit] * lengths[unit], 1.0, rtol=1e-6, atol=0.0):
        said, advice = "1 over its query's length: the queries are made unit length (a normalisation) instead of scaled by 1/√D", \
            "keep the queries as they are and divide q kᵀ by √D"  # fmt: skip
    else:
        said, advice = "one that differs from row to row", "divide every row's logits by the same √D, D = q.shape[-1]"
    found.add(function, "scale", "forward", "Each query's logits are scaled by a factor of its own",
              f"Each row of the maps read out of your output is a softmax of q kᵀ at a scale of its own (from {fitted.min():.4g} to "
              f"{fitted.max():.4g}, where 1/√D = {right:.4g} is right for every row): {said}.", advice)  # fmt: skip
    return True


PADDED = (("A key or query of all zeros is treated as masked",
           "With the first key and one query all zeros (as padding tokens are), so that their logits are exactly 0",
           "the mask is taken from the inputs' values (logits equal to 0, keys or queries all zeros)"),
          ("Keys whose value is all zeros are treated as masked",
           "With the first token's value all zeros (as a padding token's is) and ordinary queries and keys",
           "keys are hidden by their values (e.g. a padding mask from value rows that are all zeros)"))  # fmt: skip
"""The padding probe's two calls: (title, what the call was, the cause it shows)."""


def padding_probe(worker: Worker, function: str, subject: Subject, ordinary: Values, zero_logits: Values, zero_value: Values,
                  tied: Values, truth: Callable[[Values], np.ndarray], found: Found) -> bool:  # fmt: skip
    """A mask finding when the output with padding tokens is wrong while ``ordinary`` inputs are right (float32's accuracy
    at least): ``zero_logits`` has the first key and one query all zeros (logits exactly 0), ``zero_value`` the first
    token's value all zeros, both otherwise like ``ordinary``; whether it found one. Only positions may hide a key.

    ``tied`` has every key equal to the first one (not zero): each row's logits are all equal, none of them 0. A wrong
    output there is a softmax that miscounts ties at the row maximum (which a zero query shows too), not a mask read from
    zeros, and is named so first."""
    found.probes.append(f"{function}: every key equal, the first key and one query all zeros, then the first token's value all zeros")
    plain, *outs = probes.sweep(worker, subject, [ordinary, tied, zero_logits, zero_value])
    if not is_right(plain, truth(ordinary), FLOAT32_LIKE):
        return False  # ordinary inputs are wrong too: zeros tell nothing
    out, want = outs.pop(0), truth(tied)
    if out is not None and out.shape == want.shape and not is_right(out, want, FLOAT32_LIKE):
        found.add(function, "softmax", "forward", "Rows whose logits are all equal are normalised wrong",
                  "With every key equal to the first one, so that each row's logits are all equal (and not 0), your output is wrong, "
                  "though it is right for ordinary inputs: a softmax over n equal logits weights each visible key 1/n, so keys tied "
                  "at the row maximum are counted wrong (a normaliser that counts the maximum once, a shortcut for the largest key).",
                  "normalise by the sum of exp(logit − row maximum) over every visible key, ties included, as torch.softmax does")  # fmt: skip
        return True
    for out, point, (title, what, why) in zip(outs, (zero_logits, zero_value), PADDED):
        want = truth(point)
        if out is None or out.shape != want.shape or is_right(out, want, FLOAT32_LIKE):  # (not a precision fault)
            continue
        found.add(function, "mask", "forward", title,
                  f"{what}, your output is wrong, though it is right for ordinary inputs: {why} rather than from the positions.",
                  "build the mask from positions alone (key s > query t), e.g. torch.triu(torch.ones(T, T, dtype=torch.bool), 1), "
                  "and treat zeros like any other value")  # fmt: skip
        return True
    return False


def rearranged_finding(found: Found, function: str, out: np.ndarray | None, want: np.ndarray, component: str, advice: str) -> bool:
    """A ``component`` finding when the output of the right shape (``out``, against ``want``) holds exactly the right numbers,
    in other places (axes reshaped where they should be transposed, halves or heads put back in another order); whether it
    does. No fault of the attention's arithmetic leaves every number of the output as it should be."""
    if out is None or out.shape != want.shape or not np.isfinite(out).all() or is_right(out, want):
        return False
    if not np.allclose(np.sort(out, axis=None), np.sort(want, axis=None), rtol=1e-9, atol=1e-12):
        return False
    places = np.argwhere(~np.isclose(out, want, rtol=1e-9, atol=1e-12))
    found.add(function, component, "forward", "The output holds the right numbers in the wrong places",
              f"Every number of the right output appears in yours, but {len(places)} of {out.size} are elsewhere "
              f"(first at index {tuple(int(i) for i in places[0])}): axes are stacked, reshaped or viewed where "
              "they should be moved with transpose or permute, or parts are put back in another order.", advice)  # fmt: skip
    return True


def failure_words(out: np.ndarray | None) -> str:
    """How a wrong output is wrong, in words: "NaN or infinite" when some element is, else "wrong"."""
    return "NaN or infinite" if out is not None and not np.isfinite(out).all() else "wrong"


def large_logit_failures(
    kinds: Mapping[str, str], cases: Mapping[tuple[str, int], Values], outputs: Sequence[np.ndarray | None], judged: Iterable[int],
    short: int, wrong: Callable[[np.ndarray | None, Values], bool],
) -> tuple[list[tuple[str, int]], list[str], str]:  # fmt: skip
    """Of float32 calls with large logits (``cases`` by (kind, length), ``outputs`` in their order), those at the lengths
    ``judged`` (where an ordinary float32 call is right) whose output is ``wrong``: their keys, their kinds in words ("(at N
    tokens)" past the probes' own length ``short``), and "NaN or infinite" when one of their outputs is not finite, else "wrong"."""
    lengths = set(judged)
    failed = [(key, out) for (key, case), out in zip(cases.items(), outputs) if key[1] in lengths and wrong(out, case)]
    words = list(dict.fromkeys(kinds[kind] + ("" if length == short else f" (at {length} tokens)") for (kind, length), _ in failed))
    broken = any(out is not None and not np.isfinite(out).all() for _, out in failed)
    return [key for key, _ in failed], words, "NaN or infinite" if broken else "wrong"


def unmasked_large_logits_finding(worker: Worker, subject: Subject, kinds: Mapping[str, str], cases: Mapping[tuple[str, int], Values],
                                  ordinary: Sequence[Values], short: int, truth: Callable[[Values], np.ndarray], found: Found,
                                  advice: str) -> bool:  # fmt: skip
    """The float32 large-logit ``cases`` of a stability probe whose causal calls were right, again with ``subject`` (the
    function with causal=False, against ``truth``), beside its ``ordinary`` calls at the lengths of the cases (the probes'
    own ``short`` first): a stability finding when some fail at lengths where ordinary logits are right (a shift taken over
    the keys a causal row sees, such as a running maximum, falls short of a row that sees them all); whether there was one."""
    found.probes.append(f"{subject.function}: float32 logits of hundreds with causal=False")
    outputs = probes.sweep(worker, subject, [*cases.values(), *ordinary])
    lengths = sorted({length for _, length in cases})
    judged = [t for t, out, point in zip(lengths, outputs[len(cases):], ordinary) if is_right(out, truth(point), FLOAT32_LIKE)]
    _, failing, bad = large_logit_failures(kinds, cases, outputs[: len(cases)], judged, short,
                                           lambda out, case: not is_right(out, truth(case), FLOAT32_LIKE))  # fmt: skip
    if not failing:
        return False
    found.add(subject.function, "stability", "forward", "The softmax is not numerically stable in float32 with causal=False",
              f"With large float32 logits and causal=False, your output is {bad} when {' / '.join(failing)}; with the causal mask, "
              "and with ordinary logits, it is right: the shift taken before exp falls short of the largest logit of a row that "
              "sees every key (a maximum over the keys up to the query, such as a running maximum, or over a causal row's "
              "visible keys?).", advice)  # fmt: skip
    return True


def large_logit_finding(found: Found, function: str, failing: Sequence[str], bad: str, leaked: bool, advice: str,
                        dtype: str = "float32") -> None:  # fmt: skip
    """The finding for ``dtype`` calls with large logits whose output is ``bad`` when ``failing`` (kinds in words) while
    ordinary logits give the right output: the mask's when ``leaked`` (there the last token's value reached earlier
    queries: a finite mask constant), else the softmax's stability, with ``advice``."""
    when = " / ".join(failing)
    if leaked:
        found.add(function, "mask", "forward", "Masked keys still get weight when the logits are large: the mask is a finite number",
                  f"With large {dtype} logits, your output is finite but wrong when {when}, and there the last token's value "
                  "changes the outputs of earlier queries; ordinary logits give the right output. A masked logit set to (or "
                  "lowered by) a finite number is no longer negligible beside logits this large.",
                  "fill masked logits with −∞ (float('-inf')), not with a large negative number, before the softmax")  # fmt: skip
        return
    found.add(function, "stability", "forward", f"The softmax is not numerically stable in {dtype}",
              f"With large {dtype} logits, your output is {bad} when {when}; ordinary logits give the right output.", advice)


BELOW_MASKS = 5.0e6  # every visible float64 logit this far below zero: within domain.BELOW_FINITE_MASKS, under −1e4 to −1e6 masks
BELOW_MASKS_WORDS = "every visible logit is about −5·10⁶, below finite mask constants such as −1e4 or −1e6"


def below_masks_finding(worker: Worker, subject: Subject, point: Values, expected: np.ndarray, leaks: Callable[[Values], bool],
                        found: Found, advice: str) -> bool:  # fmt: skip
    """A finding when ``subject`` (causal, float64) is wrong at ``point``, whose visible logits all lie about
    :data:`BELOW_MASKS` below zero: the mask's when ``leaks`` says the last token's value reaches earlier queries there
    (masked logits replaced by a finite number now outweigh every visible one), else the softmax's stability; whether
    there was one."""
    found.probes.append(f"{subject.function}: float64 logits of about −5·10⁶")
    out = probes.sweep(worker, subject, [point])[0]
    if is_right(out, expected, FLOAT32_LIKE):  # logits of 5·10⁶ round at 10⁻⁹ in float64: a wrong mask is off by the output's size
        return False
    bad = failure_words(out)
    large_logit_finding(found, subject.function, [BELOW_MASKS_WORDS], bad, bad == "wrong" and leaks(point), advice, "float64")
    return True


def value_edges_probe(worker: Worker, subject: Subject, ordinary: Values, name: str, heads: int, truth: Callable[[Values], np.ndarray],
                      rng: np.random.Generator, found: Found) -> bool:  # fmt: skip
    """float32 calls (``subject``) with the input ``name`` of the float32-exact ``ordinary`` inputs scaled to
    :data:`domain.LARGE_VALUES`, then with one (batch element, head) of it all zero (the head on axis ``heads``), against
    ``truth``: where ``ordinary`` itself gives the right output, a finding for the first whose output is wrong; whether
    there was one."""
    large, _ = domain.large_values(np.asarray(ordinary[name]), rng, "float32")
    zero, _ = domain.zero_head(np.asarray(ordinary[name]), rng, heads)
    edges = {"large": {**ordinary, name: large}, "zero": {**ordinary, name: zero}}
    found.probes.append(f"{subject.function}: float32 values past float16's range, and one head of zero values")
    *outputs, plain = probes.sweep(worker, subject, [*edges.values(), ordinary])
    if not is_right(plain, truth(ordinary), FLOAT32_LIKE):
        return False
    for (kind, values), out in zip(edges.items(), outputs):
        expected = truth(values)
        if is_right(out, expected, FLOAT32_LIKE) or kind == "large" and np.max(np.abs(expected), initial=0.0) <= 65504.0:
            continue
        bad = failure_words(out)
        if kind == "large":
            found.add(subject.function, "stability", "forward", "Outputs past float16's range are wrong",
                      f"With float32 values so large that the outputs reach {float(np.max(np.abs(expected))):.3g}, your output is "
                      f"{bad}, while ordinary values give the right output: a clamp to float16's range (±65504), a pass through "
                      "float16, or a scale fitted to small values?",
                      "compute in the inputs' dtype without clamping: float32 holds outputs up to about 3.4·10³⁸")  # fmt: skip
        else:
            found.add(subject.function, "value", "forward", "A head whose values are all zero gives a wrong output",
                      f"With every value of one (batch element, head) zero, your output is {bad} (the outputs that read only that "
                      "head are exactly zero), while ordinary values give the right output: the values are divided by something that "
                      "is zero for that head (its largest magnitude or its norm, as amax scaling does)?",
                      "weight the values as they are; a scale computed from them must not be zero (clamp it from below)")  # fmt: skip
        return True
    return False


def half_precision_finding(worker: Worker, subject: Subject, ordinary: Values, found: Found, got: np.ndarray | None, expected: np.ndarray) -> bool:
    """A dtype finding when float32 inputs of ordinary size (``ordinary``, given to ``subject``; ``got`` its output, against
    ``expected``) give a result less accurate than float32 is and as accurate as half precision is, and moving every input by
    :data:`HALF_ROUNDING_STEP` of its size leaves most output elements that depend on the inputs where they were (a result
    computed in float32 moves by that much; one rounded to float16 or bfloat16 absorbs it); whether there was one. Run
    before blaming large logits: a computation in bfloat16 or float16 is wrong for every input."""
    if got is None or not np.isfinite(got).all() or is_right(got, expected, FLOAT32_LIKE):
        return False
    error = float(np.max(np.abs(got - expected)) / max(1.0, float(np.max(np.abs(expected)))))
    if error > HALF_PRECISION_LIKE:
        return False  # more than bfloat16's rounding makes: the values themselves are wrong
    still = _unmoved_share(worker, subject, ordinary, got, HALF_ROUNDING_STEP)
    if still is None or still < 0.5:
        return False  # float32 moves follow through: a float32 computation of something else, not rounding
    found.add(subject.function, "dtype", "forward", "float32 inputs are computed in lower precision",
              f"With float32 inputs of ordinary size your output is off by {error:.2g} of its scale, far more than float32's "
              f"rounding, and moving every input by one part in 10⁶ left {still:.0%} of the output elements that depend on them "
              "exactly unchanged: something computes in bfloat16 or float16 (torch.autocast, .half(), .bfloat16()).",
              "compute in the inputs' dtype: no autocast and no cast to a half-precision dtype")  # fmt: skip
    return True


def causal_nan_finding(found: Found, function: str, masked: np.ndarray | None, right: np.ndarray, unmasked: np.ndarray | None,
                       plain: np.ndarray) -> bool:  # fmt: skip
    """A mask finding when the output of one causal mode holds NaN or infinity for ordinary inputs while the other mode's is
    right (``masked``, with causal=True, against ``right``; ``unmasked``, with causal=False, against ``plain``); whether
    there was one. Either way the mask makes them: applied when it must add nothing, or made of 0 · −∞."""
    if masked is not None and not np.isfinite(masked).all() and is_right(unmasked, plain):
        found.add(function, "mask", "forward", "The causal mask turns the output into NaN or infinity",
                  "With causal=False your output is right; with causal=True it holds NaN or infinity for ordinary inputs: the mask "
                  "makes them (0 · −∞ is NaN, and so is a softmax over a row of −∞ only).",
                  "add −∞ (or a very negative number) to the logits of future keys with masked_fill or torch.where, never by multiplying")  # fmt: skip
        return True
    if unmasked is not None and not np.isfinite(unmasked).all() and is_right(masked, right):
        rows = ~np.isfinite(unmasked).all(axis=-1)
        found.add(function, "mask", "forward", "With causal=False the mask still reaches the output, as NaN or infinity",
                  f"With causal=True your output is right; with causal=False {int(rows.sum())} of its {rows.size} rows hold NaN or "
                  "infinity for ordinary inputs, as rows whose every key is hidden would: without the mask nothing may be hidden, "
                  "yet something is (a mask that hides every key, or a −∞ mask multiplied by the flag: 0 · −∞ is NaN).",
                  "apply the mask only when causal is True (`if causal:` around masked_fill or torch.where); never multiply −∞ by a flag")  # fmt: skip
        return True
    return False


CAUSAL_PATH = (
    "mask", "Only the causal path is wrong",
    "With causal=False your output is right; with causal=True it is wrong: what the function does only for causal "
    "attention (building or passing the mask) is at fault.",
    "build the mask of future keys (key s > query t) and pass it where the attention applies it: by name "
    "(is_causal=True or attn_mask=...), never by position",
)  # fmt: skip
"""(component, title, evidence, advice) of a finding whose output is wrong with causal=True only."""


def causal_path_first(found: Found, function: str, since: int, masked: np.ndarray | None, right: np.ndarray,
                      unmasked: np.ndarray | None, plain: np.ndarray, plain_prefix: Callable[[int], np.ndarray | None],
                      tokens: int) -> bool:  # fmt: skip
    """Put :data:`CAUSAL_PATH` before the findings made since ``since`` when the output with causal=True (``masked``) is
    wrong, the one with causal=False (``unmasked``) right, none of those findings is about the mask, and the first query
    whose causal output is wrong gets another answer without the mask from the keys it sees (``plain_prefix(n)``: the
    output with causal=False on the first n tokens; ``tokens``: the outputs' token axis): a fault that shows in causal
    attention only lies in what the function does for it, whatever those findings fitted; whether it did. A query answered
    alike both ways is wrong for what its keys are (one key alone, say), which the findings fitted."""
    if masked is None or is_right(masked, right) or not is_right(unmasked, plain):
        return False
    if any(f.component == "mask" for f in found.findings[since:]):
        return False
    if masked.shape == right.shape:  # (an output of another shape is no answer to compare query by query)
        rows, expected = np.moveaxis(masked, tokens, 0), np.moveaxis(right, tokens, 0)
        first = next(t for t in range(len(rows)) if not is_right(rows[t], expected[t]))
        prefix = plain_prefix(first + 1)
        if prefix is not None and prefix.shape == (*right.shape[:tokens], first + 1, *right.shape[tokens + 1:]) and \
                is_right(np.moveaxis(prefix, tokens, 0)[first], rows[first]):  # fmt: skip
            return False
    later = found.findings[since:]
    del found.findings[since:]
    component, title, evidence, advice = CAUSAL_PATH
    found.add(function, component, "forward", title, evidence, advice)
    found.findings += later
    return True


def hidden_rows_finding(found: Found, function: str, read: np.ndarray | None, other: np.ndarray | None, mode: str, what: str) -> bool:
    """A mask finding when rows of ``read`` (an output, or a map read out of one, in the causal mode ``mode``; rows along its
    last axis, of random values or one-hot ones) are all zeros while the output of the other causal mode (``other``) is
    not: every query sees at least its own key, so a row of zeros is a query whose every key was hidden (a boolean mask
    built as "hide" where True means "attend", a mask filled everywhere and the NaN rows zeroed); whether there was one.
    ``what``: the rows' name in words. A function whose every output is zero has lost more than its mask: no finding."""
    if read is None or other is None or other.shape != read.shape or not np.any(other != 0.0):
        return False
    empty = np.all(read == 0.0, axis=-1)
    if not empty.any():
        return False
    found.add(function, "mask", "forward", "Some queries see no key at all: their rows are zeros",
              f"With {mode}, {int(empty.sum())} of the {empty.size} rows of {what} are all zeros (with the other causal mode they are "
              "not), where each query attends at least to its own key: a mask hides every key of those queries (a boolean mask "
              "built as “hide” where True means “attend”, or a mask filled everywhere).",
              "hide the future keys (key after query) under causal=True and no key under causal=False; in a boolean mask for "
              "scaled_dot_product_attention, True marks the keys a query may attend")  # fmt: skip
    return True


def failing_mode(calls: Iterable[tuple[str, bool]], usual: str = "enabled") -> str:
    """The kind of call to probe a forward in, from (kind, whether the result was right) of the checks' calls: the kind other
    than ``usual`` that every wrong call was made in while calls of the usual kind were right, else ``usual``. Kinds are
    autograd modes by default (no_grad when both no_grad and inference_mode calls were wrong)."""
    calls = list(calls)
    wrong = {mode for mode, right in calls if not right}
    right = {mode for mode, right in calls if right}
    if not wrong or usual in wrong or usual not in right:
        return usual
    return "no_grad" if "no_grad" in wrong else wrong.pop()


def failed_roles(records: Sequence[Mapping[str, Any]], roles: Mapping[str, Role], across_calls: Iterable[str] = ()) -> list[Role]:
    """What the failed checks (``records``: the report's check objects) judge. A check of ``across_calls``, whose failure may
    come from state kept between calls (a cache), judges the aspect "state": it alone sends no function's probes looking
    at its values or gradients."""
    across = set(across_calls)
    return [replace(roles[r["id"]], aspect="state") if r["id"] in across else roles[r["id"]]
            for r in records if r.get("status") == "failed" and r.get("id") in roles]  # fmt: skip


def only_state(failed: Sequence[Role], functions: Iterable[str]) -> set[str]:
    """The functions whose failed checks (``failed``, :func:`failed_roles`) all judge call sequences (aspect "state")."""
    return {f for f in functions if not any(f in role.functions and role.aspect != "state" for role in failed)}


def probed_aspects(failed: Sequence[Role], functions: Sequence[str]) -> dict[str, set[str]]:
    """What each function's probes look into: the aspects of its own failed checks, and those of failed checks of several
    functions (end to end) unless only another function of such a check has failed checks of its own (the fault is then
    likely that function's, and probing both would cost twice)."""
    own = {function: {role.aspect for role in failed if role.functions == (function,)} for function in functions}
    found = {}
    for function in functions:
        shared = {role.aspect for role in failed if len(role.functions) > 1 and function in role.functions
                  and (own[function] or not any(own[f] for f in role.functions if f != function))}  # fmt: skip
        found[function] = own[function] | shared
    return found


Hints = Mapping[str, tuple[str, str, str, tuple[str, ...]]]
"""A named misconception's id -> the function, component and stage it localises, and for gradients the inputs concerned."""


def hint_findings(records: Sequence[Mapping[str, Any]], hints: Hints) -> list[Finding]:
    """The named misconceptions of the failed checks (``records``: the report's check objects), as findings (the first of each id)."""
    found, seen = [], set()
    for record in records:
        hint = record.get("hint")
        if record.get("status") != "failed" or not isinstance(hint, dict) or hint.get("id") not in hints or hint["id"] in seen:
            continue
        seen.add(hint["id"])
        function, component, stage, inputs = hints[hint["id"]]
        aspect = {"forward": "values", "gradients": "gradients", "contract": "graph"}[stage]
        explains = frozenset({"values", "gradients"} if stage == "forward" else {"gradients", aspect})
        note = FORWARD_NOTE if stage == "forward" else None
        found.append(Finding(function, component, stage, str(hint.get("text", "")), f"It matches a known mistake: {hint.get('text', '')}",
                             f"the formula: {hint.get('maths', '')}", aspect=aspect, explains=explains, inputs=inputs, note=note,
                             public=record.get("visibility") == "public"))  # fmt: skip
    return found


def wrong_only_when(found: Found, function: str, calls: Sequence[tuple[Mapping[str, str], bool]], components: Mapping[str, str]) -> bool:
    """When the probes found nothing at ``function``'s forward: a finding when one way of calling it parts the value checks'
    wrong calls from their right ones (``calls``: each call's attributes, in words, and whether its value was right), and the
    exercise gives that attribute a component (``components``). A fault that the probes' own calls never meet (a kind of
    argument they do not pass) is then placed by the checks' calls that met it; whether one was recorded."""
    if any(f.function == function and f.stage == "forward" for f in found.findings):
        return False
    wrong, right = [a for a, ok in calls if not ok], [a for a, ok in calls if ok]
    contrast = slips.separating(wrong, right)
    if len(contrast) != 1 or contrast[0][0] not in components:
        return False
    key, value = contrast[0]
    found.add(function, components[key], "forward", f"{function} gives wrong values when {key} is {value}",
              f"It gave wrong values in {len(wrong)} of the value checks' calls, every one made when {key} is {value}; "
              f"the other {len(right)} calls were right.",
              f"make calls where {key} is {value} follow the contract's formula as the others do: the contract allows them, and "
              "the answer may depend only on the values passed")
    return True
