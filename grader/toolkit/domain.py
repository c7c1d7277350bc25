"""Seeded draws from the domain a tensor function's contract allows, shared by every exercise.

Each case set draws from its own generator, a function of the run's seed and
the set's name (:func:`generator`), so adding a set never changes another
set's inputs. Values are drawn in float64 and rounded to the case's dtype at
once (:func:`exact`): the oracle then sees exactly the numbers the submission
sees.

Beyond values, a call varies in how its tensors sit in memory (the layouts
the worker builds, grader/worker/child.py), how its arguments are bound, the
autograd mode it is made in, and what came before it (a call sequence), and
its sizes are drawn with extra weight where bugs of tiled kernels live:
lengths next to block sizes, widths of 1, odd widths. docs/domain.md
describes the domain and how each case set samples it.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

import numpy as np

from grader.toolkit.tolerance import Truth

# Memory layouts the worker can give an input: views of a transposed or head-permuted buffer,
# every other column of a wider buffer, the middle third of a fused [..., 3·width] projection (a
# non-zero storage offset), torch's channels_last memory format (axes stored in the order 0, 2, 3, 1:
# the second axis innermost; "order@..." stores any order, outermost first), and a contiguous tensor
# that starts at a non-zero storage offset.
CHANNELS_LAST = "order@0,2,3,1"
NON_CONTIGUOUS = ("transposed", "heads_permuted", "sliced", "fused", CHANNELS_LAST)
OFFSET_LAYOUTS = ("fused", "offset")
# An input given "expanded" is its first batch element broadcast over the batch (stride 0 along its first axis), as one
# sequence expanded to a batch is: code that allocates a buffer with its input's strides (empty_strided) or writes into a
# view of it meets elements that share memory. Its values are the first batch element's, repeated (:func:`broadcast_along`).
# "expanded@N" is the same along dim N (keys shared by every head, as multi-query attention expands them).
EXPANDED = "expanded"
# Every input of a call given "packed" lies in one storage, one after another at non-zero offsets (the slices of one fused
# projection): code that tells its inputs apart by their storage (untyped_storage(), data_ptr() of the storage) meets it.
PACKED = "packed"
# Every input of a call given "aliased" starts at the same address of one storage, the n-th with its elements n + 1 apart:
# distinct tensors with one data_ptr() whose memory overlaps, as two views of one parameter are. Code that takes inputs
# with one address for one tensor (a shortcut for a vector paired with itself, a cache keyed by data_ptr()) meets it. Their
# values agree where they share memory (:func:`aliased`).
ALIASED = "aliased"
# Every input of a call given "stacked" is one slice of a buffer that stacks the inputs of its shape on a new axis before the
# last ([..., n, D], as a fused KV projection holds keys and values): same strides, the second D elements after the first.
STACKED = "stacked"
# How a message says that every input of a call shares one storage.
SHARED_STORAGE = {PACKED: "in one storage, one after another", ALIASED: "at one address of one storage (one data_ptr(), memory that overlaps)",
                  STACKED: "of one shape stacked in one buffer [..., n, D] as a fused projection's parts (same strides, D elements apart)"}
# How a message names a layout whose worker name says little to a student.
LAYOUT_WORDS = {CHANNELS_LAST: "channels_last (axes stored in the order 0, 2, 3, 1)", STACKED: "stacked (one [..., n, D] buffer)"}
# How a call binds its arguments: "keyword" passes the tensors by position and the last parameter
# (the one with a default) by name; "positional" passes every argument by position; "names" passes
# every argument by name, in an order of the generator's choosing (:func:`keyword_order`).
BINDINGS = ("keyword", "positional", "names")
# The autograd mode a call without gradients is made in: submissions may branch on torch.is_grad_enabled().
GRAD_MODES = ("enabled", "no_grad", "inference_mode")
BLOCK_SIZES = (16, 32, 64, 128, 256)
LONGEST = 320  # the longest sequence drawn: past every block size and fixed-size buffer of 256
WIDEST = 64  # the widest head (D)
# Past the drawn domain, each output set adds a call at the sizes of large models, where fixed-size buffers and wide
# tiles live: a sequence past a mask buffer of 1024 tokens (GPT-2's context) and key blocks of 512, and a problem with
# heads of 65 to 128 features (128 is most large models' head width) and 24 (batch, head) pairs. See :func:`model_scale`.
LONGEST_BUFFER = 1024
# One past a multiple of every block size up to 512 (a large kernel's tile): a tiled loop meets a last tile of one key or
# query, and a loop whose range stops one short (range(b, T - 1, b)) never visits it. The gradient sets call each function
# once without the mask at this length: a backward pass recomputed in blocks of 512 queries must meet every key there.
ONE_PAST_BLOCKS = 2 * max(BLOCK_SIZES) + 1
TOKENS = "the number of tokens"
"""The call attribute the diagnosis contrasts sequence lengths by (:func:`token_count`)."""
BATCH = "the batch size"
"""The call attribute the diagnosis contrasts batch sizes by: "1" (one sequence, a path that squeezes the batch away) or
"more than 1"."""


def batch_size(count: int) -> str:
    """The value of the :data:`BATCH` attribute for ``count`` batch elements."""
    return "1" if count == 1 else "more than 1"


def token_count(tokens: int) -> str:
    """The value of the :data:`TOKENS` attribute: "1", "2 to 512" or "more than 512" (past a large kernel's tile, where
    a loop over blocks of 512 keys or queries meets its second block)."""
    if tokens == 1:
        return "1"
    return f"2 to {ONE_PAST_BLOCKS - 1}" if tokens < ONE_PAST_BLOCKS else f"more than {ONE_PAST_BLOCKS - 1}"
MODEL_LENGTHS = (LONGEST_BUFFER + 1, 1040)
# The long call is an evaluation under inference_mode: a buffer or mask that a function grows to the longest length seen is
# then made by it as an inference tensor, which every later call with gradients meets (the evaluations before training of
# the call sequences stay past every other length without reaching 1040 tokens, whose oracle costs a second a run).
LONG_CALL_MODE = "inference_mode"
# The context window of many trained models (GPT-3's, OPT's) and the size a sliding-window mask is most often given: a mask
# that keeps only the last 2048 keys of each query, or a buffer of 2048 positions, is right at every shorter length. Each
# causal output set ends with one float32 call past it (:func:`past_context`), whose truth costs 0.1 s in float64
# arithmetic (grader.toolkit.softmax); windows of 4096 and more stay beyond the checks (each doubling costs four times).
LONGEST_CONTEXT = 2048
CONTEXT_LENGTHS = (LONGEST_CONTEXT + 1, LONGEST_CONTEXT + 16)
# The longest sequences the length probes of the diagnosis read: past every block size up to 512, past a mask buffer of
# 1024 tokens and past a context window of 2048 (the lengths of the checks' longest calls, where a fault of long sequences
# first shows)
PROBED_PAST_BUFFERS = (ONE_PAST_BLOCKS, MODEL_LENGTHS[0], CONTEXT_LENGTHS[0])
MODEL_WIDTHS = (WIDEST + 1, 256)
# The head widths of large models, drawn half the time in a wide call: past 64, and from 128 on, where code that rescales
# wide heads (query-key layer scaling, a kernel's tile of 128) takes another path
COMMON_WIDTHS = (80, 96, 128, 192, 256)
WIDE_PATH = 128
KERNEL_WIDEST = 256  # the widest head fused attention kernels take: each exercise's non-causal set has one call past it
MODEL_PROBLEMS = (2, 12)  # B and H (or query heads) of the wide call: a multiple of 4 (batch, head) pairs, as kernels' fast paths ask
# The lengths of the wide call: multiples of 8 past 16 (a training batch padded to a multiple, where a fused kernel's shape
# constraints, such as 16 < T and T % 4 == 0, hold and its fast path is taken)
MODEL_SHAPED_LENGTHS = (24, 64)
# Every scaled logit of a float64 call about −2e6 to −1e7: below the finite numbers code writes for −∞ in a mask (−1e4,
# −65504, −1e5, −1e6), so a masked key weighs more than every visible one. The logits of a row differ by about 1, which
# float64 still resolves at that magnitude.
BELOW_FINITE_MASKS = (2e6, 1e7)
# The scaled logit that the last key of a causal call draws from every earlier query (future_far_above): past 1e4, so a mask
# that adds the −10000 of half-precision code for −∞ leaves that future key the row's weight. No larger: the allowance counts
# masked logits (a correct rewrite that centres the keys over every token rounds at their size), and at 1e5 it would hold
# the whole output.
FUTURE_ABOVE_VISIBLE = (1.2e4, 2.5e4)
FUTURE_ABOVE_NOTE = "the last key a future key of scaled logit about 1.2e4 to 2.5e4 for every earlier query"
"""How a case label says that its last key draws :data:`FUTURE_ABOVE_VISIBLE` (:func:`future_far_above`)."""
# The magnitude of values drawn large: outputs past 65504 (float16's largest), which float32 and float64 hold and which
# code that clamps to float16's range, or scales through it, cuts.
LARGE_VALUES = (2e5, 1e6)
# How the second call of a sequence gets its inputs, and how a message says so.
SEQUENCE_KINDS = {
    "repeat": "called twice with the same tensors",
    "refill": "called, its inputs overwritten in place (as an optimiser step does) with their own values in another order, called again",
    "refill_data": "called, its inputs overwritten in place through .data (their version counters unchanged) with their own values in "
                   "another order, called again",
    "reallocate": "called, its inputs freed, called again with new tensors of the same shapes",
    "retyped": "called, then called with new tensors of the same shapes in the other dtype",
    "reflagged": "called, then called with new tensors of the same shapes and dtype, and another value of its option",
    "interleaved": "called on two sets of tensors as two layers do (the second with another value of its option and of its "
                   "hyperparameters), then differentiated through both results in one backward pass",
    "resized": "called, then called with new tensors of other shapes (fewer tokens, down to one as a decoding step has, other counts)",
    "stacked": "called on two sets of tensors as two layers of one model do (the same value of its option, the second with "
               "other hyperparameters), then differentiated through both results in one backward pass",
    "retrained": "called without autograd (the mode above), then called again with the same tensors and differentiated (an "
                 "evaluation, then a training step)",
    "rescaled": "called, then called with new tensors of the same shapes whose logits are hundreds of times larger (what one "
                "call learns of the logits' size, kept for the next, is then far off)",
    "stepped": "called and differentiated at once (backward() right after the call, its graph freed), then called again with "
               "the same, unchanged tensors and differentiated (two training steps on one batch)",
    "retained": "called and differentiated with backward(retain_graph=True), then differentiated again through the same output "
                "(two losses back-propagated through one graph)",
    "one_changed": "called, then called again with every argument the same object but one, which changes",
}
# The modes the calls of each kind of sequence are made in ("grads": inputs that require grad, and a backward pass); for
# "retrained", the mode of its first call (the second is differentiated).
SEQUENCE_MODES = ("enabled", "no_grad", "inference_mode", "grads")
KIND_MODES = {"interleaved": ("grads",), "stacked": ("grads",), "retrained": ("no_grad", "inference_mode"), "stepped": ("grads",),
              "retained": ("grads",), "rescaled": ("enabled", "no_grad")}
SCALED_KINDS = ("rescaled",)  # the kinds drawn only for an exercise whose inputs have a scale to change (Variations.rescaled)
ONE_CALL = ("retained",)  # the kinds whose "two calls" are one call differentiated twice
ONE_ARGUMENT = ("one_changed",)  # the kinds drawn once per argument, only for an exercise that can change one alone (Variations.alone)
TWO_LAYERS = ("interleaved", "stacked")  # the kinds whose calls are both differentiated, in one backward pass


class Case(Protocol):
    """What the toolkit needs of an exercise's case: the function it calls, its dtype and a description."""

    @property
    def function(self) -> str:
        """The function the case's (last) call calls."""

    @property
    def dtype(self) -> str:
        """The dtype of its input tensors."""

    def label(self) -> str:
        """A short description of the inputs for messages."""


