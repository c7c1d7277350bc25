"""Probes: extra calls into the worker that localise a fault, for any exercise.

A probe runs only when some check failed. It calls one submitted function on
small float64 inputs of its own (never the checks' inputs, so what it finds
may be shown to every audience), in one diagnostic round trip
(:func:`grader.core.invoke.invoke_many` with ``diagnostic=True``: one call's
timeout in all, and a failure counts against nothing), and reports facts
about the submission's own behaviour, without any knowledge of the right
answer:

* :func:`consistency`: the submission's gradients against finite differences
  of its *own* forward, input by input, along a random direction.
  Agreement means gradient failures follow from the forward; disagreement for
  some inputs means the backward (a custom Function, a detach, ``no_grad``) is
  wrong for those.
* :func:`dependence`: one input perturbed at a time; which output elements
  moved. A :class:`Perturbation` says where something must move (an input the
  output must depend on) and where nothing may (a future key under a causal
  mask).
* :func:`determinism`: the same call twice must give the same output.
* :func:`sweep`: the output for a list of inputs, e.g. along a line or at
  several values of a scalar argument; :func:`affine_fit` tells whether it
  is affine in that scalar.

An exercise declares a :class:`Subject` per function: how to build a worker
request from named input values (see grader/exercises/diffattn/probes.py).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from grader.core.invoke import Outcome, Request, TensorInput, invoke_many
from grader.toolkit import domain
from grader.worker.client import Worker

Values = Mapping[str, np.ndarray]
"""Named float64 inputs of one call (a 0-dim array for a scalar input)."""
CHANGED = 1e-9
"""An output element moved when it changed by more than this times the output's largest magnitude (at least 1)."""
AGREEMENT = 0.02
"""A gradient agrees with the finite difference of the forward when they differ by at most this share of their size."""
ALL_AGREE = 1e-4
"""The sum of every input's directional derivative agrees with the difference of moving them all at once within this
share: far tighter than :data:`AGREEMENT`, since inputs whose gradients are missing or wrong may have contributions that
nearly cancel in the sum (what fails here is judged input by input)."""
STEP = 1e-3
"""The central-difference step along a direction whose largest element is 1 (its error, about STEP² times the forward's
curvature along the direction, is well below :data:`AGREEMENT`; a forward computed in float32 adds a few 1e-3)."""


@dataclass(frozen=True)
class Built:
    """A request, and the tensor number in it of each named input that requires grad."""

    request: Request
    positions: Mapping[str, int]


Layout = str | Mapping[str, str]
"""The memory layout of a probe's inputs: one for all, or one per input name (those not named contiguous)."""


def layout_of(layout: Layout, name: str) -> str:
    """The memory layout ``layout`` gives input ``name``."""
    return layout if isinstance(layout, str) else layout.get(name, "contiguous")


def one_object_for_equal(request: Request) -> Request:
    """``request`` with one tensor object passed for every group of its input tensors that hold equal values of one shape, dtype
    and layout (as a caller passes one tensor for several arguments: tied weights, self-attention)."""
    kept: list[TensorInput] = []
    swap: dict[int, TensorInput] = {}
    passed = [a for call in request.calls for a in (*call.args, *call.kwargs.values()) if isinstance(a, TensorInput)]
    for given in domain.distinct([*request.inputs, *passed]):
        same = next((k for k in kept if (k.dtype, k.layout, k.requires_grad) == (given.dtype, given.layout, given.requires_grad)
                     and np.shape(k.values) == np.shape(given.values) and np.array_equal(k.values, given.values)), None)  # fmt: skip
        if same is None:
            kept.append(given)
        else:
            swap[id(given)] = same
    calls = tuple(replace(call, args=tuple(swap.get(id(a), a) for a in call.args), kwargs={n: swap.get(id(a), a) for n, a in call.kwargs.items()})
                  for call in request.calls)  # fmt: skip
    return replace(request, calls=calls, inputs=tuple(k for k in kept if any(k is given for given in request.inputs)))


Builder = Callable[[Values, tuple[str, ...], "np.ndarray | None"], Built]
"""(values, the inputs that require grad, the cotangent or None for no backward pass) -> the request."""


@dataclass(frozen=True)
class Subject:
    """A function as the probes call it: its name and how to build a request for named input values."""

    function: str
    build: Builder

    def request(self, values: Values, grads: tuple[str, ...] = (), cotangent: np.ndarray | None = None) -> Built:
        """The request calling the function on ``values``; with a ``cotangent``, a backward pass for ``grads``."""
        return self.build(values, grads, cotangent)


