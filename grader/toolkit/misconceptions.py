"""Misconception diagnosis: which known wrong formula did a failing submission compute?

When a value or gradient check fails, the grader tests hypotheses. Each
:class:`Variant` is a formula that students are known to write instead of the
right one, in one or more forms, each evaluated by the exercise in float64
numpy like its oracle, with no torch. A form takes a case and its truth and
predicts every result the check compares, with an allowance from the checks'
own rounding rule (:func:`grader.toolkit.tolerance.allowance`). A variant
*explains* a failed check when

* the submission's results agree with the form's, within that allowance, on
  every compared element of every call the submission answered, both in the
  check itself and in the run's other calls of the same function (the
  family's evidence, so one case set cannot be explained by a formula that
  the others refute), and
* on the check's own calls the form differs from the truth by more than
  :data:`FAR` times the two allowances together somewhere. A variant that
  coincides with the truth on the inputs is never hinted, and a correct
  result (within its allowance of the truth) can never agree with a variant
  that is that far from the truth.

An exercise declares its catalogue (:class:`Catalogue`): families of variants
per kind of result (the output of one function, or the gradients of a right
forward pass), tried in turn, most specific variant first, and symptoms, bugs
known by what they do to every result rather than by a formula (no autograd
graph at all, float64 results with float32's accuracy). The first variant
that explains the check becomes its hint. A hint is advice only: it never
changes a verdict. See docs/diagnosis.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from grader.core.invoke import Outcome
from grader.core.plugin import GradingContext
from grader.toolkit.casesets import CaseSet, OutcomeOf
from grader.toolkit.compare import Comparison
from grader.toolkit.tolerance import UNIT_ROUNDOFF, Memo, Truth, remember
from grader.toolkit.verdicts import returned_values

FAR = 1000.0
"""How far (in allowances) a variant must be from the truth to be worth a hint."""
FLOAT32_WIDER = UNIT_ROUNDOFF["float32"] / UNIT_ROUNDOFF["float64"]
"""float32's unit roundoff over float64's: the allowances scale with it."""
NO_GRAPH = "does not require grad"
"""What torch's backward pass says of an output that is not attached to any graph."""

Prediction = dict[str, Truth]
"""Result name ("output", or a gradient's name) -> values and allowance."""
Form = Callable[[Any, Prediction], Prediction]
"""(case, its truth) -> what a wrong formula gives."""


@dataclass(frozen=True)
class Variant:
    """A known wrong formula, its hint, and one or more ways students write it (forms)."""

    id: str
    text: str
    maths: str
    forms: tuple[Form, ...]

    def hint(self) -> dict[str, str]:
        """The JSON-safe hint of docs/report-schema.md."""
        return {"id": self.id, "text": self.text, "maths": self.maths}


@dataclass(frozen=True)
class Observation:
    """One call the submission answered: its case, what came back and the truth, per result name."""

    case: Any
    got: dict[str, np.ndarray]
    truth: Prediction


@dataclass(frozen=True)
class Family:
    """Variants of one kind of result, and the case sets whose calls every hint of the kind must explain.

    The family reads the result of the last call of ``function`` in a case's
    request (its output; with ``gradients``, the gradients too) and compares
    it with ``truth(case)``. ``subject`` gives the case that call evaluates
    (default: the case itself when it calls ``function``, else None: the
    family has nothing to say about it); a composed case names its part here.
    """

    name: str
    function: str
    variants: tuple[Variant, ...]
    truth: Callable[[Any], Prediction]
    evidence: tuple[tuple[CaseSet[Any], bool], ...]  # (case set, with gradients)
    gradients: bool = False  # a family of gradient variants: tried only for gradient checks
    subject: Callable[[Any], Any] | None = None

    def subject_of(self, case: Any) -> Any:
        """The case whose result the family reads in ``case``'s request, or None."""
        if self.subject is not None:
            return self.subject(case)
        return case if case.function == self.function else None


Symptom = Callable[["Catalogue", GradingContext, CaseSet[Any], bool], bool]
"""(catalogue, grading, the failed check's case set, with gradients) -> whether the bug shows."""