_Case = TypeVar("_Case", bound=Case)
_Drawn = TypeVar("_Drawn", bound=Any)  # a case dataclass of any exercise


def generator(seed: int, name: str) -> np.random.Generator:
    """The generator of one case set: a function of the run's seed and the set's name."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def offshoot(rng: np.random.Generator, name: str) -> np.random.Generator:
    """A generator that depends on the seed ``rng`` was made from and on ``name``, not on how much of ``rng`` was drawn:
    probes that run after others which may or may not have drawn still get the same inputs for every submission."""
    seeds = rng.bit_generator.seed_seq
    assert isinstance(seeds, np.random.SeedSequence)
    return np.random.default_rng(np.random.SeedSequence(seeds.entropy, spawn_key=(*seeds.spawn_key, zlib.crc32(name.encode()))))


def exact(values: Any, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` and back, so both sides see the same numbers."""
    if dtype == "bfloat16":
        return _bfloat16(values)
    return np.asarray(values, dtype=dtype).astype(np.float64)


def _bfloat16(values: Any) -> np.ndarray:
    """Finite values rounded as torch rounds them to bfloat16 (to float32, then to its top 16 bits, ties to even), in
    float64: numpy has no bfloat16."""
    bits = np.asarray(values, dtype=np.float64).astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32).astype(np.float64)


def signed_uniform(rng: np.random.Generator, low: float, high: float, size: int | tuple[int, ...] | None = None) -> Any:
    """Magnitudes uniform in [low, high) with random signs (one number when ``size`` is None)."""
    return rng.uniform(low, high, size) * rng.choice([-1.0, 1.0], size)


Renew = Callable[[np.random.Generator, np.ndarray, str], np.ndarray]
"""(generator, an input's values, dtype) -> the values of the input's next call: :func:`fresh_like` or :func:`shuffled_like`."""


def fresh_like(rng: np.random.Generator, values: np.ndarray, dtype: str) -> np.ndarray:
    """New normal values of the shape and spread of ``values`` (spread 1 when they are constant), exact in ``dtype``."""
    return exact(rng.standard_normal(np.shape(values)) * (float(np.std(values)) or 1.0), dtype)