_CALL_MODE: ContextVar[str] = ContextVar("probe_call_mode", default="enabled")
Setting = TypeVar("Setting")


@contextmanager
def set_within(variable: ContextVar[Setting], value: Setting) -> Iterator[None]:
    """Give ``variable`` the ``value`` for the block, and back its earlier value after it (the probes' settings)."""
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def calls_in(mode: str) -> AbstractContextManager[None]:
    """Make the probes' forward-only requests (no input requiring grad, no backward pass) in autograd ``mode`` ("enabled",
    "no_grad" or "inference_mode"), as ``torch.no_grad()`` does for its block: a fault that only calls made with gradients
    off show (a separate inference path) is probed where it shows."""
    return set_within(_CALL_MODE, mode)


def _in_mode(request: Request) -> Request:
    """``request`` with its calls in the probes' autograd mode, when it is forward-only."""
    mode = _CALL_MODE.get()
    if mode == "enabled" or request.backward_from is not None or any(t.requires_grad for t in request.inputs):
        return request
    return replace(request, calls=tuple(replace(call, grad_mode=mode) for call in request.calls))


def ask(worker: Worker, built: Sequence[Built]) -> list[Outcome]:
    """The outcomes of independent requests, in one diagnostic round trip (in the mode :func:`calls_in` sets)."""
    return invoke_many(worker, [_in_mode(b.request) for b in built], diagnostic=True)


def output(outcome: Outcome) -> np.ndarray | None:
    """The values of the last call of a request when it returned one plain tensor, else None."""
    if outcome.failure is not None or not outcome.results:
        return None
    if any(r.raised is not None for r in outcome.results):
        return None
    last = outcome.results[-1]
    return None if not last.exact_tensor or last.value is None else np.asarray(last.value, dtype=np.float64)


def raised(outcome: Outcome) -> dict[str, str] | None:
    """The exception a request's calls raised, if one did."""
    return next((r.raised for r in outcome.results if r.raised is not None), None)