@dataclass(frozen=True)
class Catalogue:
    """An exercise's known wrong formulas and how to read its calls.

    ``outcome`` gives the run's outcome of a case, ``positions`` the input
    numbers of a case's gradients by name, ``checked`` the case sets whose
    failed checks ask for a hint (with the evidence, what :meth:`prepare`
    predicts for), ``symptoms`` what is tried when no family explains a
    failure: (variant, test), in order. ``readable`` says whether a case's
    results are read at all: a call at a large model's sizes costs every
    form a map of a million entries, and a named formula that is wrong
    there is wrong on the smaller calls too.
    """

    families: tuple[Family, ...]
    outcome: OutcomeOf
    positions: Callable[[Any], dict[str, int]]
    checked: tuple[CaseSet[Any], ...]
    symptoms: tuple[tuple[Variant, Symptom], ...] = ()
    readable: Callable[[Any], bool] = lambda case: True

    def observe(self, family: Family, case: Any, outcome: Outcome) -> Observation | None:
        """What ``outcome`` tells about ``family`` for ``case`` (None when it has nothing to compare)."""
        subject = family.subject_of(case)
        if subject is None or not self.readable(subject) or family.function not in outcome.functions:
            return None
        index = len(outcome.functions) - 1 - outcome.functions[::-1].index(family.function)
        output = returned_values(outcome, index)
        if output is None:
            return None
        if not family.gradients:
            return Observation(subject, {"output": output}, family.truth(subject))
        if not outcome.grads or outcome.backward_error is not None:
            return None
        truth = family.truth(subject)
        got = {"output": output}
        for name, position in self.positions(case).items():
            if position in outcome.grads:
                grad = outcome.grads[position]
                got[name] = np.zeros_like(truth[name].values) if grad is None else grad
        return Observation(subject, got, truth)

    def observations(self, grading: GradingContext, family: Family, case_set: CaseSet[Any], grads: bool) -> list[Observation]:
        """Every call of ``case_set`` that tells something about ``family``, made once per run."""

        def collect() -> list[Observation]:
            found = []
            for i, case in enumerate(case_set(grading.seed)):
                seen = self.observe(family, case, self.outcome(grading, case_set, i, case, grads))
                if seen is not None:
                    found.append(seen)
            return found

        found: list[Observation] = grading.memo(("misconceptions", family.name, case_set.name, grads), collect)
        return found

    def diagnose(self, grading: GradingContext, case_set: CaseSet[Any], grads: bool = False, keys: tuple[str, ...] = ()) -> dict[str, str] | None:
        """The hint for a failed check on ``case_set`` (its compared gradients ``keys``), or None.

        Families are tried in turn (gradient families only for gradient
        checks), then the symptoms.
        """
        for family in self.families:
            if family.gradients and not grads:
                continue
            own = self.observations(grading, family, case_set, grads)
            if not own:
                continue
            evidence = [seen for found, with_grads in family.evidence for seen in self.observations(grading, family, found, with_grads)]
            compared = ("output", *keys) if family.gradients else ("output",)
            # The evidence is the same for every check of a run, and several checks compare the same results of one set.
            known = grading.memo(("misconceptions", "evidence", family.name), dict)
            known_own = grading.memo(("misconceptions", "own", family.name, case_set.name, grads, compared), dict)
            matched = first_match(family.variants, evidence, own, compared, known, known_own)
            if matched is not None:
                return matched.hint()
        for variant, shows in self.symptoms:
            if shows(self, grading, case_set, grads):
                return variant.hint()
        return None

    def attach_hint(
        self, grading: GradingContext, verdict: Comparison, case_set: CaseSet[Any], grads: bool = False, keys: tuple[str, ...] = ()
    ) -> None:
        """Give a failed check on ``case_set`` the hint :meth:`diagnose` finds; leave a passed one alone.

        A hint is advice: if working it out fails, the check goes without one
        rather than turning its verdict into an internal error.
        """
        if verdict.ok:
            return
        try:
            hint = self.diagnose(grading, case_set, grads, keys)
        except Exception:  # see the docstring: the verdict stands whatever happens here
            hint = None
        grading.explain(hint=hint)

    def prepare(self, seed: int, until: Callable[[], bool] | None = None) -> None:
        """Compute every variant's prediction for every case a hint may look at, once for ``seed``.

        A batch calls this before it forks its grading processes, so that
        diagnosing a wrong submission costs comparisons only. It stops as soon
        as ``until()`` is true (a batch: when its fork server is warm and the
        preview drawn, so that grading never waits for it); a prediction not
        made here is made by :func:`predict` when a diagnosis first needs it.
        The first case of every set comes first, then the second, and so on: a
        form is tried on a set's answered cases in order and given up at the
        first that disagrees, so the first cases are the ones most diagnoses read.
        """
        work: list[tuple[int, Family, Any]] = []
        for family in self.families:
            sets = {case_set for case_set, _ in family.evidence} | set(self.checked)
            for case_set in sorted(sets, key=lambda found: found.name):
                for rank, drawn in enumerate(case_set(seed)):
                    case = family.subject_of(drawn)
                    if case is not None and self.readable(case):
                        work.append((rank, family, case))
        for _, family, case in sorted(work, key=lambda item: item[0]):  # a stable sort: sets and families keep their order
            if until is not None and until():
                return
            truth = family.truth(case)
            for form in (f for variant in family.variants for f in variant.forms):
                try:
                    predict(form, case, truth)
                except Exception:  # a form that cannot take this case is simply not cached
                    continue


