"""Seeded inputs for every check of the differential-attention exercise.

The draws themselves (a generator per case set, values exact in the case's
dtype, lengths around block sizes, memory layouts, argument bindings,
autograd modes, call sequences) are the toolkit's (:mod:`grader.toolkit.domain`);
this module knows the two functions' inputs: four lambda vectors, and the
queries, keys, values and coefficient of differential attention. No input is
all zeros but where a case set says so (:func:`domain.zeroed`).

Shapes, magnitudes, memory layouts and the way arguments are bound are drawn
from the whole domain the contract allows, with extra weight where bugs live
(widths of 1 and odd widths, exponents near the largest finite ones);
docs/domain.md describes the domain and how each case set samples it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from grader.toolkit import domain
from grader.toolkit.domain import Renew, exact

LAMBDA = "differential_lambda"
ATTENTION = "differential_attention"
INPUT_NAMES = ("q1", "k1", "q2", "k2", "value")
ATTENTION_PARAMETERS = (*INPUT_NAMES, "coefficient", "causal")
EXPANSIONS = {0: "over the batch", 1: "over the heads", 2: "over the tokens"}  # the dims of [B, H, T, D] an input can be expanded along
LAMBDA_NAMES = ("q1", "k1", "q2", "k2")
LARGEST_EXPONENT = {"float32": 80.0, "float64": 600.0}  # exp stays finite, with room for the gradients' factors
EXP_LIMIT = {"float32": math.log(3.4028234663852886e38), "float64": math.log(1.7976931348623157e308)}  # where exp overflows
INTEGER_DTYPES = ("int8", "int16", "int32", "int64")
"""The signed integer dtypes a tensor coefficient may have (unsigned ones the contract refuses: -coefficient wraps around
for them); such a coefficient never requires grad."""
LOW_PRECISION_DTYPES = ("float16", "bfloat16")
"""Floating dtypes a tensor coefficient may have whose gradient autograd rounds to their own few bits: such a coefficient is
passed frozen (its value, not its gradient, is what the calls judge)."""
EDGE_FLOATING = ("float16", "bfloat16", "float32")
"""The floating coefficient dtypes narrower than float64 inputs: the checks and the probes pass them at a value whose 1 − c
and 1 + c they cannot hold (grader.toolkit.domain.inexact_complement)."""
EDGE_INTEGER = INTEGER_DTYPES[:3]
"""The integer coefficient dtypes the checks and the probes pass at both ends of their allowed range
(grader.toolkit.domain.integer_ends); int64's ends lie past the integers float64 holds exactly."""
COEFFICIENT_DTYPES = {f"{dtype} tensor": dtype for dtype in (*LOW_PRECISION_DTYPES, "float32", "float64", *INTEGER_DTYPES)}
"""The dtype of a tensor coefficient whose kind names one (the inputs' otherwise): every dtype the contract allows."""
COEFFICIENT_KINDS = {"float": "Python float", "int": "Python int", "tensor": "0-dim tensor",
                     **{kind: f"0-dim {dtype} tensor" for kind, dtype in COEFFICIENT_DTYPES.items()}}  # fmt: skip


_AnyCase = TypeVar("_AnyCase", "LambdaCase", "AttentionCase")


def small_coefficient(rng: np.random.Generator, decades: tuple[float, float] = (-8.0, -3.0)) -> float:
    """A coefficient of magnitude 10^``decades[0]`` to 10^``decades[1]`` (1e-8 to 1e-3), either sign: λ near zero is not
    λ = 0 (a shortcut that drops the second branch below some threshold, or snaps a float near an integer to it, loses
    coefficient·A2·V, which float64 resolves down to these magnitudes)."""
    return float(rng.choice((-1.0, 1.0)) * 10.0 ** rng.uniform(*decades))