def moved(base: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Which elements of ``other`` differ from ``base`` beyond rounding (NaN against a number counts)."""
    scale = max(1.0, float(np.nanmax(np.abs(base), initial=0.0)))
    with np.errstate(invalid="ignore"):
        differs = np.abs(other - base) > CHANGED * scale
    return differs | (np.isnan(base) != np.isnan(other))


def replaced(values: Values, name: str, new: np.ndarray) -> dict[str, np.ndarray]:
    """A copy of ``values`` with input ``name`` replaced by ``new``."""
    return {**values, name: np.asarray(new, dtype=np.float64)}


# ---- which input matters ------------------------------------------------------------------

Index = tuple[Any, ...]
"""A numpy index (slices, integers, Ellipsis) into an input or an output."""


@dataclass(frozen=True)
class Perturbation:
    """One input changed in one place, and where the output must and must not move.

    ``required``: some output element there must move (the output depends on
    this part of the input); ``forbidden``: none there may (a future key under
    a causal mask). Either may be None. ``label`` names the part in words, e.g.
    "the last token's key of branch 1".
    """

    input: str
    where: Index
    label: str
    required: Index | None = None
    forbidden: Index | None = None


@dataclass(frozen=True)
class Effect:
    """What a perturbation did: the output elements that moved, and whether the declaration was kept."""

    perturbation: Perturbation
    moved: np.ndarray

    @property
    def ignored(self) -> bool:
        """Nothing moved where something must."""
        where = self.perturbation.required
        return where is not None and not bool(self.moved[where].any())

    @property
    def leaked(self) -> bool:
        """Something moved where nothing may."""
        where = self.perturbation.forbidden
        return where is not None and bool(self.moved[where].any())


def perturb(values: Values, perturbation: Perturbation, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``values`` with a random change of size about 1 added at the perturbation's place."""
    changed = np.array(values[perturbation.input], dtype=np.float64)
    part = changed[perturbation.where]
    changed[perturbation.where] = part + rng.uniform(0.5, 1.5, np.shape(part)) * rng.choice([-1.0, 1.0], np.shape(part))
    return replaced(values, perturbation.input, changed)


def leaks(worker: Worker, subject: Subject, cases: Sequence[Values], perturbation: Perturbation, rng: np.random.Generator) -> bool:
    """Whether, in one of ``cases``, ``perturbation`` of the first feature of some values (the last axis) moves the output
    where it must not (:func:`dependence`) and in that feature alone: attention carries each feature of the values to the
    same feature of the output, so a change that reaches other features too comes through something that mixes features
    (a clamp at the largest value, a norm), not through a weight on a key it must not see."""
    for values in cases:
        effects = dependence(worker, subject, values, [perturbation], rng)
        if effects and effects[0].leaked and not effects[0].moved[..., 1:].any():
            return True
    return False


def dependence(
    worker: Worker, subject: Subject, values: Values, perturbations: Sequence[Perturbation], rng: np.random.Generator
) -> list[Effect] | None:
    """The effect of each perturbation on the output, or None when the base call gave no output, or another one when made
    again after the perturbed calls (an answer kept between calls: what changed would then be state, not a dependence)."""
    calls = [subject.request(values)] + [subject.request(perturb(values, p, rng)) for p in perturbations] + [subject.request(values)]
    found = [output(o) for o in ask(worker, calls)]
    base, again = found[0], found[-1]
    if base is None or again is None or again.shape != base.shape or not np.array_equal(base, again, equal_nan=True):
        return None
    return [Effect(p, moved(base, got)) for p, got in zip(perturbations, found[1:-1]) if got is not None and got.shape == base.shape]


# ---- determinism ---------------------------------------------------------------------------


def determinism(worker: Worker, subject: Subject, values: Values, grads: tuple[str, ...] = ()) -> tuple[float, float, np.ndarray] | None:
    """The largest difference between two identical calls (``grads`` requiring grad, as in training), then between the first
    and the same call made again after a call on other values of the same shapes, and the first output; None when they
    gave no output.

    A difference of 0.0 means the calls agreed bit for bit, as any deterministic
    function that keeps nothing between calls must; a NaN in one output where
    the other has a number counts as 1.
    """
    other = {name: 0.5 * np.asarray(v) + 0.25 for name, v in values.items()}
    first, second, _, again = (output(o) for o in ask(worker, [subject.request(values, grads)] * 2 + [subject.request(other, grads),
                                                                                                     subject.request(values, grads)]))  # fmt: skip
    if first is None or second is None or again is None or not first.shape == second.shape == again.shape:
        return None

    def gap(a: np.ndarray, b: np.ndarray) -> float:
        both = np.isfinite(a) & np.isfinite(b)
        return float(np.abs(a - b)[both].max(initial=0.0)) + float((np.isfinite(a) != np.isfinite(b)).any())

    return gap(first, second), gap(first, again), first


# ---- forward against backward --------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """The submission's directional derivative for one input against its own forward's finite difference."""

    input: str
    status: str  # "agrees", "missing" (no gradient where the forward moves), "differs" or "not_finite"
    gradient: float  # <gradient, direction>
    difference: float  # (L(x + h·u) - L(x - h·u)) / 2h with L = <cotangent, output>


@dataclass(frozen=True)
class Consistency:
    """Per input, whether the gradient agrees with the forward; or why the comparison could not be made."""

    agreements: tuple[Agreement, ...] = ()
    problem: str | None = None  # the backward pass raised, or no output came back
    in_backward: bool = False  # the problem is the backward pass's: the forward returned a finite output
    output: np.ndarray | None = None  # the forward's finite output at the unmoved inputs

    def named(self, status: str) -> list[str]:
        """The inputs whose agreement has ``status``."""
        return [a.input for a in self.agreements if a.status == status]


def _judge(name: str, gradient: np.ndarray | None, difference: float, direction: np.ndarray, scale: float,
           share: float = AGREEMENT) -> Agreement:  # fmt: skip
    """Compare one gradient along ``direction`` with the finite difference (``scale``: the size of the others, for a floor;
    ``share``: the relative difference allowed)."""
    moved = None if gradient is None else read_like(direction, gradient.shape)
    if gradient is None:
        along = 0.0
    elif moved is None:
        return Agreement(name, "differs", float("nan"), difference)
    else:
        along = float(np.sum(gradient * moved))
    if not np.isfinite(along):
        return Agreement(name, "not_finite", along, difference)
    tolerance = share * max(abs(along), abs(difference)) + 1e-6 * scale
    if abs(along - difference) <= tolerance:
        return Agreement(name, "agrees", along, difference)
    missing = gradient is None or not np.any(gradient)
    return Agreement(name, "missing" if missing else "differs", along, difference)


def read_like(direction: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``direction`` as it moves an input whose gradient has ``shape``: itself when the shapes agree; its first element along
    every dim where ``shape`` has 1 and it has more (an expanded input's gradient is read at the tensor it expands, which the
    worker makes of the first element along the dim, so that element's move is the input's); None when they do not fit so."""
    if direction.shape == shape:
        return direction
    if direction.ndim != len(shape) or any(n not in (1, m) for n, m in zip(shape, direction.shape)):
        return None
    return direction[tuple(slice(0, n) for n in shape)]


def consistency(
    worker: Worker, subject: Subject, values: Values, inputs: tuple[str, ...], cotangent: np.ndarray, rng: np.random.Generator
) -> Consistency:
    """The submission's gradients for ``inputs`` against finite differences of its own forward.

    Each input moves along its own random direction (largest element 1) by
    :data:`STEP` both ways (a central difference: its error does not grow
    with the forward's curvature, as exp(q·k) at large exponents has), the
    calls' inputs requiring grad as in the backward call, so that the forward
    takes the path the gradients come from. One round trip moves all inputs
    at once: when the sum of the directional derivatives agrees with that
    difference to :data:`ALL_AGREE`, every gradient does (almost surely). Only
    otherwise does a second round trip move one input at a time, to name those
    that disagree.
    """
    directions = {}
    for name in inputs:
        shape = np.shape(values[name])
        direction = rng.uniform(0.5, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
        directions[name] = np.asarray(direction / np.max(np.abs(direction)), dtype=np.float64)
    moved_all = [{**values, **{name: values[name] + sign * STEP * directions[name] for name in inputs}} for sign in (1.0, -1.0)]
    backward = subject.request(values, inputs, cotangent)
    found = ask(worker, [backward, *(subject.request(moved, inputs) for moved in moved_all)])
    base = output(found[0])
    if base is None or not np.isfinite(base).all():
        return Consistency(problem=raised_text(found[0]) or "the call gave no finite output")
    if found[0].backward_error is not None:
        return Consistency(problem=found[0].backward_error, in_backward=True, output=base)
    gradients = {}
    for name in inputs:
        got = found[0].grads.get(backward.positions[name])
        gradients[name] = None if got is None else np.asarray(got, dtype=np.float64)

    def difference(forth: Outcome, back: Outcome) -> float | None:
        """(L(moved forth) − L(moved back)) / 2·STEP, or None when either call gave no output of the base's shape."""
        outputs = [output(forth), output(back)]
        if any(moved is None or moved.shape != base.shape for moved in outputs):
            return None
        ahead, behind = outputs
        assert ahead is not None and behind is not None
        return float(np.sum(cotangent * (ahead - behind)) / (2.0 * STEP))

    together = difference(found[1], found[2])
    pairs = [(g, read_like(directions[name], g.shape)) for name, g in gradients.items() if g is not None]
    if together is not None and all(moved is not None for _, moved in pairs):
        combined = sum(float(np.sum(g * moved)) for g, moved in pairs if moved is not None)
        overall = _judge("all", np.asarray([combined]), together, np.ones(1), max(abs(together), 1.0), ALL_AGREE)
        if overall.status == "agrees":
            return Consistency(tuple(Agreement(name, "agrees", float("nan"), float("nan")) for name in inputs), output=base)
    moved_alone = [subject.request(replaced(values, name, values[name] + sign * STEP * directions[name]), inputs) for name in inputs for sign in (1.0, -1.0)]
    answers = ask(worker, moved_alone)
    alone = [difference(forth, back) for forth, back in zip(answers[0::2], answers[1::2])]
    if any(d is None for d in alone):
        return Consistency(problem="a call with a slightly changed input gave no output of the same shape", output=base)
    scale = max([abs(d) for d in alone if d is not None] + [1.0])
    return Consistency(tuple(_judge(name, gradients[name], d, directions[name], scale) for name, d in zip(inputs, alone) if d is not None), output=base)


def raised_text(outcome: Outcome) -> str | None:
    """A request's failure or the exception its calls raised, as one line, or None."""
    error = raised(outcome)
    if outcome.failure is not None:
        return outcome.failure
    return None if error is None else f"{error['type']}: {error['message']}"


# ---- sweeps --------------------------------------------------------------------------------


FAR_ABOVE = 2.0e4  # the "far" kind's future logit: past what a finite mask of −1e4 (float16's habit) takes away
LARGE_LOGITS = {"all": "every logit is large", "future": "a future key's logit is far above the visible ones",
                "below": "every visible logit is far below zero", "far": f"a future key's logit is about {FAR_ABOVE:.0f} above the visible ones"}
"""The kinds of :func:`large_logits`, in words."""


def large_logits(q: np.ndarray, k: np.ndarray, kind: str, direction: np.ndarray, tokens_axis: int, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys (float64, head width on the last axis, tokens on ``tokens_axis``) remade so that the scaled logits
    reach hundreds (or, "far", ten thousands) as ``kind`` (:data:`LARGE_LOGITS`) says: "all", the queries ``factor`` times larger; "future", every
    query near the unit vector ``direction`` and the last key far along it, so that its logit (hidden from every earlier
    query by a causal mask) is about 300 above the visible ones; "below", every query against every key, so that every
    logit is about −160: a softmax that does not subtract each row's own maximum divides 0 by 0 in float32; "far", the
    last key :data:`FAR_ABOVE` above every other for every query but the last (:func:`domain.future_far_above`), whose
    logits are all about 1 or less."""
    root = math.sqrt(q.shape[-1])
    last: list[Any] = [slice(None)] * q.ndim  # the last token's index
    last[tokens_axis] = -1
    if kind == "all":
        return q * factor, k
    if kind == "future":
        far = k * 0.1
        far[tuple(last)] = direction * 300.0 * root / 20.0
        return np.broadcast_to(direction * 20.0, q.shape) + q * 0.1, far
    if kind == "below":
        return domain.far_below(q, k, 160.0, direction)
    if kind == "far":
        far_q, far_k = domain.future_far_above(q, k, FAR_ABOVE, tokens_axis)
        # the last query along one axis, so small that its logit against the last key is 1, not zero: logits of exactly 0
        # are what a mask built by comparing logits with 0 hides, a fault the padding probe names and this one must not
        far_q[(*last[:-1], 0)] = math.sqrt(q.shape[-1]) / FAR_ABOVE
        return far_q, far_k
    raise ValueError(f"'kind' must be one of {sorted(LARGE_LOGITS)} (got {kind!r})")


def sweep(worker: Worker, subject: Subject, points: Sequence[Values]) -> list[np.ndarray | None]:
    """The output at each point (None where there is none), in one round trip."""
    return [output(o) for o in ask(worker, [subject.request(p) for p in points])]


def common_factor(base: np.ndarray | None, shifted: np.ndarray | None, offset: float) -> float | None:
    """The one factor by which ``offset``, added to every value of the input, moved every entry of the output from
    ``base`` to ``shifted``; None when an output is missing or not finite, or the entries moved by different factors.

    Attention weights each value by a map whose rows have one sum, so a value offset shared by every token comes
    out scaled by that sum everywhere: the factor tells a term added or removed outside the weighting.
    """
    if base is None or shifted is None or base.shape != shifted.shape or not (np.isfinite(base).all() and np.isfinite(shifted).all()):
        return None
    factors = (shifted - base) / offset
    common = float(np.mean(factors))
    return common if np.allclose(factors, common, rtol=0.0, atol=1e-6) else None


def affine_fit(xs: Sequence[float], ys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, float]:
    """Least-squares ``y ≈ a + x·b`` elementwise over points of one shape: (a, b, largest residual).

    An element that is not finite at some point is NaN in ``a`` and ``b`` and
    left out of the residual. The residual is in units of the largest finite
    value when that is above 1: outputs of 1e300 are affine to within their
    own rounding, not to within a map's.
    """
    x = np.asarray(xs, dtype=np.float64)
    stacked = np.stack([np.asarray(y, dtype=np.float64) for y in ys])
    shape = stacked.shape[1:]
    flat = stacked.reshape(len(x), -1)
    finite = np.isfinite(flat).all(axis=0)
    design = np.stack([np.ones_like(x), x], axis=1)
    solution = np.full((2, flat.shape[1]), np.nan)
    solution[:, finite], *_ = np.linalg.lstsq(design, flat[:, finite], rcond=None)
    with np.errstate(over="ignore", invalid="ignore"):
        residual = float(np.max(np.abs(design @ solution[:, finite] - flat[:, finite]), initial=0.0))
    residual /= max(1.0, float(np.max(np.abs(flat[:, finite]), initial=0.0)))
    return solution[0].reshape(shape), solution[1].reshape(shape), residual