# ---- matching ------------------------------------------------------------------------


def agrees(got: np.ndarray, predicted: Truth) -> bool:
    """Whether ``got`` equals the prediction within its allowance everywhere (NaN where it is NaN)."""
    agreeing = _agreement(got, predicted)
    return agreeing is not None and bool(agreeing.all())


def _agreement(got: np.ndarray, predicted: Truth) -> np.ndarray | None:
    """Per element of ``got``, whether it equals the prediction within its allowance (NaN where it is NaN); None when the
    shapes differ."""
    got, v, allowed = (np.asarray(x, dtype=np.float64) for x in (got, predicted.values, predicted.allowed))
    if got.shape != v.shape:
        return None
    finite = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        close = finite & np.isfinite(got) & (np.abs(got - v) <= allowed)
    same_non_finite = ~finite & ((np.isnan(v) & np.isnan(got)) | (v == got))
    return close | same_non_finite


def far_apart(a: Truth, b: Truth) -> bool:
    """Whether two predictions differ somewhere by more than FAR times their allowances together."""
    (va, aa), (vb, ab) = ((np.asarray(t.values, dtype=np.float64), np.asarray(t.allowed, dtype=np.float64)) for t in (a, b))
    if va.shape != vb.shape:
        return True
    finite_a, finite_b = np.isfinite(va), np.isfinite(vb)
    if (finite_a != finite_b).any():
        return True
    with np.errstate(invalid="ignore"):
        return bool((np.abs(va - vb) > FAR * (np.broadcast_to(aa, va.shape) + np.broadcast_to(ab, vb.shape)))[finite_a].any())


_PREDICTIONS: Memo = {}


def predict(form: Form, case: Any, truth: Prediction) -> Prediction:
    """What ``form`` gives for ``case``, computed once per form and case object (see :meth:`Catalogue.prepare`).

    A form belongs to one family, and the family fixes which results ``truth`` holds.
    """
    return remember(_PREDICTIONS, (form, case), lambda: form(case, truth))


def explains(form: Form, observations: Iterable[Observation], keys: Iterable[str] | None = None) -> tuple[bool, bool]:
    """(every result agrees with ``form``, some result is far from the truth), over ``keys`` (default: all)."""
    distinct = False
    for seen in observations:
        try:
            predicted = predict(form, seen.case, seen.truth)
        except (ArithmeticError, ValueError):  # a formula that cannot be evaluated here (e.g. exp overflows) explains nothing
            return False, distinct
        for name in seen.got if keys is None else [k for k in keys if k in seen.got]:
            if not agrees(seen.got[name], predicted[name]):
                return False, distinct
            distinct = distinct or far_apart(predicted[name], seen.truth[name])
    return True, distinct


def first_match(
    variants: Iterable[Variant], evidence: list[Observation], own: list[Observation], keys: tuple[str, ...],
    known: dict[Form, bool] | None = None, known_own: dict[Form, tuple[bool, bool]] | None = None,
) -> Variant | None:  # fmt: skip
    """The first variant one of whose forms agrees with all the evidence and is far from the truth on ``own``.

    ``known``: whether each form agrees with the evidence, as found by earlier
    calls with the same evidence; ``known_own``: what :func:`explains` found
    for each form on the same ``own`` and ``keys`` (both filled in).
    """
    for variant in variants:
        for form in variant.forms:
            if known_own is None:
                agreed, distinct = explains(form, own, keys)
            elif form in known_own:
                agreed, distinct = known_own[form]
            else:
                agreed, distinct = known_own[form] = explains(form, own, keys)
            if not (agreed and distinct):
                continue
            if known is None:
                fits = explains(form, evidence)[0]
            elif form in known:
                fits = known[form]
            else:
                fits = known[form] = explains(form, evidence)[0]
            if fits:
                return variant
    return None


# ---- forms that change the truth --------------------------------------------------------