NEAR_INTEGER = (-8.0, -6.0)
"""The decades of :func:`small_coefficient` within which a Python float near 0 or 1 lies at least once per set: below the
1e-6 that code "cleaning float noise" snaps to an integer, still above what float64 output resolves."""


def coinciding_shapes(rng: np.random.Generator) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """(B, H, T, D) shapes whose axes coincide (:func:`domain.coinciding_sizes`): B = H = T = 2D, where value is as long as
    it is wide, and B = H = T = D, where a query is."""
    even, side = domain.coinciding_sizes(rng)
    return (even, even, even, even // 2), (side, side, side, side)


def many_problems(rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(B, H, T, D) with (batch, head) pairs past every block size (:func:`domain.past_every_block_of_problems`), each of
    2 to 6 tokens and 1 to 4 features."""
    return (*domain.past_every_block_of_problems(rng), int(rng.integers(2, 7)), int(rng.integers(1, 5)))


def paper_lambda_init(layer: int) -> float:
    """The paper's schedule: lambda_init = 0.8 - 0.6 exp(-0.3 (layer - 1)), layers from 1."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


@dataclass(frozen=True)
class LambdaCase:
    """Inputs of one differential_lambda call; ``lambda_init`` None means "use the default"."""

    q1: np.ndarray
    k1: np.ndarray
    q2: np.ndarray
    k2: np.ndarray
    dtype: str
    lambda_init: float | None
    upstream: float
    layout: str = "contiguous"
    binding: str = "keyword"  # a member of domain.BINDINGS; lambda_init None is omitted whatever the binding
    frozen: tuple[str, ...] = ()  # vectors that do not require grad in gradient checks
    keyword_order: tuple[str, ...] = ()  # with binding "names": the order of the keyword arguments
    grad_mode: str = "enabled"  # a member of domain.GRAD_MODES: the autograd mode of a call without gradients
    activations: bool = False  # inputs that require grad are non-leaf views (domain.as_training_inputs)
    held_grads: bool = False  # leaf inputs that require grad hold a .grad before the call (domain.as_training_inputs)
    parameters: bool = False  # leaf inputs that require grad are torch.nn.Parameter (domain.as_training_inputs)
    one_object: tuple[str, ...] = ()  # vectors passed as one tensor object (domain.hold_one_object)
    note: str = ""

    def __post_init__(self) -> None:
        """Vectors at one address hold the values they share (:func:`domain.hold_aliased`); vectors passed as one tensor
        hold its values (:func:`domain.hold_one_object`)."""
        domain.hold_aliased(self, LAMBDA_NAMES, (self.layout,) * len(LAMBDA_NAMES))
        domain.hold_one_object(self, self.one_object)

    @property
    def function(self) -> str:
        """The function the case calls."""
        return LAMBDA

    @property
    def output_shape(self) -> tuple[int, ...]:
        """The shape of lambda: a 0-dim tensor."""
        return ()

    def requires_grad(self, name: str) -> bool:
        """Whether the gradient with respect to vector ``name`` is requested in gradient checks."""
        return name not in self.frozen

    @property
    def effective_init(self) -> float:
        """The lambda_init the call must use (the documented default is 0.2)."""
        return 0.2 if self.lambda_init is None else self.lambda_init

    @property
    def vectors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """q1, k1, q2, k2."""
        return self.q1, self.k1, self.q2, self.k2

    def label(self, grads: bool = False) -> str:
        """A short description of the inputs for messages (of a call with gradients: made with autograd enabled)."""
        init = "lambda_init omitted (default 0.2)" if self.lambda_init is None else f"lambda_init={self.lambda_init:.6g}"
        if self.lambda_init is not None and self.binding != "keyword":
            init += " (by position)" if self.binding == "positional" else " (every argument by name)"
        x1, x2 = float(self.q1 @ self.k1), float(self.q2 @ self.k2)
        parts = [f"{self.dtype} vectors of length {self.q1.size}", init]
        if max(abs(x1), abs(x2)) > 3.0:
            parts.append(f"q1·k1={x1:.4g}, q2·k2={x2:.4g}")
        if self.layout in domain.SHARED_STORAGE:
            parts.append(domain.layouts_label(LAMBDA_NAMES, (self.layout,) * len(LAMBDA_NAMES)))
        elif self.layout != "contiguous":
            parts.append(f"{self.layout} vectors")
        if self.frozen:
            parts.append(f"{', '.join(self.frozen)} without requires_grad")
        parts += domain.one_object_labels(self) + domain.origin_labels(self)
        if self.grad_mode != "enabled" and not grads:
            parts.append(f"called under torch.{self.grad_mode}()")
        return domain.joined_notes(*parts, self.note)


@dataclass(frozen=True)
class AttentionCase:
    """Inputs of one differential_attention call (and its cotangent for gradient checks)."""

    q1: np.ndarray
    k1: np.ndarray
    q2: np.ndarray
    k2: np.ndarray
    value: np.ndarray
    coefficient: float
    dtype: str
    causal: bool | None  # None: the argument is omitted, so the default (True) applies
    cotangent: np.ndarray
    coefficient_kind: str = "float"  # a key of COEFFICIENT_KINDS
    layouts: tuple[str, ...] = ("contiguous",) * 5
    note: str = ""
    lambda_case: LambdaCase | None = field(default=None)  # set when the coefficient comes from differential_lambda
    frozen: tuple[str, ...] = ()  # inputs (or "coefficient") that do not require grad in gradient checks
    binding: str = "keyword"  # a member of domain.BINDINGS; causal None is omitted whatever the binding
    keyword_order: tuple[str, ...] = ()  # with binding "names": the order of the keyword arguments
    grad_mode: str = "enabled"  # a member of domain.GRAD_MODES: the autograd mode of a call without gradients
    activations: bool = False  # inputs that require grad are non-leaf views (domain.as_training_inputs)
    held_grads: bool = False  # leaf inputs that require grad hold a .grad before the call (domain.as_training_inputs)
    parameters: bool = False  # leaf inputs that require grad are torch.nn.Parameter (domain.as_training_inputs)
    one_object: tuple[str, ...] = ()  # inputs passed as one tensor object (domain.hold_one_object)
    cotangent_layout: str = "contiguous"  # how the output's gradient is laid out in memory (domain.COTANGENT_LAYOUTS)

    def __post_init__(self) -> None:
        """An input expanded along a dim holds its first element's values there (:func:`domain.hold_expanded`); inputs at
        one address hold the values they share (:func:`domain.hold_aliased`); inputs passed as one tensor hold its values
        (:func:`domain.hold_one_object`)."""
        domain.hold_expanded(self, INPUT_NAMES)
        domain.hold_aliased(self, INPUT_NAMES, self.layouts)
        domain.hold_one_object(self, self.one_object)

    @property
    def function(self) -> str:
        """The function the case's last call calls (differential_lambda computes a composed case's coefficient first)."""
        return ATTENTION

    @property
    def output_shape(self) -> tuple[int, ...]:
        """[B, H, T, 2D]: the shape of value."""
        return tuple(self.value.shape)

    @property
    def coefficient_is_tensor(self) -> bool:
        """Whether the coefficient is passed as a 0-dim tensor (which then needs a gradient)."""
        return self.coefficient_kind.endswith("tensor")

    @property
    def coefficient_dtype(self) -> str:
        """The dtype of a tensor coefficient: the inputs' unless its kind names one (:data:`COEFFICIENT_DTYPES`)."""
        return COEFFICIENT_DTYPES.get(self.coefficient_kind, self.dtype)

    def requires_grad(self, name: str) -> bool:
        """Whether the gradient with respect to ``name`` is requested in gradient checks (never of a Python number, or of an
        integer, float16 or bfloat16 tensor coefficient)."""
        if name == "coefficient" and (not self.coefficient_is_tensor or self.coefficient_dtype in (*INTEGER_DTYPES, *LOW_PRECISION_DTYPES)):
            return False
        return name not in self.frozen

    @property
    def is_causal(self) -> bool:
        """Whether the causal mask applies."""
        return self.causal is not False

    @property
    def inputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """q1, k1, q2, k2, value."""
        return self.q1, self.k1, self.q2, self.k2, self.value

    def label(self, grads: bool = False) -> str:
        """A short description of the inputs for messages (of a call with gradients: made with autograd enabled)."""
        b, h, t, d = self.q1.shape
        causal = "causal omitted (default True)" if self.causal is None else f"causal={self.causal}"
        if self.causal is not None and self.binding != "keyword":
            causal += " (by position)" if self.binding == "positional" else " (every argument by name)"
        if self.lambda_case is not None:
            coefficient = f"coefficient from {LAMBDA} ({self.lambda_case.label()})"
        else:
            coefficient = f"coefficient={self.coefficient:.6g} ({COEFFICIENT_KINDS[self.coefficient_kind]})"
        parts = [f"B={b} H={h} T={t} D={d}", self.dtype, causal, coefficient]
        if self.frozen:
            parts.append(f"{', '.join(self.frozen)} without requires_grad")
        parts += domain.one_object_labels(self) + domain.origin_labels(self) + (domain.cotangent_labels(self) if grads else [])
        if layouts := domain.layouts_label(INPUT_NAMES, self.layouts):
            parts.append(layouts)
        if self.grad_mode != "enabled" and not grads:
            parts.append(f"called under torch.{self.grad_mode}()")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


def lambda_case(
    rng: np.random.Generator,
    length: int,
    dtype: str,
    lambda_init: float | None,
    *,
    layout: str = "contiguous",
    exponents: tuple[float, float] | None = None,
    binding: str = "keyword",
    frozen: tuple[str, ...] = (),
    grad_mode: str = "enabled",
) -> LambdaCase:
    """Four lambda vectors of ``length``; ``exponents`` (x1, x2) sets q1·k1 and q2·k2.

    Without ``exponents`` the dot products stay within about ±1. With them,
    each pair is scaled (both vectors by the same factor, q's signs aligned
    with k's) so that its dot product is the target up to rounding to ``dtype``.
    """
    magnitudes = [rng.uniform(0.3, 1.0, length) / math.sqrt(length) for _ in range(4)]
    signs = [rng.choice([-1.0, 1.0], length) for _ in range(4)]
    vectors = [m * s for m, s in zip(magnitudes, signs)]
    if exponents is not None:
        for (q, k), target in zip(((0, 1), (2, 3)), exponents):
            # Every product q_i·k_i gets the target's sign, so no part of the dot product (the counterexample
            # search cuts vectors short) exceeds the whole, which keeps exp finite.
            aligned = np.abs(vectors[q]) * np.sign(vectors[k]) * math.copysign(1.0, target)
            factor = math.sqrt(target / float(aligned @ vectors[k]))
            vectors[q], vectors[k] = aligned * factor, vectors[k] * factor
    q1, k1, q2, k2 = (exact(v, dtype) for v in vectors)
    upstream = float(exact(domain.signed_uniform(rng, 0.5, 2.0), dtype))
    return LambdaCase(
        q1, k1, q2, k2, dtype=dtype, lambda_init=lambda_init, upstream=upstream, layout=layout,
        binding=binding, frozen=frozen, keyword_order=domain.keyword_order(rng, LAMBDA_NAMES + ("lambda_init",), binding),
        grad_mode=grad_mode,
    )  # fmt: skip


def attention_case(
    rng: np.random.Generator,
    shape: tuple[int, int, int, int],
    dtype: str,
    causal: bool | None,
    coefficient: float | None = None,
    *,
    coefficient_kind: str = "float",
    max_logit: float | None = None,
    ramp: bool | None = None,
    below: float | None = None,
    sink: float | None = None,
    sink_key: int = 0,
    future: float | None = None,
    faint: int | None = None,
    layouts: tuple[str, ...] = ("contiguous",) * 5,
    frozen: tuple[str, ...] = (),
    binding: str = "keyword",
    grad_mode: str = "enabled",
    note: str = "",
) -> AttentionCase:
    """Random Q/K/V and cotangent of ``shape`` = (B, H, T, D).

    ``coefficient`` None draws one in [0.2, 0.9]. ``max_logit`` rescales the
    queries so that the largest scaled logit |q·k|/√D of either branch equals it.
    ``ramp`` (False: falling, True: rising) scales the keys along the tokens
    first (:func:`domain.token_ramp`). ``below`` makes every scaled logit of
    both branches about −below (:func:`domain.far_below`). ``sink`` makes
    key ``sink_key`` (the first) of both branches an attention sink (:func:`domain.attention_sink`); ``future`` makes the
    last key of both branches draw about that scaled logit from every earlier query (:func:`domain.future_far_above`);
    ``faint`` makes every key of both branches from that one on faint (:func:`domain.faint_keys`).
    """
    b, h, t, d = shape
    q1, k1, q2, k2 = (rng.standard_normal(shape) for _ in range(4))
    if ramp is not None:
        k1, k2 = (k * domain.token_ramp(t, ramp)[:, None] for k in (k1, k2))
    if max_logit is not None:
        q1 = q1 * max_logit / _largest_logit(q1, k1)
        q2 = q2 * max_logit / _largest_logit(q2, k2)
    if below is not None:
        (q1, k1), (q2, k2) = domain.far_below(q1, k1, below), domain.far_below(q2, k2, below)
    if sink is not None:
        (q1, k1), (q2, k2) = (domain.attention_sink(q, k, sink, tokens=2, key=sink_key) for q, k in ((q1, k1), (q2, k2)))
    if future is not None:
        (q1, k1), (q2, k2) = (domain.future_far_above(q, k, future, tokens=2) for q, k in ((q1, k1), (q2, k2)))
    if faint is not None:
        (q1, k1), (q2, k2) = domain.faint_keys(q1, k1, faint, tokens=2), domain.faint_keys(q2, k2, faint, tokens=2)
    if coefficient is None:
        coefficient = float(rng.uniform(0.2, 0.9))
    value = rng.standard_normal((b, h, t, 2 * d))  # after the coefficient: the order of the draws fixes each seed's cases
    return AttentionCase(
        exact(q1, dtype), exact(k1, dtype), exact(q2, dtype), exact(k2, dtype), exact(value, dtype),
        coefficient=float(exact(coefficient, COEFFICIENT_DTYPES.get(coefficient_kind, dtype))),
        dtype=dtype,
        causal=causal,
        cotangent=exact(rng.standard_normal((b, h, t, 2 * d)), dtype),
        coefficient_kind=coefficient_kind,
        layouts=layouts,
        frozen=frozen,
        binding=binding,
        keyword_order=domain.keyword_order(rng, ATTENTION_PARAMETERS, binding),
        grad_mode=grad_mode,
        note=domain.joined_notes(note, None if faint is None else domain.faint_note(faint)),
    )


def large_exponents(rng: np.random.Generator, dtype: str) -> tuple[float, float]:
    """Exponents (q1·k1, q2·k2) far beyond ±2: one near the largest finite one for ``dtype``, signs drawn."""
    top = LARGEST_EXPONENT[dtype]
    first = domain.signed_uniform(rng, 0.5, 1.0) * top
    second = domain.signed_uniform(rng, 5.0, top)
    return (float(first), float(second)) if rng.random() < 0.5 else (float(second), float(first))


def opposite_exponents(rng: np.random.Generator, dtype: str, sign: float, wide: bool = False) -> tuple[float, float]:
    """Exponents (q1·k1, q2·k2) of opposite signs, q1·k1's ``sign``, the positive one 0.6 to 1 of the largest for ``dtype``.
    The negative one is 0.6 to 1 of it too, or with ``wide`` as far below that the difference is 2.05 to 2.5 times where
    exp overflows (exp of any negative number is finite: it underflows to 0). A difference past what exp can hold (at
    least 96 in float32, 720 in float64) overflows a factored form (exp(a)·expm1(b − a)); past twice that, the midpoint
    form 2·exp((a + b)/2)·sinh((a − b)/2) too, where each exponential is finite."""
    top, limit = LARGEST_EXPONENT[dtype], EXP_LIMIT[dtype]
    first = rng.uniform(0.6, 1.0) * top
    second = rng.uniform(2.05 * limit - first, 2.5 * limit - first) if wide else rng.uniform(0.6, 1.0) * top
    return (float(first), float(-second)) if sign > 0 else (float(-second), float(first))


def distant_exponents(rng: np.random.Generator, first_larger: bool) -> tuple[float, float]:
    """Exponents (q1·k1, q2·k2), the first or the second the larger, one of 30 to 60 and the other within ±3: float32 holds
    both exponentials, e^(larger) more than 1e7 times the other, so the smaller pair's gradients are lost below a rounding
    of the larger (a backward that recovers the smaller exponential from λ and the larger one cancels)."""
    pair = (float(rng.uniform(30.0, 60.0)), float(rng.uniform(-3.0, 3.0)))
    return pair if first_larger else (pair[1], pair[0])


def near_tie_exponents(rng: np.random.Generator) -> tuple[float, float]:
    """Exponents (q1·k1, q2·k2) within ±2 and a nonzero gap of 0.001 to 0.01 apart, either one the larger."""
    first = float(rng.uniform(-2.0, 2.0))
    return first, first + float(domain.signed_uniform(rng, 0.001, 0.01))


def tied_case(rng: np.random.Generator, length: int, dtype: str, lambda_init: float | None, binding: str = "keyword") -> LambdaCase:
    """Four vectors whose second pair is the first (q1·k1 = q2·k2 exactly, so λ = λ_init): a formula through log|e1 − e2|
    or e1 / e2 meets 0 or a tie there, where the value and every gradient are finite."""
    base = lambda_case(rng, length, dtype, lambda_init, binding=binding)
    return replace(base, q2=base.q1.copy(), k2=base.k1.copy())


def with_padding(case: AttentionCase, rng: np.random.Generator) -> AttentionCase:
    """``case`` with padding tokens (:func:`domain.padding_tokens`): the first and one drawn token all zeros in the queries,
    keys and values of both branches. Their logits are exactly 0 and their values zeros, which a mask must treat like any
    other (only positions decide what is hidden)."""
    tokens = domain.padding_tokens(rng, case.q1.shape[2])
    q1, k1, q2, k2, value = (domain.padded(x, tokens, axis=2) for x in (case.q1, case.k1, case.q2, case.k2, case.value))
    return replace(case, q1=q1, k1=k1, q2=q2, k2=k2, value=value,
                   note=domain.joined_notes(case.note, domain.padding_note(tokens)))  # fmt: skip


def cancelling_case(rng: np.random.Generator, pairs: int, dtype: str, lambda_init: float | None, **options: Any) -> LambdaCase:
    """A λ case whose q1·k1 is exactly 0 although its products q1_i·k1_i alternate −size and +size, with size past the
    largest exponent of ``dtype``: exp of each product over- or underflows where exp of their sum is 1, so a λ that takes
    exponentials before summing (a product of exp(q·k) terms) is wrong. Every prefix of the vectors (the counterexample
    search cuts them short) has a dot product of −size or 0, so its λ stays finite."""
    case = lambda_case(rng, 2 * pairs, dtype, lambda_init, **options)
    size = LARGEST_EXPONENT[dtype] * rng.uniform(1.2, 1.4)
    magnitude = float(exact(np.asarray(math.sqrt(size)), dtype))
    signs = rng.choice([-1.0, 1.0], 2 * pairs)
    alternating = np.where(np.arange(2 * pairs) % 2 == 0, -1.0, 1.0)
    return replace(case, q1=exact(magnitude * signs, dtype), k1=exact(magnitude * signs * alternating, dtype))


def _largest_logit(q: np.ndarray, k: np.ndarray) -> float:
    return float(np.abs(q @ np.swapaxes(k, -1, -2)).max() / math.sqrt(q.shape[-1]))


def redrawn(case: _AnyCase, rng: np.random.Generator, renew: Renew = domain.fresh_like) -> _AnyCase:
    """``case`` with new values of the same shapes (and a tensor coefficient's), everything else kept; ``renew`` makes
    each input's new values (with :func:`domain.shuffled_like`, its own in another order, and the coefficient kept)."""

    def fresh(x: np.ndarray) -> np.ndarray:
        return renew(rng, x, case.dtype)

    if isinstance(case, LambdaCase):
        return replace(case, q1=fresh(case.q1), k1=fresh(case.k1), q2=fresh(case.q2), k2=fresh(case.k2))
    # A Python coefficient is a hyperparameter, the same on every call; a tensor one is trained like the rest.
    new = case.coefficient_is_tensor and renew is domain.fresh_like
    coefficient = float(rng.uniform(-1.0, 2.0)) if new else case.coefficient
    return replace(
        case, q1=fresh(case.q1), k1=fresh(case.k1), q2=fresh(case.q2), k2=fresh(case.k2), value=fresh(case.value),
        cotangent=fresh(case.cotangent), coefficient=float(exact(coefficient, case.coefficient_dtype)),
    )  # fmt: skip


RESCALED_LOGITS = {"float32": 300.0, "float64": 1000.0}  # past exp's range in each dtype: a shift kept from a call of ordinary logits overflows


def rescaled(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` redrawn (:func:`redrawn`), with each branch's queries scaled so that its largest scaled logit is
    :data:`RESCALED_LOGITS` of the dtype (λ's vectors are only redrawn: its scale is its exponents')."""
    new = redrawn(case, rng)
    if isinstance(new, LambdaCase):
        return new
    target = RESCALED_LOGITS[new.dtype]
    q1, q2 = (exact(q * target / _largest_logit(q, k), new.dtype) for q, k in ((new.q1, new.k1), (new.q2, new.k2)))
    return replace(new, q1=q1, q2=q2)


def shuffled(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` with each input's own values in another order (:func:`domain.shuffled_like`), everything else kept."""
    return redrawn(case, rng, domain.shuffled_like)


def retyped(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` with new values of the same shapes in the other dtype."""
    return redrawn(replace(case, dtype="float64" if case.dtype == "float32" else "float32"), rng)


def _reoptioned(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` with another option and nothing else changed: the other causal flag (:func:`domain.other_flag`), another
    lambda_init (0.2 to 0.6 above the one in effect)."""
    changes: dict[str, Any] = ({"causal": domain.other_flag(case.causal)} if isinstance(case, AttentionCase)
                               else {"lambda_init": round(case.effective_init + float(rng.uniform(0.2, 0.6)), 6)})  # fmt: skip
    return replace(case, **changes)


def reflagged(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` with new values of the same shapes and dtype and another option (:func:`_reoptioned`)."""
    return redrawn(_reoptioned(case, rng), rng)


def changed_alone(case: _AnyCase, rng: np.random.Generator, name: str) -> _AnyCase:
    """``case`` with only the argument ``name`` given another value: new values for a tensor, another option
    (:func:`_reoptioned`) or coefficient (0.3 to 1.2 away, its kind kept)."""
    if name in ("causal", "lambda_init"):
        return _reoptioned(case, rng)
    changes: dict[str, Any]
    if isinstance(case, AttentionCase) and name == "coefficient":
        moved = case.coefficient + float(rng.choice((-1.0, 1.0)) * rng.uniform(0.3, 1.2))
        changes = {name: float(exact(moved, case.coefficient_dtype))}
    else:
        changes = {name: domain.fresh_like(rng, getattr(case, name), case.dtype)}
    return replace(case, **changes)


def layered(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` as another layer calls it: :func:`reflagged`, and a Python-float coefficient of its own (λ differs per layer)."""
    return _own_coefficient(reflagged(case, rng), rng)


def stacked(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` as the next layer of the same model calls it: :func:`redrawn` (the same flag), and a Python-float coefficient
    of its own."""
    return _own_coefficient(redrawn(case, rng), rng)


def _own_coefficient(case: _AnyCase, rng: np.random.Generator) -> _AnyCase:
    """``case`` with a Python-float coefficient drawn anew, when it has one."""
    if isinstance(case, LambdaCase) or case.coefficient_kind != "float":
        return case
    return replace(case, coefficient=float(exact(rng.uniform(0.2, 0.9), case.coefficient_dtype)))


def resized(case: _AnyCase, rng: np.random.Generator, decoding: bool) -> _AnyCase:
    """``case`` with new values of other shapes, the rest kept: λ vectors of another length; for attention fewer tokens (one
    when ``decoding``, as a decoding step has), another batch size and head count, the same width."""
    if isinstance(case, LambdaCase):
        n = len(case.q1)
        fresh = lambda_case(rng, int(rng.integers(1, n)) if n > 1 else int(rng.integers(2, 9)), case.dtype, case.lambda_init)
        return replace(case, q1=fresh.q1, k1=fresh.k1, q2=fresh.q2, k2=fresh.k2)
    b, h, t, d = case.q1.shape
    shape = (3 - b if b < 3 else 1, 3 - h if h < 3 else 1, 1 if decoding or t == 1 else int(rng.integers(1, t)), d)
    other = attention_case(rng, shape, case.dtype, case.causal)
    return replace(case, q1=other.q1, k1=other.k1, q2=other.q2, k2=other.k2, value=other.value, cotangent=other.cotangent)


def shared_offset(case: AttentionCase, rng: np.random.Generator) -> AttentionCase:
    """The same case with one random vector c added to every token's value."""
    row = exact(domain.signed_uniform(rng, 1.0, 3.0, case.value.shape[-1]), case.dtype)
    return replace(case, value=exact(case.value + row, case.dtype), note="every token's value shifted by one shared vector c")


def with_values(case: AttentionCase, value: np.ndarray, note: str) -> AttentionCase:
    """``case`` with values ``value``, its label adding ``note``."""
    return replace(case, value=value, note=domain.joined_notes(case.note, note))


def identical_branches(case: AttentionCase, coefficient: float, tied: tuple[str, ...] = ("q", "k")) -> AttentionCase:
    """The same case with ``coefficient`` and the second branch's inputs of ``tied`` equal in value to the first's ("q":
    q2 = q1, "k": k2 = k1): with both, the maps cancel at 1 and scale A1·V by 1 - c otherwise; with one, the maps differ
    (a shortcut for equal branches that compares one pair of inputs only meets them there)."""
    same = {f"{name}2": getattr(case, f"{name}1").copy() for name in tied}
    note = " and ".join(f"{name}2 = {name}1" for name in tied)
    return replace(case, **same, coefficient=float(exact(coefficient, case.dtype)), note=note)


def with_lambda(case: AttentionCase, lam: LambdaCase) -> AttentionCase:
    """The same case with its coefficient computed by differential_lambda from ``lam`` (NaN marks it unused)."""
    return replace(case, lambda_case=lam, coefficient=float("nan"))