def shuffled_like(rng: np.random.Generator, values: np.ndarray, dtype: str) -> np.ndarray:
    """``values``' own elements in another order, exact in ``dtype``: each vector along the last axis its own elements in an
    order of its own (the whole tensor's elements in another order when that axis holds one), so that the tensor and each
    of its vectors keep their sum, norm, extremes and sorted values, and an answer kept under a key made of such
    statistics (a checksum of the tensor, or of each vector) is met with inputs that share the key."""
    array = np.asarray(values)
    if array.ndim < 2 or array.shape[-1] < 2:
        return exact(rng.permutation(np.ravel(array)).reshape(array.shape), dtype)
    return exact(rng.permuted(array, axis=-1), dtype)


def other_flag(flag: bool | None) -> bool | None:
    """The other value of an optional flag whose default is True (None: left out): False after True or left out, and left out
    after False, so that the default must apply whatever came before."""
    return None if flag is False else False


def keyword_order(rng: np.random.Generator, names: tuple[str, ...], binding: str) -> tuple[str, ...]:
    """A shuffled order of ``names`` for a call that passes every argument by name; () for the other bindings."""
    return tuple(str(n) for n in rng.permutation(names)) if binding == "names" else ()


def by_name(case: _Drawn, rng: np.random.Generator, names: tuple[str, ...]) -> _Drawn:
    """``case`` (a dataclass with ``binding`` and ``keyword_order`` fields) called with every argument by name, in a shuffled
    order of ``names``. The gradient sets pass their tensors by position otherwise; code that looks for the tensors that
    require grad among its positional arguments only (``*args`` in a decorator) finds none in such a call, and keeps no
    graph. A copy shares the case's arrays, so its truths are the case's."""
    return replace(case, binding="names", keyword_order=keyword_order(rng, names, "names"))


def cycled_modes(found: list[_Drawn]) -> list[_Drawn]:
    """The cases (dataclasses with a ``grad_mode`` field) with their autograd modes cycled through GRAD_MODES, from no_grad.

    The first case of a set is an evaluation: whichever set a run asks for
    first, a function's first call is made without autograd, so that what a
    first call decides and keeps (a mode, a cached tensor) meets the calls
    that build a graph after it (the other order hides nothing: what a
    first call with autograd keeps is used harmlessly under no_grad).
    """
    return [replace(case, grad_mode=GRAD_MODES[(i + 1) % len(GRAD_MODES)]) for i, case in enumerate(found)]


def trainable_alone(names: Sequence[str]) -> list[tuple[str, ...]]:
    """For each input of ``names``, the others (those frozen when that input alone requires grad).

    At the smallest shapes (one token, one batch element, one head) a
    function may take a shortcut (a single key's weight is 1, a single gate
    is a number) whose output is right but keeps no graph to the inputs it
    no longer needs: it is attached, and their gradients are exactly 0, only
    if they stay in the computation.
    """
    return [tuple(other for other in names if other != name) for name in names]


def sequence_length(rng: np.random.Generator, shortest: int = 1, longest: int = LONGEST) -> int:
    """A length in [shortest, longest]: half the time next to a block size (b - 1, b, b + 1), else log-uniform."""
    edges = [b + o for b in BLOCK_SIZES for o in (-1, 0, 1) if shortest <= b + o <= longest]
    if edges and rng.random() < 0.5:
        return int(rng.choice(edges))
    return int(min(longest, max(shortest, round(math.exp(rng.uniform(math.log(shortest), math.log(longest + 1)))))))


def head_width(rng: np.random.Generator, widest: int = WIDEST) -> int:
    """A head width D in [1, widest]: often 1, a power of two or one past it, else uniform."""
    special = [d for d in (1, 2, 3, 8, 16, 17, 32, 64) if d <= widest]
    return int(rng.choice(special)) if rng.random() < 0.6 else int(rng.integers(1, widest + 1))