def changed(names: Collection[str] | Callable[[str], bool], change: Callable[[Truth, Any], Truth]) -> Form:
    """The truth with ``change(truth, case)`` applied to the results ``names`` (or those a predicate selects)."""
    selects = names if callable(names) else names.__contains__

    def form(case: Any, truth: Prediction) -> Prediction:
        return {name: change(found, case) if selects(name) else found for name, found in truth.items()}

    return form


def zeroed(truth: Truth, case: Any) -> Truth:
    """A result that is 0 everywhere (no gradient reached the input), with the truth's allowance."""
    return replace(truth, values=np.zeros_like(truth.values))


def negated(truth: Truth, case: Any) -> Truth:
    """A result of the wrong sign, with the truth's allowance."""
    return replace(truth, values=-truth.values)


def scaled_output(factor: float) -> Form:
    """The true output times ``factor``."""

    def form(case: Any, truth: Prediction) -> Prediction:
        right = truth["output"]
        return {"output": Truth(factor * right.values, abs(factor) * right.allowed)}

    return form


def normalised_output(eps: float, centred: bool = False, factor: float = 1.0) -> Form:
    """Each output row (last axis) divided by its RMS plus ``eps`` (``centred``: standardised, like a layer or group norm), times ``factor``.

    The allowance follows by first-order propagation of the true output's allowance.
    """

    def form(case: Any, truth: Prediction) -> Prediction:
        right = truth["output"]
        o, a = right.values, right.allowed
        if centred:
            o, a = o - o.mean(axis=-1, keepdims=True), a + a.mean(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            square = (o * o).mean(axis=-1, keepdims=True)
            root = np.sqrt(square + eps)
            values = o / root
            allowed = a / root + np.abs(values) * (np.abs(o) * a).mean(axis=-1, keepdims=True) / (root * root)
        return {"output": Truth(factor * values, abs(factor) * allowed)}

    return form


# ---- symptoms: bugs known by what they do to every result, not by a formula -----------

FLOAT32_INSIDE = Variant(
    "float32_inside",
    "Your float64 results are only as accurate as float32: something inside computes in float32.",
    "compute in the inputs' dtype throughout: no .float(), no float32 constants or tensors made without dtype=",
    (),
)


def float32_accurate(observations: list[Observation]) -> bool:
    """Whether float64 outputs miss their allowance but meet float32's, while float32 outputs are right, and most float64
    outputs miss, each in most of its elements: a computation rounded to float32 moves every element of every call, a
    fault of some inputs alone (a gate's logits clamped, a shortcut taken when every gate is shut) only theirs."""
    if not any(seen.case.dtype == "float64" for seen in observations):
        return False
    missed, elements, cases, missing_cases = 0, 0, 0, 0
    for seen in observations:
        truth = seen.truth["output"]
        if seen.case.dtype == "float64":
            agreeing = _agreement(seen.got["output"], truth)
            wrong, size = (1, 1) if agreeing is None else (int((~agreeing).sum()), agreeing.size)
            missed, elements = missed + wrong, elements + (size if wrong else 0)
            cases, missing_cases = cases + 1, missing_cases + (wrong > 0)
            truth = Truth(truth.values, np.asarray(truth.allowed) * FLOAT32_WIDER)
        if not agrees(seen.got["output"], truth):
            return False
    return missed > 0 and 2 * missed >= elements and 2 * missing_cases > cases


def float32_accuracy(family: Family) -> Symptom:
    """The symptom of :data:`FLOAT32_INSIDE` in the outputs ``family`` reads."""

    def shows(catalogue: Catalogue, grading: GradingContext, case_set: CaseSet[Any], grads: bool) -> bool:
        return float32_accurate(catalogue.observations(grading, family, case_set, grads))

    return shows


def no_graph(family: Family) -> Symptom:
    """The symptom of an output cut off from autograd: in a gradient check, the backward pass of every call ``family`` reads that answered found no graph."""

    def shows(catalogue: Catalogue, grading: GradingContext, case_set: CaseSet[Any], grads: bool) -> bool:
        if not grads:
            return False
        answered = []
        for i, case in enumerate(case_set(grading.seed)):
            if family.subject_of(case) is None:
                continue
            outcome = catalogue.outcome(grading, case_set, i, case, True)
            if outcome.failure is None and returned_values(outcome, len(outcome.functions) - 1) is not None:
                answered.append(outcome)
        no_graph = [o for o in answered if NO_GRAPH in (o.backward_error or "") or (o.grads and all(g is None for g in o.grads.values()))]
        return bool(answered) and len(no_graph) == len(answered)

    return shows
