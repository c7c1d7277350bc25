"""Seeded inputs for the checks of the DIFF V2 exercise.

A :class:`Case` is one call of ``gqa_attention`` or ``diff_v2_attention``: its
input arrays (float64 values exact in the case's dtype, so the oracle sees the
numbers the submission sees), the cotangent of its output for gradient
checks, and how the call is made (memory layouts, which inputs require grad,
how arguments are bound, the autograd mode). The draws cover the domain the
contract allows: sequence lengths up to a few hundred with extra weight next
to block sizes, head widths from 1 to 64, several batch sizes, key/value head
counts and group sizes (Hkv = 1 and Hkv = Hq included), scaled logits up to
±1000, gate logits from moderate to saturated (±100 to ±1000), every strided
layout the worker builds, every argument binding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from grader.toolkit import domain
from grader.toolkit.domain import Renew, exact

GQA = "gqa_attention"
DIFF_V2 = "diff_v2_attention"
# The parameters of each function, in the contract's order; the last one ("causal") has a default.
PARAMETERS = {GQA: ("q", "k", "v", "causal"), DIFF_V2: ("q", "k", "v", "lambda_logits", "causal")}
TENSORS = {GQA: ("q", "k", "v"), DIFF_V2: ("q", "k", "v", "lambda_logits")}
EXPANSIONS = {0: "over the batch", 1: "over the tokens", 2: "over the heads"}  # the dims of [B, T, heads, D] an input can be expanded along
GQA_GROUPS = (1, 2, 3, 4, 8)  # G = Hq / Hkv for gqa_attention: any positive integer
DIFF_V2_GROUPS = (2, 4, 6, 8)  # G for diff_v2_attention: even, so heads 2i and 2i + 1 share a group
KV_HEADS = (1, 1, 2, 3, 4)  # Hkv, multi-query (1) twice as often
BUDGET = 2**17  # B·Hq·T·max(T, D) of a drawn shape: more (batch, head) problems add cost, not coverage
MIN_HEAD_ROOM = 4  # however long the sequence, drawn head counts may reach Hq = 4 (two groups of a pair each, or one of two)
SATURATED = (100.0, 1000.0)  # |lambda_logits| of a saturated gate: exp(-ℓ) overflows float32 from 89, float64 from 710
# |lambda_logits| between the bulk and saturation, log-uniform: 1 - σ(ℓ) ≈ exp(-ℓ) is resolved by float32 up to about 17 and
# by float64 up to about 37, so a gate formula that rounds it away (a softplus past its threshold, a clamp) shows here.
TRANSITION = (4.0, 100.0)
TRANSITION_SHARE = 0.125
# |ℓ| of a gate shut or open everywhere: 1 − σ(|ℓ|) (7e-13 to 3e-10) is far below float32's resolution and well above float64's,
# and every logit is past a threshold of 20 that a shortcut for a closed or open gate may test
RESOLVED_BY_FLOAT64_ONLY = (22.0, 28.0)
ALIGNED_GROUPS = {GQA: 1, DIFF_V2: 2}  # the smallest group size of each function: every block boundary falls between groups
UNALIGNED_GROUPS = {GQA: 3, DIFF_V2: 6}  # a group size of each function that divides no block size (domain.BLOCK_SIZES)


@dataclass(frozen=True)
class Case:
    """One call of either function, with its cotangent; ``lambda_logits`` is None for gqa_attention."""

    function: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    lambda_logits: np.ndarray | None
    dtype: str
    causal: bool | None  # None: the argument is omitted, so the default (True) applies
    cotangent: np.ndarray
    layouts: tuple[str, ...] = ()  # one per input tensor; empty: all contiguous
    frozen: tuple[str, ...] = ()  # inputs that do not require grad in gradient checks
    binding: str = "keyword"  # a member of domain.BINDINGS; causal None is omitted whatever the binding
    keyword_order: tuple[str, ...] = ()  # with binding "names": the order of the keyword arguments
    grad_mode: str = "enabled"  # a member of domain.GRAD_MODES: the autograd mode of a call without gradients
    activations: bool = False  # inputs that require grad are non-leaf views (domain.as_training_inputs)
    held_grads: bool = False  # leaf inputs that require grad hold a .grad before the call (domain.as_training_inputs)
    parameters: bool = False  # leaf inputs that require grad are torch.nn.Parameter (domain.as_training_inputs)
    note: str = ""
    one_object: tuple[str, ...] = ()  # inputs passed as one tensor object (domain.hold_one_object)
    cotangent_layout: str = "contiguous"  # how the output's gradient is laid out in memory (domain.COTANGENT_LAYOUTS)

    def __post_init__(self) -> None:
        """An input expanded along a dim holds its first element's values there (:func:`domain.hold_expanded`); inputs at
        one address hold the values they share (:func:`domain.hold_aliased`); inputs passed as one tensor hold its values
        (:func:`domain.hold_one_object`)."""
        domain.hold_expanded(self, self.names)
        domain.hold_aliased(self, self.names, self.memory_layouts)
        domain.hold_one_object(self, self.one_object)

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the input tensors, in the contract's order."""
        return TENSORS[self.function]

    @property
    def inputs(self) -> tuple[np.ndarray, ...]:
        """The input arrays, in the order of :attr:`names`."""
        arrays = (self.q, self.k, self.v, self.lambda_logits)
        return tuple(a for a in arrays[: len(self.names)] if a is not None)

    @property
    def memory_layouts(self) -> tuple[str, ...]:
        """The layout of every input tensor."""
        return self.layouts or ("contiguous",) * len(self.names)

    @property
    def is_causal(self) -> bool:
        """Whether the causal mask applies."""
        return self.causal is not False

    @property
    def group(self) -> int:
        """G = Hq / Hkv."""
        return self.q.shape[2] // self.k.shape[2]

    @property
    def output_shape(self) -> tuple[int, ...]:
        """[B, T, Hq, D] for gqa_attention, [B, T, Hq / 2, D] for diff_v2_attention."""
        b, t, hq, d = self.q.shape
        return (b, t, hq if self.function == GQA else hq // 2, d)

    def requires_grad(self, name: str) -> bool:
        """Whether the gradient with respect to input ``name`` is requested in gradient checks."""
        return name not in self.frozen

    def label(self, grads: bool = False) -> str:
        """A short description of the call for messages (of a call with gradients: made with autograd enabled)."""
        b, t, hq, d = self.q.shape
        causal = "causal omitted (default True)" if self.causal is None else f"causal={self.causal}"
        if self.causal is not None and self.binding != "keyword":
            causal += " (by position)" if self.binding == "positional" else " (every argument by name)"
        parts = [f"B={b} T={t} Hq={hq} Hkv={self.k.shape[2]} D={d}", self.dtype, causal]
        if self.lambda_logits is not None:
            low, high = float(self.lambda_logits.min()), float(self.lambda_logits.max())
            parts.append(f"lambda_logits in [{low:.4g}, {high:.4g}]")
        if self.frozen:
            parts.append(f"{', '.join(self.frozen)} without requires_grad")
        parts += domain.one_object_labels(self) + domain.origin_labels(self) + (domain.cotangent_labels(self) if grads else [])
        if layouts := domain.layouts_label(self.names, self.memory_layouts):
            parts.append(layouts)
        if self.grad_mode != "enabled" and not grads:
            parts.append(f"called under torch.{self.grad_mode}()")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


def heads(rng: np.random.Generator, function: str, room: int = BUDGET) -> tuple[int, int]:
    """(Hq, Hkv) for ``function``: Hkv from KV_HEADS, G from the function's groups, drawn again while Hq exceeds
    ``room`` (taken as at least MIN_HEAD_ROOM, which both functions' smallest pairs fit)."""
    while True:
        hkv = int(rng.choice(KV_HEADS))
        group = int(rng.choice(GQA_GROUPS if function == GQA else DIFF_V2_GROUPS))
        if hkv * group <= max(room, MIN_HEAD_ROOM):
            return hkv * group, hkv


def head_room(length: int, width: int) -> int:
    """How many query heads one batch element of ``length`` tokens and ``width`` features has within BUDGET."""
    return BUDGET // (length * max(length, width))


def shape(
    rng: np.random.Generator, function: str, shortest: int = 1, longest: int = domain.LONGEST, widest: int = domain.WIDEST,
    *, head_counts: tuple[int, int] | None = None,
) -> tuple[int, int, int, int, int]:  # fmt: skip
    """(B, T, Hq, Hkv, D) from the contract's domain; Hq (when drawn) and then B shrink so that B·Hq·T·max(T, D) stays
    within BUDGET, as far as MIN_HEAD_ROOM query heads and one batch element allow."""
    t, d = domain.sequence_length(rng, shortest, longest), domain.head_width(rng, widest)
    hq, hkv = head_counts or heads(rng, function, head_room(t, d))
    room = max(1, head_room(t, d) // hq)
    return int(rng.integers(1, min(3, room) + 1)), t, hq, hkv, d


def batched(dims: tuple[int, int, int, int, int]) -> tuple[int, int, int, int, int]:
    """``dims`` (B, T, Hq, Hkv, D) with two batch elements or more (a shape drawn for short sequences stays within BUDGET)."""
    return (max(2, dims[0]), *dims[1:])


def spread(dims: tuple[int, int, int, int, int]) -> tuple[int, int, int, int, int]:
    """``dims`` (B, T, Hq, Hkv, D) with two elements or more along every dim an input can be expanded along
    (:data:`EXPANSIONS`): B ≥ 2, T ≥ 2 and Hkv ≥ 2 (Hq grown with it, the group kept), so that an expanded input repeats
    its first element and code that reads one element for all meets a call where the others differ."""
    b, t, hq, hkv, d = dims
    return max(2, b), max(2, t), hq // hkv * max(2, hkv), max(2, hkv), d


def coinciding_dims(rng: np.random.Generator, function: str) -> tuple[tuple[int, int, int, int, int], ...]:
    """(B, T, Hq, Hkv, D) whose axes coincide (:func:`domain.coinciding_sizes`): B = T = Hq = 2D = 2Hkv, and every axis of
    the output (B, T, heads, D) and of the keys equally long (one group for gqa_attention, pairs for diff_v2_attention).
    Code that tells an axis by its size (heads taken for tokens when they agree) guesses wrong there."""
    even, side = domain.coinciding_sizes(rng)
    return (even, even, even, even // 2, even // 2), (side, side, side if function == GQA else 2 * side, side, side)


def many_problems(rng: np.random.Generator, function: str, group: int) -> tuple[int, int, int, int, int]:
    """(B, T, Hq, Hkv, D) whose (batch, output head) pairs number past every block size
    (:func:`domain.past_every_block_of_problems`), query heads in groups of ``group`` (G, a multiple of 2 for
    diff_v2_attention), 2 to 6 tokens of 1 to 4 features. With a G that divides no block size (:data:`UNALIGNED_GROUPS`),
    a block of flattened (batch, query head) rows starts inside a group: code that finds a block's key/value head from
    its rows' local index, not their global one, takes the wrong one there."""
    per_output = 1 if function == GQA else 2  # query heads per output head
    batch, heads = domain.past_every_block_of_problems(rng, multiple=group // per_output)
    hq = per_output * heads
    return batch, int(rng.integers(2, 7)), hq, hq // group, int(rng.integers(1, 5))


def gate_logits(rng: np.random.Generator, size: tuple[int, ...], saturated: float = 0.0, zeros: float = 0.0) -> np.ndarray:
    """lambda_logits of ``size``: about N(0, 2²) with a TRANSITION_SHARE at ±TRANSITION (log-uniform magnitudes), a ``saturated``
    share at ±[100, 1000] (signs drawn) and a ``zeros`` share exactly 0.

    0 is where σ has its steepest slope, 1/4, and where a gate built on |ℓ|
    (exp(−|ℓ|) without the sign's branch in its derivative) has a kink.
    """
    logits = 2.0 * rng.standard_normal(size)
    between = np.exp(rng.uniform(math.log(TRANSITION[0]), math.log(TRANSITION[1]), size)) * rng.choice((-1.0, 1.0), size)
    logits = np.where(rng.random(size) < TRANSITION_SHARE, between, logits)
    if saturated:
        far = domain.signed_uniform(rng, *SATURATED, size)
        logits = np.where(rng.random(size) < saturated, far, logits)
    if zeros:
        logits = np.where(rng.random(size) < zeros, 0.0, logits)
    return logits


def _largest_logits(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per query head, the largest |q·k|/√D over every query and key (the key of its group), [Hq]."""
    group = q.shape[2] // k.shape[2]
    keys = np.repeat(k, group, axis=2)
    return np.abs(np.einsum("bthd,bshd->hts", q, keys)).max(axis=(1, 2)) / math.sqrt(q.shape[-1])


def case(
    rng: np.random.Generator,
    function: str,
    dims: tuple[int, int, int, int, int],
    dtype: str,
    causal: bool | None,
    *,
    max_logit: float | None = None,
    ramp: bool | None = None,
    below: float | None = None,
    sink: float | None = None,
    future: float | None = None,
    faint: int | None = None,
    saturated: float = 0.0,
    zeros: float = 0.0,
    layouts: tuple[str, ...] = (),
    frozen: tuple[str, ...] = (),
    binding: str = "keyword",
    grad_mode: str = "enabled",
    note: str = "",
) -> Case:
    """Random inputs and cotangent for ``dims`` = (B, T, Hq, Hkv, D).

    ``max_logit`` rescales the queries of every head so that the largest
    scaled logit |q·k|/√D equals it; ``ramp`` (False: falling, True: rising)
    scales the keys along the tokens first (:func:`domain.token_ramp`);
    ``below`` makes every scaled logit about −below (:func:`domain.far_below`);
    ``sink`` makes the first key an attention sink, its scaled logit about ``sink`` for every query
    (:func:`domain.attention_sink`); ``future`` makes the last key draw about that scaled logit from every earlier query
    (:func:`domain.future_far_above`); ``faint`` makes every key from that one on faint (:func:`domain.faint_keys`); ``saturated`` is the share of gate logits drawn at ±[100, 1000],
    ``zeros`` the share set to exactly 0.
    """
    b, t, hq, hkv, d = dims
    q, k, v = rng.standard_normal((b, t, hq, d)), rng.standard_normal((b, t, hkv, d)), rng.standard_normal((b, t, hkv, d))
    if ramp is not None:
        k = k * domain.token_ramp(t, ramp)[:, None, None]
    if max_logit is not None:
        q = q * (max_logit / _largest_logits(q, k))[:, None]
    if below is not None:
        q, k = domain.far_below(q, k, below)
    if sink is not None:
        q, k = domain.attention_sink(q, k, sink, tokens=1)
    if future is not None:
        q, k = domain.future_far_above(q, k, future, tokens=1)
    if faint is not None:
        q, k = domain.faint_keys(q, k, faint, tokens=1)
    gates = gate_logits(rng, (b, t, hq // 2), saturated, zeros) if function == DIFF_V2 else None
    out = (b, t, hq if function == GQA else hq // 2, d)
    return Case(
        function,
        exact(q, dtype), exact(k, dtype), exact(v, dtype),
        None if gates is None else exact(gates, dtype),
        dtype=dtype,
        causal=causal,
        cotangent=exact(rng.standard_normal(out), dtype),
        layouts=layouts,
        frozen=frozen,
        binding=binding,
        keyword_order=domain.keyword_order(rng, PARAMETERS[function], binding),
        grad_mode=grad_mode,
        note=domain.joined_notes(note, None if faint is None else domain.faint_note(faint)),
    )  # fmt: skip


def with_padding(base: Case, rng: np.random.Generator) -> Case:
    """``base`` with padding tokens (:func:`domain.padding_tokens`): the first and one drawn token all zeros in the queries,
    keys, values and gate logits. Their logits are exactly 0 and their values zeros, which a mask must treat like any other
    (only positions decide what is hidden)."""
    tokens = domain.padding_tokens(rng, base.q.shape[1])
    gates = None if base.lambda_logits is None else domain.padded(base.lambda_logits, tokens, axis=1)
    return replace(base, q=domain.padded(base.q, tokens, axis=1), k=domain.padded(base.k, tokens, axis=1),
                   v=domain.padded(base.v, tokens, axis=1), lambda_logits=gates,
                   note=domain.padding_note(tokens))  # fmt: skip


def with_values(base: Case, v: np.ndarray, note: str) -> Case:
    """``base`` with values ``v``, its label adding ``note``."""
    return replace(base, v=v, note=domain.joined_notes(base.note, note))


def gate_everywhere_at(base: Case, rng: np.random.Generator, sign: float) -> Case:
    """``base`` with every gate logit of one sign (−1: a closed gate, +1: an open one) and of a magnitude float64 resolves and
    float32 does not (:data:`RESOLVED_BY_FLOAT64_ONLY`): a shortcut taken when the gate is shut or open everywhere (the odd
    maps dropped, the gate taken as 0 or 1) is right in float32 and wrong in float64."""
    assert base.lambda_logits is not None
    logits = sign * rng.uniform(*RESOLVED_BY_FLOAT64_ONLY, base.lambda_logits.shape)
    level = "closed" if sign < 0 else "open"
    return replace(base, lambda_logits=exact(logits, base.dtype), note=f"the gate {level} everywhere, as far as float64 still resolves")


def tied_pairs(q: np.ndarray) -> np.ndarray:
    """Queries [B, T, Hq, D] with the odd head of every pair equal in value to the even one (tied initialisations): both maps
    of a pair are one, so a shortcut that computes it once for both loses the odd heads' gradients."""
    tied = np.array(q, dtype=np.float64, copy=True)
    tied[:, :, 1::2] = tied[:, :, 0::2]
    return tied


def equal_pairs(base: Case) -> Case:
    """``base`` with the queries of every pair equal in value (:func:`tied_pairs`)."""
    return replace(base, q=tied_pairs(base.q), note="query heads 2i and 2i + 1 equal in value")


def shared_offset(base: Case, rng: np.random.Generator) -> Case:
    """``base`` with one random vector c (entries of magnitude 1 to 3) added to the value of every token."""
    offset = exact(domain.signed_uniform(rng, 1.0, 3.0, base.v.shape[-1]), base.dtype)
    return replace(base, v=exact(base.v + offset, base.dtype), note="every token's value shifted by one shared vector c")


def redrawn(base: Case, rng: np.random.Generator, renew: Renew = domain.fresh_like) -> Case:
    """``base`` with new values of the same shapes (gate logits and cotangent too), everything else kept; ``renew`` makes
    each array's new values (with :func:`domain.shuffled_like`, its own in another order)."""
    q, k, v, cotangent = (renew(rng, values, base.dtype) for values in (base.q, base.k, base.v, base.cotangent))
    gates = None if base.lambda_logits is None else renew(rng, base.lambda_logits, base.dtype)
    return replace(base, q=q, k=k, v=v, lambda_logits=gates, cotangent=cotangent)


def shuffled(base: Case, rng: np.random.Generator) -> Case:
    """``base`` with each array's own values in another order (:func:`domain.shuffled_like`), everything else kept."""
    return redrawn(base, rng, domain.shuffled_like)


def retyped(base: Case, rng: np.random.Generator) -> Case:
    """``base`` with new values of the same shapes in the other dtype."""
    return redrawn(replace(base, dtype="float64" if base.dtype == "float32" else "float32"), rng)


def reflagged(base: Case, rng: np.random.Generator) -> Case:
    """``base`` with new values of the same shapes and dtype and the other causal flag (:func:`domain.other_flag`)."""
    return redrawn(replace(base, causal=domain.other_flag(base.causal)), rng)


def changed_alone(base: Case, rng: np.random.Generator, name: str) -> Case:
    """``base`` with only the argument ``name`` given another value: new values for a tensor, the other causal flag
    (:func:`domain.other_flag`)."""
    if name == "causal":
        return replace(base, causal=domain.other_flag(base.causal))
    tensor: dict[str, Any] = {name: domain.fresh_like(rng, getattr(base, name), base.dtype)}
    return replace(base, **tensor)


def resized(base: Case, rng: np.random.Generator, decoding: bool) -> Case:
    """``base`` with new values of other shapes, the rest kept: fewer tokens (one when ``decoding``, as a decoding step has),
    another batch size, other head counts, the same width."""
    b, t, hq, hkv, d = base.q.shape[0], base.q.shape[1], base.q.shape[2], base.k.shape[2], base.q.shape[3]
    length = 1 if decoding or t == 1 else int(rng.integers(1, t))
    counts = heads(rng, base.function, head_room(length, d))
    while counts == (hq, hkv):
        counts = heads(rng, base.function, head_room(length, d))
    other = case(rng, base.function, (3 - b if b < 3 else 1, length, *counts, d), base.dtype, base.causal)
    return replace(base, q=other.q, k=other.k, v=other.v, lambda_logits=other.lambda_logits, cotangent=other.cotangent)