def batch_and_heads(rng: np.random.Generator, length: int, width: int, budget: int = 2**16) -> tuple[int, int]:
    """B and H in [1, 3], fewer for long problems, so that B·H·T·max(T, D) stays within ``budget``.

    Each (batch, head) pair is its own attention problem: more of them add
    little that one long sequence does not already test, and cost the oracle.
    """
    room = max(1, budget // (length * max(length, width)))
    return int(rng.integers(1, min(3, room) + 1)), int(rng.integers(1, min(3, max(1, room // 2)) + 1))


def domain_shape(rng: np.random.Generator, shortest: int = 1, longest: int = LONGEST, widest: int = WIDEST) -> tuple[int, int, int, int]:
    """(B, H, T, D) drawn from the domain (see :func:`sequence_length`, :func:`head_width`, :func:`batch_and_heads`)."""
    t, d = sequence_length(rng, shortest, longest), head_width(rng, widest)
    return (*batch_and_heads(rng, t, d), t, d)


ACTIVATIONS = "inputs that require grad given as activations (non-leaf views)"
"""How a case label says that its inputs are activations: the outputs of a model's earlier layers, never leaves."""
HELD_GRADS = "inputs that require grad already holding a .grad (gradient accumulation)"
"""How a case label says that its leaf inputs hold a ``.grad`` before the call, as after an earlier micro-batch."""
PARAMETERS = "inputs that require grad given as torch.nn.Parameter (a model's weights)"
"""How a case label says that its leaf inputs are ``torch.nn.Parameter``, as a model's weights (DIFF V1's λ vectors) are."""


def origin_labels(case: Any) -> list[str]:
    """How a case (a dataclass with ``activations``, ``held_grads`` and ``parameters`` fields) gives its inputs that require
    grad, for its label: :data:`ACTIVATIONS`, :data:`HELD_GRADS` or :data:`PARAMETERS`; none for plain leaves."""
    return [label for given, label in ((case.activations, ACTIVATIONS), (case.held_grads, HELD_GRADS), (case.parameters, PARAMETERS)) if given]


def as_training_inputs(found: list[_Drawn]) -> list[_Drawn]:
    """The cases (dataclasses with ``activations``, ``held_grads`` and ``parameters`` fields) with every other one, from the
    second, given its inputs that require grad as activations: in a model, queries, keys and values are outputs of
    projections, not leaves, so code that tells parameters from activations (``is_leaf``) meets both; of the others every
    other one, from the third, given them as leaves that already hold a ``.grad``, as gradient accumulation over
    micro-batches leaves them: a call must leave that ``.grad`` as it was (code that resets it, ``x.grad = None``, erases
    what the earlier micro-batches accumulated); and of the rest every other one, from the fifth, given them as
    ``torch.nn.Parameter``, as a model's weights are (DIFF V1's λ vectors always): a tensor subclass, which code that
    tests ``type(x) is torch.Tensor`` or reads ``x.data`` of a parameter meets. The gradients of a case whose inputs hold
    a ``.grad`` are asked for both ways such a caller asks (``torch.autograd.grad``, then ``.backward()`` onto the held
    ``.grad``). Independently, every third case with a ``cotangent_layout`` field (an output of several axes), from the
    second, gets the gradient of its output in another memory layout
    (:data:`COTANGENT_LAYOUTS`, in turn), as a caller who reads the output through a transpose sends it: a backward pass
    that views its incoming gradient as laid out like the output it returned raises there."""
    views = list(COTANGENT_LAYOUTS)
    return [replace(case, activations=i % 2 == 1, held_grads=i % 4 == 2, parameters=i % 8 == 4,
                    **({"cotangent_layout": _moving(views[(i // 3) % len(views):] + views, case.cotangent.shape) if i % 3 == 1 else "contiguous"}
                       if hasattr(case, "cotangent_layout") else {}))
            for i, case in enumerate(found)]  # fmt: skip


COTANGENT_LAYOUTS = {
    "heads_permuted": "the output's gradient with its second and third axes swapped in memory (the output read through a transpose)",
    "transposed": "the output's gradient with its last two axes swapped in memory (the output read through a transpose)",
}
"""The memory layouts (the worker's names) in which the gradient of a case's output may arrive, and how a label says so."""
SWAPPED_AXES = {"heads_permuted": (1, 2), "transposed": (-2, -1)}
"""The two axes whose order in memory each of :data:`COTANGENT_LAYOUTS` swaps."""


def _moving(layouts: Sequence[str], shape: Sequence[int]) -> str:
    """The first of ``layouts`` that moves the elements of a tensor of ``shape`` in memory (both axes it swaps longer than
    1: swapping an axis of one element changes no stride that counts), else "contiguous"."""
    return next((layout for layout in layouts if len(shape) >= 3 and all(shape[axis] > 1 for axis in SWAPPED_AXES[layout])), "contiguous")


def cotangent_labels(case: Any) -> list[str]:
    """How a case (a dataclass with a ``cotangent_layout`` field) has the gradient of its output laid out, for the label of a
    call with gradients; none when it is contiguous."""
    return [COTANGENT_LAYOUTS[case.cotangent_layout]] if case.cotangent_layout in COTANGENT_LAYOUTS else []


def padding_tokens(rng: np.random.Generator, length: int) -> tuple[int, ...]:
    """The tokens of a sequence of ``length`` made padding: the first, and one drawn (the same one when ``length`` is 1)."""
    return tuple(sorted({0, int(rng.integers(0, length))}))


def padding_note(tokens: Sequence[int]) -> str:
    """How a case label names its padding tokens."""
    return f"tokens {' and '.join(map(str, tokens))} all zeros (padding)"


def padded(values: np.ndarray, tokens: Sequence[int], axis: int) -> np.ndarray:
    """``values`` with the rows of ``tokens`` along the token ``axis`` exactly zero, as every per-token input of a padding
    token is (the projections of a zero embedding): logits exactly 0, which only positions may hide, and values of zeros,
    which are values like any other."""
    values = values.copy()
    index: list[Any] = [slice(None)] * values.ndim
    index[axis] = list(tokens)
    values[tuple(index)] = 0.0
    return values


def tied(values: np.ndarray, axis: int) -> np.ndarray:
    """``values`` with every row along the token ``axis`` equal to the first one (keys so tied give each query a row of
    equal logits, none of them 0 unless the first key is)."""
    first = np.take(values, [0], axis=axis)
    return np.repeat(first, values.shape[axis], axis=axis)


def dead_feature(found: Sequence[_Drawn], values: Callable[[_Drawn], np.ndarray],
                 rebuilt: Callable[[_Drawn, np.ndarray, str], _Drawn]) -> list[_Drawn]:  # fmt: skip
    """``found`` with the middle feature of the first case's values (``values(case)``, along the last axis) whose heads have
    two features or more made exactly zero at every token, as a ReLU'd or pruned projection gives (``rebuilt(case, values,
    note)`` makes the case, the note saying so). The outputs' feature is then exactly zero: a log-domain product or a
    division by an output meets log 0 or 0 / 0 there. A single feature is left alone: every gradient of the logits would
    vanish with it."""
    found = list(found)
    for i, case in enumerate(found):
        if values(case).shape[-1] > 1:
            zeroed, feature = values(case).copy(), values(case).shape[-1] // 2
            zeroed[..., feature] = 0.0
            found[i] = rebuilt(case, zeroed, f"value feature {feature} zero at every token")
            break
    return found


SUMMED = "differentiated as output.sum()"


def summed(case: _Drawn) -> _Drawn:
    """``case`` differentiated as a caller's ``loss = output.sum()`` is: a cotangent of ones, which the worker takes as the
    result's plain sum, so that the gradient reaching a hand-written backward pass is one element expanded (stride 0), as
    autograd's sum gives it. A backward pass that writes into its incoming gradient in place (the caller's tensor, which
    autograd may hand to others too) or views it as contiguous raises there."""
    note = f"{case.note}, {SUMMED}" if case.note else SUMMED
    return replace(case, cotangent=np.ones_like(case.cotangent), note=note)


def token_ramp(length: int, rising: bool = False) -> np.ndarray:
    """Factors from 1 down to 1/20 along ``length`` tokens, geometric (from 1/20 up to 1, ``rising``). Keys scaled by them
    give rows whose early and late key blocks have maxima far apart (past exp's range, at large logits), as a start token
    that draws all the attention does: an online softmax must carry the maximum of every block seen so far."""
    ramp = np.geomspace(1.0, 0.05, length)
    return ramp[::-1] if rising else ramp


SINK_LOGIT = 12.0  # the first key's scaled logit in an attention sink: most of each row's weight past 2,048 keys (e¹² ≈ 80·2,064)


def attention_sink(q: np.ndarray, k: np.ndarray, logit: float, tokens: int, key: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys (head width on the last axis, tokens on axis ``tokens``) remade from a tenth of ``q`` and ``k`` so
    that key ``key`` (the first) is an attention sink: every query's scaled logit for it is about ``logit`` (within 10 %
    for most queries), for every other key about 0, as the start token of a trained model draws most of each row's weight.
    A query that no longer reads the first key (a sliding window, a buffer that drops old keys) then gets an output far
    from the right one, not one key's 1/T share of it; a softmax whose shift misses that key (a maximum over some keys
    only) overflows when ``logit`` is past exp's range."""
    width = q.shape[-1]
    unit = np.full(width, 1.0 / math.sqrt(width))
    q, k = unit + 0.1 * q, np.moveaxis(0.1 * k, tokens, 0)
    k[key] = logit * math.sqrt(width) * unit
    return q, np.moveaxis(k, 0, tokens)


def large_values(values: np.ndarray, rng: np.random.Generator, dtype: str) -> tuple[np.ndarray, str]:
    """``values`` scaled to :data:`LARGE_VALUES` (in ``dtype``), and how a case label says so."""
    scale = float(rng.uniform(*LARGE_VALUES))
    return exact(values * scale, dtype), f"values scaled by {scale:.3g} (outputs past float16's 65504)"


def zero_head(values: np.ndarray, rng: np.random.Generator, heads: int) -> tuple[np.ndarray, str]:
    """``values`` with every element of one drawn (batch element, head) exactly zero, the head on axis ``heads`` (a
    zero-initialised or pruned head's projection), and how a case label says so: that head's outputs are exactly zero,
    which code that normalises a head by its largest value meets as 0 / 0."""
    batch, head = int(rng.integers(0, values.shape[0])), int(rng.integers(0, values.shape[heads]))
    index: list[Any] = [batch] + [slice(None)] * (values.ndim - 1)
    index[heads] = head
    values = values.copy()
    values[tuple(index)] = 0.0
    return values, f"every value of batch element {batch}, head {head} zero"


def future_far_above(q: np.ndarray, k: np.ndarray, logit: float, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys (head width on the last axis, tokens on axis ``tokens``) remade from a tenth of ``q`` and ``k`` so that
    the last key draws a scaled logit of ``logit`` from every query but the last (their parts along it removed), which is all zeros (it weighs every
    key alike), every other logit about 0: under the causal mask a future key for every query that draws it, which a mask
    that adds a finite number for −∞ leaves the row's weight, and no visible logit large."""
    width = q.shape[-1]
    unit = np.full(width, 1.0 / math.sqrt(width))
    across = q - (q @ unit)[..., None] * unit  # (a query's part along the far key would move its logit by up to a third)
    q, k = np.moveaxis(unit + 0.1 * across, tokens, 0), np.moveaxis(0.1 * k, tokens, 0)
    q[-1] = 0.0
    k[-1] = logit * math.sqrt(width) * unit
    return np.moveaxis(q, 0, tokens), np.moveaxis(k, 0, tokens)


def off_every_stride(rng: np.random.Generator, tokens: int) -> int:
    """An odd key position in the second half of ``tokens`` (at least 2): off every stride of a sample of every 2nd, 4th, 8th
    ... key, and past the first blocks."""
    return int(rng.choice(np.arange(tokens // 2 | 1, tokens, 2)))


# The scaled logits of faint keys below the others: from 16 at the first faint key to 26 at the last (each query's within
# about a fifth of that), so that their weights run from about 1e-7 down to 1e-16 in a row of a few hundred keys. Far below
# what a float32 output resolves, and exactly what the gradients of those keys are made of; float64 resolves them.
FAINT_GAPS = (16.0, 26.0)
# The first faint key of a faint call: past half the largest block size, so that its faint keys fill whole aligned blocks of
# every size of BLOCK_SIZES (up to 256 at ONE_PAST_BLOCKS tokens) and its visible keys a block of each but the largest.
FIRST_FAINT = max(BLOCK_SIZES) // 2


def joined_notes(*notes: str | None) -> str:
    """A case label's notes joined by commas, the empty ones left out."""
    return ", ".join(note for note in notes if note)


def faint_note(first: int) -> str:
    """How a case label says that its keys from ``first`` on are faint (:func:`faint_keys`)."""
    return f"every key from token {first} on faint (weights of about 1e-7 down to 1e-16)"


def faint_keys(q: np.ndarray, k: np.ndarray, first: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys (head width on the last axis, tokens on axis ``tokens``) remade from a tenth of ``q`` and ``k`` so that
    every key from ``first`` on is faint for every query: its scaled logit lies :data:`FAINT_GAPS` below the others' (about
    0), further for later keys. Their weights are tiny but not zero, and the gradients of those keys are made of them: a
    backward pass that skips a block of keys whose weights all fall below a threshold (a block-sparse shortcut) returns
    zeros where float64 resolves the exact values."""
    width = q.shape[-1]
    unit = np.full(width, 1.0 / math.sqrt(width))
    q, k = unit + 0.1 * q, np.moveaxis(0.1 * k, tokens, 0)
    gaps = np.linspace(*FAINT_GAPS, max(k.shape[0] - first, 0)).reshape((-1,) + (1,) * (k.ndim - 1))
    k[first:] -= gaps * math.sqrt(width) * unit
    return q, np.moveaxis(k, 0, tokens)


def far_below(q: np.ndarray, k: np.ndarray, logit: float, direction: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys (head width on the last axis) remade from a tenth of ``q`` and ``k`` around opposite multiples of
    the unit vector ``direction`` (None: all its elements equal), so that every scaled logit q·k/√D is about −``logit``:
    rows whose largest logit is itself far below zero, where exp of every unshifted logit underflows to 0 (past −103 in
    float32, −745 in float64) and a softmax that subtracts no maximum, or one only when some logit is large, divides 0 by 0."""
    width = q.shape[-1]
    unit = np.full(width, 1.0 / math.sqrt(width)) if direction is None else direction
    return -20.0 * unit + 0.1 * q, (logit * math.sqrt(width) / 20.0) * unit + 0.1 * k


def strided_layouts(rng: np.random.Generator, count: int = 5, choices: tuple[str, ...] = NON_CONTIGUOUS + ("offset",)) -> tuple[str, ...]:
    """A layout per input (``count`` of them) from ``choices``, at least one of them with a non-zero storage offset."""
    drawn = [str(rng.choice(choices)) for _ in range(count)]
    if not set(drawn) & set(OFFSET_LAYOUTS):
        drawn[int(rng.integers(count))] = str(rng.choice(OFFSET_LAYOUTS))
    return tuple(drawn)


def every_layout(rng: np.random.Generator, count: int = 5) -> list[tuple[str, ...]]:
    """Layouts for ``count`` inputs in fifteen calls: six in which each input meets each non-contiguous layout and the
    storage offset once (rotations of one random order), six with every input in one of them (code that takes a fast path
    only when every input passes one layout test meets each), one with every input in one storage (:data:`PACKED`), one
    with the inputs of each shape stacked in one buffer (:data:`STACKED`) and one with every input at one address of one
    storage (:data:`ALIASED`)."""
    order = [str(layout) for layout in rng.permutation(NON_CONTIGUOUS + ("offset",))]
    rotations = [tuple(order[(i + j) % len(order)] for j in range(count)) for i in range(len(order))]
    return [*rotations, *((layout,) * count for layout in order), (PACKED,) * count, (STACKED,) * count, (ALIASED,) * count]


def axis_order(layout: str, rank: int) -> list[int] | None:
    """The order (outermost first) in which a layout "order@a,b,..." stores the axes of a tensor of ``rank`` axes: its
    axes below ``rank``, in their order, when those are all of them (as the worker lays them out), else the plain order;
    None for another layout."""
    if not layout.startswith("order@"):
        return None
    order = [axis for axis in map(int, layout.split("@", 1)[1].split(",")) if axis < rank]
    return order if sorted(order) == list(range(rank)) else list(range(rank))


def non_contiguous(layout: str, shape: Sequence[int]) -> bool:
    """Whether an input of ``layout`` and ``shape`` is laid out other than contiguously, as the slip analysis words a call:
    heads permuted with one head are contiguous to torch (``is_contiguous()`` compares no stride of a size-1 axis), and
    code that tests it treats them so; so is an axis order that moves only axes of size 1."""
    if (order := axis_order(layout, len(shape))) is not None:
        moved = [axis for axis in order if shape[axis] > 1]
        return moved != sorted(moved)
    return layout != "contiguous" and not (layout == "heads_permuted" and len(shape) >= 3 and shape[1] == 1)


def layouts_label(names: Sequence[str], layouts: Sequence[str]) -> str:
    """How a call's inputs ``names`` sit in memory (one layout each), for messages; "" when every one is contiguous."""
    shown = [(name, layout) for name, layout in zip(names, layouts) if layout != "contiguous"]
    kinds = {layout for _, layout in shown}
    if len(shown) == len(names) and len(kinds) == 1 and shown[0][1] in SHARED_STORAGE:
        return f"every input {SHARED_STORAGE[shown[0][1]]}"
    return "memory layouts " + ", ".join(f"{name} {LAYOUT_WORDS.get(layout, layout)}" for name, layout in shown) if shown else ""


def aliased(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The values ``arrays`` take as inputs of layout :data:`ALIASED`: element j (in row-major order) of the n-th array at
    element j·(n + 1) of one storage, the storage filled in their order, so that where arrays share an element the earlier
    one's value holds (each input then holds exactly what it is sent, and the oracle sees what the submission sees)."""
    size = max((array.size - 1) * (n + 1) + 1 for n, array in enumerate(arrays))
    storage, filled = np.zeros(size), np.zeros(size, dtype=bool)
    held = []
    for n, array in enumerate(arrays):
        places = np.arange(array.size) * (n + 1)
        own = ~filled[places]
        storage[places[own]] = array.reshape(-1)[own]
        filled[places] = True
        held.append(storage[places].reshape(array.shape).astype(array.dtype))
    return held


def hold_aliased(case: Any, names: Sequence[str], layouts: Sequence[str]) -> None:
    """Give the inputs of ``names`` (fields of a frozen case dataclass, one layout each in ``layouts``) that are laid out
    :data:`ALIASED` the values they hold there (:func:`aliased`; a case's inputs have one dtype, so the worker puts them
    in one storage)."""
    members = [name for name, layout in zip(names, layouts) if layout == ALIASED]
    if members:
        for name, values in zip(members, aliased([getattr(case, name) for name in members])):
            object.__setattr__(case, name, values)


PASSED_AS_ONE = "the arguments passed as one tensor object"
"""How a slip analysis names :func:`passed_as_one`."""


def passed_as_one(names: Sequence[str]) -> str:
    """The arguments a call passes one tensor object for (:func:`hold_one_object`), in words for the slip analysis."""
    return " and ".join(names) or "none"


def one_object_labels(case: Any) -> list[str]:
    """How a case (a dataclass with a ``one_object`` field) passes one tensor object for several arguments, for its label
    ("one tensor object passed as q1 and k1"); none when every argument is its own tensor."""
    return [f"one tensor object passed as {passed_as_one(case.one_object)}"] if case.one_object else []


def hold_one_object(case: Any, names: Sequence[str]) -> None:
    """Give the inputs of ``names`` (fields of a frozen case dataclass, the first one's shape each) the first one's values: a
    call passes one tensor object for all of them (:func:`one_object`), as a model with tied projections or a caller
    reusing one tensor does. Code that tells inputs apart by identity (``k2 is k1``: a fast path, a cache) meets it there,
    and in no call whose inputs are merely equal."""
    for name in names[1:]:
        object.__setattr__(case, name, getattr(case, names[0]))


_Input = TypeVar("_Input")


def one_object(inputs: Sequence[_Input], names: Sequence[str], passed_as_one: Sequence[str]) -> tuple[_Input, ...]:
    """``inputs`` (one per name of ``names``), the input of each name of ``passed_as_one`` replaced by the first one's."""
    if not passed_as_one:
        return tuple(inputs)
    first = inputs[list(names).index(passed_as_one[0])]
    return tuple(first if name in passed_as_one else given for given, name in zip(inputs, names))


def tensor_names(names: Sequence[str], passed_as_one: Sequence[str]) -> tuple[str, ...]:
    """The input ``names`` in the order a request numbers their tensors when one object is passed for ``passed_as_one``:
    the later names of that group share the first one's tensor, so they are left out."""
    return tuple(name for name in names if name not in passed_as_one[1:])


def merged_truths(truths: Mapping[str, Truth], passed_as_one: Sequence[str]) -> dict[str, Truth]:
    """The gradient ``truths`` per input name with the group of ``passed_as_one`` read at its one tensor, the first name: the
    gradient of a tensor passed for several arguments is the sum of theirs (and so are the errors allowed)."""
    if not passed_as_one:
        return dict(truths)
    group = [truths[name] for name in passed_as_one if name in truths]
    found = {name: truth for name, truth in truths.items() if name not in passed_as_one}
    if group:
        found[passed_as_one[0]] = Truth(sum(t.values for t in group), sum(t.allowed for t in group))  # type: ignore[arg-type]
    return found


ZERO_INITIALISED = "(zero-initialised)"
CONSTANT_INITIALISED = "(constant-initialised)"
ZEROED = "{} all zeros " + ZERO_INITIALISED
"""How a case label says that an input is all zeros (:func:`zeroed`)."""
CONSTANT = "every element of {} {:.4g} " + CONSTANT_INITIALISED
"""How a case label says that every element of an input holds one value (:func:`constant_inputs`)."""


BLANK = "the input that is all zeros or constant"
"""The call attribute the diagnosis contrasts blank inputs by (:func:`blank_inputs`): a shortcut for a zero-initialised or
constant input shows only in the calls that have one."""


def blank_inputs(note: str) -> dict[str, str]:
    """The :data:`BLANK` attribute of a case with ``note``: {BLANK: "value (all zeros)"}, {BLANK: "q1 (constant)"}, or {}
    for a case without a blank input (calls that have none share no value to be set apart by)."""
    zeros = re.findall(r"(\w+) all zeros " + re.escape(ZERO_INITIALISED), note)
    constant = re.findall(r"every element of (\w+) \S+ " + re.escape(CONSTANT_INITIALISED), note)
    said = ", ".join([f"{name} (all zeros)" for name in zeros] + [f"{name} (constant)" for name in constant])
    return {BLANK: said} if said else {}


def degenerate(note: str) -> bool:
    """Whether a case's ``note`` says that an input of it is all zeros or constant (:func:`zeroed`, :func:`constant_inputs`):
    there a wrong function may give the right output (a mean for a softmax over equal logits)."""
    return ZERO_INITIALISED in note or CONSTANT_INITIALISED in note


def zeroed(case: _Drawn, name: str) -> _Drawn:
    """``case`` (a frozen dataclass with a ``note``) with input ``name`` all zeros, as a zero-initialised projection or
    vector gives it: a gradient there is not zero (the partner's), and code that divides by a norm or takes a shortcut for a
    blank input loses it."""
    return replace(case, **{name: np.zeros_like(getattr(case, name)), "note": joined_notes(case.note, ZEROED.format(name))})


def constant_inputs(make: Callable[[], _Drawn], names: Sequence[str], rng: np.random.Generator) -> list[_Drawn]:
    """For each input ``name`` in turn, two cases drawn by ``make``: one with that input all zeros (:func:`zeroed`), one
    with every element of it one drawn value of 0.25 to 1.5 in size, either sign (exact in float32), as constant
    initialisation gives them. Its gradient is still one per element: code that takes a shortcut for a blank or constant
    input (one element broadcast, a mean instead of the softmax) keeps the value and loses the graph of the others."""
    found = []
    for name in names:
        found.append(zeroed(make(), name))
        case = make()
        value = float(exact(np.asarray(rng.choice([-1.0, 1.0]) * rng.uniform(0.25, 1.5)), "float32"))
        found.append(replace(case, **{name: np.full_like(getattr(case, name), value), "note": joined_notes(case.note, CONSTANT.format(name, value))}))
    return found


def distinct(inputs: Sequence[_Input]) -> tuple[_Input, ...]:
    """``inputs`` without repeats of one object (a request numbers each tensor once however many arguments it is)."""
    kept: dict[int, _Input] = {}
    for given in inputs:
        kept.setdefault(id(given), given)
    return tuple(kept.values())


def expanded_on(axis: int) -> str:
    """The layout of an input expanded along dim ``axis``: :data:`EXPANDED` for the batch (dim 0), else "expanded@axis"."""
    return EXPANDED if axis == 0 else f"{EXPANDED}@{axis}"


def expansion_axis(layout: str) -> int | None:
    """The dim an input of ``layout`` is expanded along (:func:`expanded_on`), or None for another layout."""
    if layout == EXPANDED:
        return 0
    return int(layout.split("@", 1)[1]) if layout.startswith(f"{EXPANDED}@") else None


LAST_AXIS_STEPS = "the stride of the inputs' last axis"
"""How a slip analysis names :func:`last_axis_steps`."""
STEPPED_LAYOUTS = ("sliced", ALIASED)  # the layouts whose last axis has a stride above 1 (every other column; overlapping views)


def _steps(layout: str, shape: Sequence[int]) -> bool:
    """Whether an input of ``layout`` and ``shape`` has a last axis with a stride above 1: a stepped layout's, or an axis
    order that stores an axis of size above 1 inside the last one."""
    order = axis_order(layout, len(shape))
    if order is None or not shape:
        return layout in STEPPED_LAYOUTS
    return any(shape[axis] > 1 for axis in order[order.index(len(shape) - 1) + 1 :])


def last_axis_steps(layouts: Sequence[str], shapes: Sequence[Sequence[int]]) -> str:
    """Whether some input of a call (``layouts`` and ``shapes``, one each) has a last axis with a stride above 1, in words
    for the slip analysis: code that asks for a unit stride there (a kernel's precondition, ``.view`` on the last axes)
    fails on those calls and no other."""
    return "above 1 for some input" if any(_steps(layout, shape) for layout, shape in zip(layouts, shapes)) else "1 for every input"


def expanded_inputs(layouts: Sequence[str], dims: Mapping[int, str]) -> str:
    """How a call's inputs are expanded, in words for the slip analysis: ``dims`` names each dim (0: "over the batch"),
    "none" when no input is, the dims joined when inputs are expanded along several, "every input over the heads" when
    all of them are, along one."""
    axes = sorted({axis for axis in map(expansion_axis, layouts) if axis is not None})
    words = " and ".join(dims.get(axis, f"along dim {axis}") for axis in axes) or "none"
    return f"every input {words}" if len(axes) == 1 and all(expansion_axis(layout) is not None for layout in layouts) else words


def expanded_layouts(count: int = 5, axes: Sequence[int] = (0,)) -> list[tuple[str, ...]]:
    """Layouts for ``count`` (at least two) inputs, per dim of ``axes``: each input in turn left contiguous and the others
    expanded along it (:func:`expanded_on`). So for every two inputs some call expands the one and not the other, as when
    one input is a sequence shared by the batch (or a value shared by the heads) and another is not, whichever inputs a
    path tests; and every call keeps an input that can require grad."""
    return [tuple("contiguous" if i == kept else expanded_on(axis) for i in range(count)) for axis in axes for kept in range(count)]


def expanded_together(count: int = 5, axes: Sequence[int] = (0,), kept: Sequence[int] = ()) -> list[tuple[str, ...]]:
    """Layouts for ``count`` inputs in one call per dim of ``axes``, every input but those of ``kept`` (contiguous, so that
    some input can require grad) expanded along it, as multi-query attention shares keys and values over the heads: a path
    taken only when all of them are expanded meets its call."""
    return [tuple("contiguous" if i in kept else expanded_on(axis) for i in range(count)) for axis in axes]


def past_every_block(rng: np.random.Generator) -> int:
    """A sequence length past the largest block size and no multiple of the smallest: a blocked loop of any block size in
    :data:`BLOCK_SIZES` meets a last, shorter block (the keys a loop that stops one block early never visits)."""
    smallest, largest = min(BLOCK_SIZES), max(BLOCK_SIZES)
    return int(rng.choice([t for t in range(largest + 1, LONGEST + 1) if t % smallest]))


def past_every_block_of_problems(rng: np.random.Generator, multiple: int = 1) -> tuple[int, int]:
    """(B, H): one to three batch elements whose (batch, head) pairs number past the largest block size and no multiple of
    the smallest, H a multiple of ``multiple``. Code that flattens the pairs and processes them in blocks meets a last,
    shorter block there (the pairs a loop that stops one block early never computes); the drawn shapes have a few pairs
    each."""
    smallest, largest = min(BLOCK_SIZES), max(BLOCK_SIZES)
    batch = int(rng.integers(1, 4))
    heads = [h for h in range(largest // batch + 1, LONGEST // batch + 1) if batch * h % smallest and h % multiple == 0]
    return batch, int(rng.choice(heads))


SIGNIFICANT_BITS = {"bfloat16": 8, "float16": 11, "float32": 24, "float64": 53}


def inexact_complement(rng: np.random.Generator, dtype: str) -> float:
    """A number of ``dtype``, of either sign, with magnitude in [0.25, 0.5) and an odd multiple of ``dtype``'s spacing
    there: 1 − c and 1 + c, whose spacing is twice as wide, are not numbers of ``dtype``, so a rewrite that computes them
    in the coefficient's own dtype (the row sums 1 − λ, say) rounds them where the inputs' dtype would not."""
    bits = SIGNIFICANT_BITS[dtype]
    odd = 2 * int(rng.integers(2 ** (bits - 2), 2 ** (bits - 1))) + 1  # in [2^(p−1), 2^p): the magnitude in [0.25, 0.5)
    return float(rng.choice((-1.0, 1.0)) * odd * 2.0 ** (-1 - bits))


def integer_ends(dtype: str) -> tuple[int, int]:
    """The least and greatest values of the signed integer ``dtype`` that the contract allows for a coefficient: one above
    its least value (whose negation wraps around to itself), and its greatest."""
    info = np.iinfo(dtype)
    return int(info.min) + 1, int(info.max)


def coinciding_sizes(rng: np.random.Generator) -> tuple[int, int]:
    """Two sizes for shapes whose axes coincide: an even one, n, for shapes where one axis is twice another (T = 2D: a
    value of n tokens has n features), and one, m, for shapes where every axis is m long. Code that tells an axis by its
    size (a transpose when ``shape[-2] == 2 * D``, heads taken for tokens when they agree) guesses wrong there, and a
    drawn shape has such sizes only by chance."""
    return 2 * int(rng.integers(2, 5)), int(rng.integers(2, 6))


def model_scale(rng: np.random.Generator, long: bool, wide: bool = False) -> tuple[int, int, int, int]:
    """(B, H, T, D) of a call at the sizes of large models: ``long``, one head of 1 to 4 features over a length in
    :data:`MODEL_LENGTHS` (past a buffer or a key block of :data:`LONGEST_BUFFER` tokens, and no multiple of 16); else
    :data:`MODEL_PROBLEMS` (batch, head) pairs over a multiple of 8 tokens within :data:`MODEL_SHAPED_LENGTHS`, with a head
    width in :data:`MODEL_WIDTHS` (one of :data:`COMMON_WIDTHS` half the time), ``wide``: :data:`WIDE_PATH` or more."""
    if long:
        return _one_long_head(rng, MODEL_LENGTHS)
    shortest = WIDE_PATH if wide else MODEL_WIDTHS[0]
    common = [w for w in COMMON_WIDTHS if w >= shortest]
    width = int(rng.choice(common)) if rng.random() < 0.5 else int(rng.integers(shortest, MODEL_WIDTHS[1] + 1))
    low, high = MODEL_SHAPED_LENGTHS
    return (*MODEL_PROBLEMS, 8 * int(rng.integers(low // 8, high // 8 + 1)), width)


def past_kernel_width(rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(B, H, T, D) of a call with heads wider than :data:`KERNEL_WIDEST`: one head of 257 to 320 features over 2 to 16 tokens
    (the contract allows any width; code that copies a fused kernel's limit refuses it, or takes another path)."""
    return 1, 1, int(rng.integers(2, 17)), int(rng.integers(KERNEL_WIDEST + 1, KERNEL_WIDEST + 65))


def past_context(rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(B, H, T, D) of the call past :data:`LONGEST_CONTEXT`: one head of 1 to 4 features over a length in
    :data:`CONTEXT_LENGTHS` (no multiple of 16)."""
    return _one_long_head(rng, CONTEXT_LENGTHS)


def _one_long_head(rng: np.random.Generator, lengths: tuple[int, int]) -> tuple[int, int, int, int]:
    """(1, 1, T, D): T within ``lengths`` and no multiple of 16, D from 1 to 4."""
    return 1, 1, int(rng.choice([t for t in range(lengths[0], lengths[1] + 1) if t % 16])), int(rng.integers(1, 5))


def below_model_length(tokens: int) -> bool:
    """Whether a sequence of ``tokens`` is shorter than the long call of :func:`model_scale` (within every buffer)."""
    return tokens <= LONGEST_BUFFER


def broadcast_along(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """``values`` with every element along dim ``axis`` equal to the first one, when it has two axes or more and that dim:
    the values an input expanded along it holds (one of fewer axes stays as it is, and the worker gives it contiguous
    memory)."""
    if values.ndim < 2 or values.ndim <= axis:
        return values
    first = values[(slice(None),) * axis + (slice(0, 1),)]
    return np.broadcast_to(first, values.shape).copy()


def hold_expanded(case: Any, names: Sequence[str]) -> None:
    """Make each input of ``names`` (fields of a frozen case dataclass, one layout each in its ``layouts``) that is expanded
    along a dim (:func:`expansion_axis`) constant along it (:func:`broadcast_along`)."""
    for name, layout in zip(names, case.layouts):
        axis = expansion_axis(layout)
        if axis is not None:
            object.__setattr__(case, name, broadcast_along(getattr(case, name), axis))


def read_where_expanded(truths: Mapping[str, Truth], names: Sequence[str], layouts: Sequence[str]) -> dict[str, Truth]:
    """``truths`` of the gradients with respect to the inputs ``names`` (one layout each), with the gradient of each input
    expanded along a dim summed along it (the dim kept, of size 1), the allowance too.

    An expanded input that requires grad is a view of the tensor it expands (the worker makes that tensor the leaf), and
    its gradient is read there: a model's gradient reaches the tensor it broadcast as the sum over the dim. The gradient
    of each element of the view itself is not defined alike by every operation (``as_strided`` spreads it evenly over
    the elements that share an address; most operations give each element its own); their sum is."""
    found = dict(truths)
    for name, layout in zip(names, layouts):
        axis = expansion_axis(layout)
        truth = found.get(name)
        if axis is None or truth is None or truth.values.ndim < 2 or truth.values.ndim <= axis:
            continue
        found[name] = Truth(truth.values.sum(axis=axis, keepdims=True), truth.allowed.sum(axis=axis, keepdims=True))
    return found


@dataclass(frozen=True)
class CallSequence(Generic[_Case]):
    """Two calls of one function with inputs of the same layouts (and shapes, but for "resized").

    ``kind`` (a key of :data:`SEQUENCE_KINDS`) says how the second call's
    inputs come about: "repeat" passes the first call's tensors again
    (``second`` is ``first``), "refill" overwrites them in place with the
    second case's values (as an optimiser step does), "refill_data" does so
    through ``.data`` (as older training code does: the version counters do
    not move), "reallocate" frees them and passes new tensors, which the
    allocator is free to put in the same memory, "retyped" passes new tensors
    of the same shapes in the other dtype, "reflagged" new tensors of the same
    shapes and dtype with another value of the function's option (a cache
    keyed by the shapes alone answers either with the first call's dtype,
    mask or constant), "interleaved" new tensors of the same shapes and
    another value of the option, both calls' results differentiated after
    the second call (a backward pass that reads what the last forward left
    behind, rather than what its own call saved, gets the first call's
    gradients wrong), "stacked" the same with the option unchanged (two causal
    layers: a mask or buffer that the second call rewrites in place breaks
    the first call's backward pass), "resized" new tensors of other shapes (a buffer or
    cache sized by the first call; one token, a decoding step), "retrained"
    the same tensors, the first call under ``no_grad`` or ``inference_mode``
    and the second differentiated (what an evaluation left behind meets
    training), "one_changed" the same objects for every argument but
    ``changed``, which takes another value (a cache whose key leaves out one
    argument answers with the first call's result).
    """

    first: _Case
    second: _Case
    kind: str
    grads: bool  # both calls with inputs that require grad, and a backward pass from the second (the first without autograd: retrained)
    changed: str = ""  # the argument the second call changes, in a sequence of a kind of ONE_ARGUMENT

    def label(self) -> str:
        """What was called, and how, for messages."""
        how = SEQUENCE_KINDS[self.kind].replace("but one,", f"but {self.changed},") if self.changed else SEQUENCE_KINDS[self.kind]
        return f"{self.first.function}({self.second.label()}) {how}" + (", with gradients" if self.grads else "")
