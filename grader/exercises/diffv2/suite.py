"""The case sets of the DIFF V2 checks, and the worker requests that evaluate them.

Every set is drawn once per seed and process (so the same case objects key
the oracle's cached truths, which a batch computes once before it forks) from
a generator named after the set. Several checks read the same calls (T1
looks at the types of the outputs whose values T2 compares), and each call
is made once per run.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace

from collections.abc import Callable

import numpy as np

from grader.core.invoke import Outcome, Request, Returned, TensorInput
from grader.core.plugin import GradingContext
from grader.exercises.diffv2 import cases, expected
from grader.exercises.diffv2.cases import DIFF_V2, EXPANSIONS, GQA, PARAMETERS, TENSORS, Case
from grader.toolkit import domain, verdicts
from grader.toolkit.casesets import CaseSet, CaseSets
from grader.toolkit.compare import Comparison
from grader.toolkit.domain import CallSequence, exact
from grader.toolkit.runs import Runner, bound_call
from grader.toolkit.sequences import FirstCall, SequenceSuite, Variations, draw_sequences
from grader.toolkit.signatures import Signature
from grader.toolkit.tolerance import Truth

SETS = CaseSets()
MODEL_HEADS = {True: (2, 1), False: (16, 8)}  # (Hq, Hkv) of the call at a large model's sizes: long (causal), wide (not)
# The dtype of that call: float64 for one long call (a path taken past 1024 tokens that computes in float32 shows only on
# float64 inputs), float32 for the others
# (Hq, Hkv) of the call past a context window: as few heads as each function takes (its cost grows with T² per query head)
CONTEXT_HEADS = {GQA: (1, 1), DIFF_V2: (2, 1)}
LARGE_DTYPE = {(GQA, True): "float64", (DIFF_V2, True): "float32", (GQA, False): "float32", (DIFF_V2, False): "float32"}


def _output_set(seed: int, name: str, function: str, causal: bool) -> list[Case]:
    """Outputs of ``function``, causal (the argument also left out) or not: a small fixed case, T = 1, D = 1, Hkv = 1, Hkv = Hq
    (gqa_attention) or four key/value heads (diff_v2_attention), a grouped case up to T = 80, a domain draw, T past 256,
    padding tokens (all their inputs zeros) and a call at the sizes of large models (:func:`domain.model_scale`: causal, T
    past 1024 under inference_mode; else 16 query and 8 key/value heads of 65 to 128 features); then shapes whose axes
    coincide (:func:`cases.coinciding_dims`) and (batch, head) pairs past every block size (:func:`cases.many_problems`, in
    groups of the smallest size and of one that divides no block size);
    both dtypes, by name and by position, the autograd modes cycled; a batch's decoding step and a float64 call of many batch
    elements and wide heads laid out heads-major (:func:`_batched_calls`); one tensor passed as k and v, and as q, k and v
    (:func:`_one_object_calls`); last, not causal, a float64 call with heads wider than a fused kernel's widest
    (:func:`domain.past_kernel_width`), causal, a float32 call under inference_mode past a context window of 2048 tokens
    (:func:`domain.past_context`) whose first key is an attention sink."""
    rng = domain.generator(seed, name)
    draw = functools.partial(cases.shape, rng, function)
    omitted = None if causal else False
    single, many = ((3, 1), (3, 3)) if function == GQA else ((4, 1), (8, 4))
    rows = (
        ((2, 5, 4, 2, 3), "float32", causal, "keyword"),
        ((1, 1, 4, 2, domain.head_width(rng)), "float64", causal, "positional"),
        ((2, 3, 4, 2, 1), "float32", causal, "keyword"),  # D = 1: a squeeze() or a reduction over the last axis shows
        (draw(2, 40, head_counts=single), "float32", omitted, "keyword"),
        (draw(2, 40, head_counts=many), "float64", causal, "keyword"),
        (draw(2, 80, head_counts=(8, 2)), "float32", causal, "positional"),
        (draw(60, 200), "float64", omitted, "keyword"),
        (draw(257, domain.LONGEST, 8, head_counts=(4, 2)), "float32", causal, "keyword"),
    )
    drawn = [cases.case(rng, function, dims, dtype, flag, binding=binding) for dims, dtype, flag, binding in rows]
    padding = cases.with_padding(cases.case(rng, function, draw(3, 24), str(rng.choice(["float32", "float64"])), causal), rng)
    batch, _, length, width = domain.model_scale(rng, long=causal)
    large = cases.case(rng, function, (batch, length, *MODEL_HEADS[causal], width), LARGE_DTYPE[function, causal], causal)
    found = domain.cycled_modes([*drawn, padding, large])
    found = [*found[:-1], replace(large, grad_mode=domain.LONG_CALL_MODE)] if causal else found
    odd_shapes = [*cases.coinciding_dims(rng, function),
                  *(cases.many_problems(rng, function, groups[function]) for groups in (cases.ALIGNED_GROUPS, cases.UNALIGNED_GROUPS))]
    found += domain.cycled_modes([cases.case(rng, function, dims, "float64", causal) for dims in odd_shapes])
    if not causal:
        batch, _, length, width = domain.past_kernel_width(rng)
        wider = cases.case(rng, function, (batch, length, *MODEL_HEADS[True], width), "float64", causal)
        return found + _batched_calls(rng, function, causal) + _one_object_calls(rng, function, causal) + [wider]
    batch, _, length, width = domain.past_context(rng)
    context = cases.case(rng, function, (batch, length, *CONTEXT_HEADS[function], width), "float32", True, sink=domain.SINK_LOGIT)
    tied = _one_object_calls(rng, function, causal)
    return [*found, *_batched_calls(rng, function, causal), *tied, replace(context, grad_mode=domain.LONG_CALL_MODE)]


def _one_object_calls(rng: np.random.Generator, function: str, causal: bool | None, dtypes: tuple[str, str] = ("float32", "float64")) -> list[Case]:
    """One tensor object passed as k and v (a shared key/value projection, or a caller's x, x); for gqa_attention also as q, k
    and v at Hq = Hkv (self-attention of x with itself, gqa_attention(x, x, x)): code that keeps a per-object cache or works
    on its inputs in place meets it there, and in no call whose inputs are merely equal (:func:`domain.hold_one_object`).
    Heads are 2 features wide or more, where the scale 1/√D applied to the wrong one shows."""

    def wide(dims: tuple[int, int, int, int, int]) -> tuple[int, int, int, int, int]:
        return (*dims[:4], max(2, dims[4]))

    found = [replace(cases.case(rng, function, wide(cases.shape(rng, function, 2, 40, 16)), dtypes[0], causal), one_object=("k", "v"))]
    if function == GQA:
        heads = int(rng.integers(1, 4))
        dims = wide(cases.shape(rng, GQA, 2, 40, 16, head_counts=(heads, heads)))
        found.append(replace(cases.case(rng, GQA, dims, dtypes[1], causal), one_object=("q", "k", "v")))
    return domain.cycled_modes(found)


def _batched_calls(rng: np.random.Generator, function: str, causal: bool) -> list[Case]:
    """A decoding step of a batch: 2 to 4 batch elements of one token, one query head (gqa_attention) or one pair
    (diff_v2_attention) on one key/value head, where a squeeze() without a dim takes the batch for a head; and a float64 call
    of 5 to 7 batch elements (no multiple of 4), 65 to 140 tokens, 4 query heads on 2 key/value heads and heads of 64 to 96
    features, every input's heads permuted in memory: a path chosen by the output's size, by D ≥ 64 or by the batch (groups
    of batch elements, a last shorter group) meets float64 and dense inputs that are not contiguous there."""
    heads = (1, 1) if function == GQA else (2, 1)
    step = cases.case(rng, function, (int(rng.integers(2, 5)), 1, *heads, domain.head_width(rng)), "float64", causal)
    dims = (int(rng.choice([5, 6, 7])), int(rng.integers(65, 141)), 4, 2, int(rng.integers(64, 97)))
    wide = cases.case(rng, function, dims, "float64", causal, layouts=("heads_permuted",) * len(TENSORS[function]))
    return domain.cycled_modes([step, wide])


@SETS.register
def gqa_causal(seed: int) -> list[Case]:
    """Causal gqa_attention (see _output_set): T = 1, Hkv = 1, Hkv = Hq, G = 3 and 4, T past 256."""
    return _output_set(seed, "gqa_causal", GQA, True)


@SETS.register
def gqa_noncausal(seed: int) -> list[Case]:
    """gqa_attention with causal=False (see _output_set)."""
    return _output_set(seed, "gqa_noncausal", GQA, False)


@SETS.register
def diff_causal(seed: int) -> list[Case]:
    """Causal diff_v2_attention (see _output_set): T = 1, Hkv = 1, G = 2 and 4, T past 256."""
    return _output_set(seed, "diff_causal", DIFF_V2, True)


@SETS.register
def diff_noncausal(seed: int) -> list[Case]:
    """diff_v2_attention with causal=False (see _output_set)."""
    return _output_set(seed, "diff_noncausal", DIFF_V2, False)


@SETS.register(hidden=True)
def gqa_large_logits(seed: int) -> list[Case]:
    """gqa_attention with scaled logits of 100 to 1000 in float32 and of 800 to 5000 in float64 (past 709.8, where exp overflows
    float64): a softmax without the row maximum, in one dtype or both, overflows; past 64 tokens, keys that fall or rise along
    the sequence (the maxima of early and late key blocks far apart); every logit of a call far below zero (−150 to −400 in
    float32, −800 to −1500 in float64: exp of each underflows); keys rising to the last, shorter block of a sequence past
    every block size (:func:`domain.past_every_block`); every logit of a causal float64 call below the finite numbers a mask
    may use for −∞ (:data:`domain.BELOW_FINITE_MASKS`); last, a future key far above every visible one, large values and a
    head of zero values (:func:`_edge_values`)."""
    rng = domain.generator(seed, "gqa_large_logits")
    return domain.cycled_modes([
        *(cases.case(rng, GQA, cases.shape(rng, GQA, 65), "float32", True, max_logit=float(rng.uniform(200, 1000)), ramp=rising)
          for rising in (False, True)),
        cases.case(rng, GQA, (1, 6, 4, 2, 8), "float32", True, max_logit=float(rng.uniform(100, 250))),
        cases.case(rng, GQA, cases.shape(rng, GQA, 2, 140), "float32", False, max_logit=float(rng.uniform(250, 1000))),
        cases.case(rng, GQA, cases.shape(rng, GQA, 60), "float32", None, max_logit=float(rng.uniform(100, 1000))),
        cases.case(rng, GQA, cases.shape(rng, GQA, 2, 60), "float64", True, max_logit=float(rng.uniform(800, 5000))),
        cases.case(rng, GQA, cases.shape(rng, GQA, 2, 60), "float32", False, below=float(rng.uniform(150, 400))),
        cases.case(rng, GQA, cases.shape(rng, GQA, 2, 60), "float64", True, below=float(rng.uniform(800, 1500))),
        cases.case(rng, GQA, cases.shape(rng, GQA, tail := domain.past_every_block(rng), tail, 16), "float32", False,
                   max_logit=float(rng.uniform(200, 1000)), ramp=True),
        cases.case(rng, GQA, cases.shape(rng, GQA, 2, 60), "float64", True, below=float(rng.uniform(*domain.BELOW_FINITE_MASKS))),
    ]) + _edge_values(rng, GQA)  # fmt: skip


def _edge_values(rng: np.random.Generator, function: str) -> list[Case]:
    """Two causal float32 calls (the first of head width 1, where the logits are an outer product) whose last key draws
    scaled logits of about 1.2e4 to 2.5e4 from every earlier query (:func:`domain.future_far_above`: a future key for each,
    which a finite mask of −1e4 leaves the row's weight, and a shift taken over every key makes the visible ones underflow), values of 2e5
    to 1e6 (outputs past float16's range: :func:`domain.large_values`) and one (batch element, key/value head) of values all
    zero (:func:`domain.zero_head`)."""
    shape = cases.shape(rng, function, 2, 60)
    future, narrow = (cases.case(rng, function, dims, "float32", True, future=float(rng.uniform(*domain.FUTURE_ABOVE_VISIBLE)), note=domain.FUTURE_ABOVE_NOTE)
                      for dims in (shape, (*cases.shape(rng, function, 2, 60)[:4], 1)))  # fmt: skip
    large = cases.case(rng, function, cases.batched(cases.shape(rng, function, 2, 60, 16)), "float32", None)
    large = cases.with_values(large, *domain.large_values(large.v, rng, "float32"))
    zeroed = cases.case(rng, function, cases.batched(cases.shape(rng, function, 2, 60, 16)), "float64", True)
    zeroed = cases.with_values(zeroed, *domain.zero_head(zeroed.v, rng, heads=2))
    return domain.cycled_modes([narrow, future, large, zeroed])


@SETS.register(hidden=True)
def diff_large_logits(seed: int) -> list[Case]:
    """diff_v2_attention with scaled logits of 100 to 1000 in float32 and of 800 to 5000 in float64; past 64 tokens, keys that
    fall or rise along the sequence; every logit of a call far below zero; keys rising to the last, shorter block of a
    sequence past every block size; every logit of a causal float64 call below the finite numbers a mask may use for −∞; last,
    a future key far above every visible one, large values and a head of zero values (:func:`_edge_values`)."""
    rng = domain.generator(seed, "diff_large_logits")
    return domain.cycled_modes([
        *(cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 65), "float32", True, max_logit=float(rng.uniform(200, 1000)), ramp=rising)
          for rising in (False, True)),
        cases.case(rng, DIFF_V2, (1, 6, 4, 2, 8), "float32", True, max_logit=float(rng.uniform(100, 250))),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 140), "float32", False, max_logit=float(rng.uniform(250, 1000))),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 60), "float32", None, max_logit=float(rng.uniform(100, 1000))),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 60), "float64", True, max_logit=float(rng.uniform(800, 5000))),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 60), "float32", False, below=float(rng.uniform(150, 400))),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 60), "float64", True, below=float(rng.uniform(800, 1500))),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, tail := domain.past_every_block(rng), tail, 16), "float32", False,
                   max_logit=float(rng.uniform(200, 1000)), ramp=True),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 60), "float64", True, below=float(rng.uniform(*domain.BELOW_FINITE_MASKS))),
    ]) + _edge_values(rng, DIFF_V2)  # fmt: skip


@SETS.register
def diff_saturated(seed: int) -> list[Case]:
    """Gate logits at ±100 to ±1000 (exp(-ℓ) overflows float32 and, past 710, float64), alone and mixed with ordinary ones and zeros;
    then, in float64 without autograd, the gate closed and open everywhere at magnitudes only float64 resolves."""
    rng = domain.generator(seed, "diff_saturated")
    draw = functools.partial(cases.shape, rng, DIFF_V2, 2, 60, 16)
    return [
        cases.case(rng, DIFF_V2, (1, 4, 4, 2, 3), "float32", True, saturated=1.0),
        cases.case(rng, DIFF_V2, draw(), "float32", False, saturated=0.5, binding="positional"),
        cases.case(rng, DIFF_V2, draw(), "float64", True, saturated=1.0, frozen=("q",)),
        cases.case(rng, DIFF_V2, draw(), "float64", None, saturated=0.5, zeros=0.2),
        cases.case(rng, DIFF_V2, draw(), "float32", True, saturated=0.8, frozen=("v",)),
        *(replace(cases.gate_everywhere_at(cases.case(rng, DIFF_V2, draw(), "float64", True), rng, sign), grad_mode=mode)
          for sign, mode in ((-1.0, "no_grad"), (1.0, "inference_mode"))),
    ]  # fmt: skip


@SETS.register(hidden=True)
def gqa_strided(seed: int) -> list[Case]:
    """gqa_attention on transposed, head-permuted, sliced, fused-projection, channels_last and offset views (each input in each
    once, then every input in each), all inputs in one storage, stacked in one buffer as a fused projection's parts, all
    at one address of one storage, and inputs expanded over the batch, the heads and the tokens (each input in turn
    left out, then every input but the queries), both dtypes."""
    rng = domain.generator(seed, "gqa_strided")
    return domain.cycled_modes([
        *(cases.case(rng, GQA, cases.shape(rng, GQA, 2, 40, 16), dtype, True, layouts=layouts)
          for layouts, dtype in zip(domain.every_layout(rng, 3), ("float32", "float64") * 8)),
        cases.case(rng, GQA, cases.shape(rng, GQA, 2, 40), "float64", False, layouts=domain.strided_layouts(rng, 3), binding="positional"),
        cases.case(rng, GQA, cases.shape(rng, GQA, 60, 140), "float32", None, layouts=domain.strided_layouts(rng, 3, domain.OFFSET_LAYOUTS)),
        *(cases.case(rng, GQA, cases.spread(cases.shape(rng, GQA, 2, 40, 16)), dtype, True, layouts=layouts)
          for layouts, dtype in zip(domain.expanded_layouts(3, axes=tuple(EXPANSIONS)), itertools.cycle(("float32", "float64")))),
        *(cases.case(rng, GQA, cases.spread(cases.shape(rng, GQA, 2, 40, 16)), dtype, True, layouts=layouts)
          for layouts, dtype in zip(domain.expanded_together(3, axes=tuple(EXPANSIONS), kept=(0,)), itertools.cycle(("float64", "float32")))),
    ])  # fmt: skip


@SETS.register(hidden=True)
def diff_strided(seed: int) -> list[Case]:
    """diff_v2_attention on strided views of all four inputs (lambda_logits included; each in each once, then every input in
    each), all of them in one storage, stacked in one buffer and all at one address of one storage, and on inputs expanded over the batch, the heads and the tokens (each input in turn
    left out, then every input but the queries), both dtypes."""
    rng = domain.generator(seed, "diff_strided")
    return domain.cycled_modes([
        *(cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 40, 16), dtype, True, layouts=layouts)
          for layouts, dtype in zip(domain.every_layout(rng, 4), ("float32", "float64") * 8)),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 40), "float64", False, layouts=domain.strided_layouts(rng, 4), binding="positional"),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 60, 140), "float32", None, layouts=domain.strided_layouts(rng, 4, domain.OFFSET_LAYOUTS)),
        *(cases.case(rng, DIFF_V2, cases.spread(cases.shape(rng, DIFF_V2, 2, 40, 16)), dtype, True, layouts=layouts)
          for layouts, dtype in zip(domain.expanded_layouts(4, axes=tuple(EXPANSIONS)), itertools.cycle(("float32", "float64")))),
        *(cases.case(rng, DIFF_V2, cases.spread(cases.shape(rng, DIFF_V2, 2, 40, 16)), dtype, True, layouts=layouts)
          for layouts, dtype in zip(domain.expanded_together(4, axes=tuple(EXPANSIONS), kept=(0,)), itertools.cycle(("float64", "float32")))),
    ])  # fmt: skip


@SETS.register
def diff_offsets(seed: int) -> list[Case]:
    """Pairs: a case, then the same with one vector c added to every token's value (the outputs differ by (1 − σ(ℓ))·c)."""
    rng = domain.generator(seed, "diff_offsets")
    found = []
    for base in (
        cases.case(rng, DIFF_V2, (2, 6, 4, 2, 4), "float64", True),
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 70, 16), "float32", False, saturated=0.3),
    ):
        found += [base, cases.shared_offset(base, rng)]
    return domain.cycled_modes(found)


@SETS.register
def diff_gate_off(seed: int) -> list[Case]:
    """Gate logits of -100 to -1000 everywhere: the output must be the even heads' ordinary attention."""
    rng = domain.generator(seed, "diff_gate_off")
    found = []
    for dims, dtype, causal in (((1, 5, 4, 2, 3), "float64", True), (cases.shape(rng, DIFF_V2, 2, 70, 16), "float32", False)):
        base = cases.case(rng, DIFF_V2, dims, dtype, causal)
        assert base.lambda_logits is not None
        gates = -rng.uniform(*cases.SATURATED, base.lambda_logits.shape)
        found.append(replace(base, lambda_logits=exact(gates, dtype), note="every gate logit at most -100"))
    return domain.cycled_modes(found)


# Which inputs a caller leaves without requires_grad in the gradient sets, cycled through the cases.
GQA_FROZEN = ((), ("q",), ("k",), ("v",), ("q", "k"), ())
DIFF_V2_FROZEN = ((), ("lambda_logits",), ("q",), ("k", "v"), ("v",), ("q", "k", "v"), ())


@SETS.register
def gqa_gradients(seed: int) -> list[Case]:
    """gqa_attention with gradients: G from 1 to 8, Hkv = 1 and Hkv = Hq, both dtypes, causal True, False and omitted, inputs frozen alone and in groups, T up to 320,
    a value feature zero at every token (the first call of heads wider than one);
    T past 512 without the mask and with it (:data:`domain.ONE_PAST_BLOCKS`); then at one token, one batch element and one head, each input alone
    requiring grad; keys past the first 128 faint (:func:`domain.faint_keys`); the first call again differentiated as output.sum()
    (:func:`domain.summed`); one tensor passed for several inputs; each input in turn all zeros, then constant
    (:func:`_constant_inputs`); last, the first two calls again with every argument by name (:func:`domain.by_name`)."""
    rng = domain.generator(seed, "gqa_gradients")
    found = []
    for i, frozen in enumerate(GQA_FROZEN):
        counts = ((2, 1), (4, 4), None, (8, 2), None, None)[i]
        dims = cases.shape(rng, GQA, 2, 140 if i < 5 else domain.LONGEST, 32, head_counts=counts)
        found.append(cases.case(rng, GQA, dims, ("float64", "float32")[i % 2], (True, False, None)[i % 3], frozen=frozen,
                                binding=("keyword", "positional")[i % 2], max_logit=150.0 if i == 3 else None))  # fmt: skip
    found = domain.dead_feature(found, lambda case: case.v, cases.with_values)
    found.append(_one_past_blocks(rng, GQA, "float64"))
    alone = _trainable_alone(rng, GQA, (1, 1, 1, 1))
    return domain.as_training_inputs([*found, *alone, _one_past_blocks(rng, GQA, "float32", causal=True),
                                      _one_past_blocks(rng, GQA, "float64", causal=True, faint=domain.FIRST_FAINT), domain.summed(found[0]),
                                      *_one_object_calls(rng, GQA, True, ("float64", "float32")), *_constant_inputs(rng, GQA),
                                      *_named(rng, found)])


def _named(rng: np.random.Generator, found: list[Case]) -> list[Case]:
    """The first two of ``found`` called again with every argument by name (:func:`domain.by_name`)."""
    return [domain.by_name(case, rng, cases.PARAMETERS[case.function]) for case in found[:2]]


def _constant_inputs(rng: np.random.Generator, function: str) -> list[Case]:
    """Small calls with every input requiring grad and each in turn all zeros, then one constant (:func:`domain.constant_inputs`)."""
    return domain.constant_inputs(lambda: cases.case(rng, function, cases.shape(rng, function, 2, 12, 8), "float64", None), TENSORS[function], rng)


def _one_past_blocks(rng: np.random.Generator, function: str, dtype: str, causal: bool = False, faint: int | None = None) -> Case:
    """One pair of query heads on one key/value head, without the mask (or with it), at :data:`domain.ONE_PAST_BLOCKS` tokens:
    a backward pass recomputed in blocks of queries must meet every key there (or, with the mask, place it at the block's own
    rows); with the keys from ``faint`` on faint (:func:`domain.faint_keys`), it must not skip a block of tiny weights."""
    return cases.case(rng, function, (1, domain.ONE_PAST_BLOCKS, 2, 1, domain.head_width(rng, 4)), dtype, causal, faint=faint)


def _trainable_alone(rng: np.random.Generator, function: str, counts: tuple[int, int, int, int]) -> list[Case]:
    """At the smallest shape ``counts`` (B, T, Hq, Hkv), each input alone requiring grad (see :func:`domain.trainable_alone`)."""
    return [cases.case(rng, function, (*counts, domain.head_width(rng, 4)), ("float64", "float32")[i % 2], (True, None)[i % 2], frozen=frozen)
            for i, frozen in enumerate(domain.trainable_alone(TENSORS[function]))]  # fmt: skip


@SETS.register
def diff_gradients(seed: int) -> list[Case]:
    """diff_v2_attention with gradients: G = 2, 4, 6 and 8, Hkv = 1, both dtypes, causal True, False and omitted, inputs frozen alone and in groups, gates moderate, saturated and exactly 0, T up to 320,
    a value feature zero at every token (the first call of heads wider than one);
    T past 512 without the mask and with it (:data:`domain.ONE_PAST_BLOCKS`); the two query heads of every pair equal in value; then at one token, one
    batch element and one pair, each input alone requiring grad; keys past the first 128 faint (:func:`domain.faint_keys`); the
    first call again differentiated as output.sum(); one tensor passed for several inputs; each input in turn all
    zeros, then constant (:func:`_constant_inputs`); last, the first two calls again with every argument by name
    (:func:`domain.by_name`)."""
    rng = domain.generator(seed, "diff_gradients")
    found = []
    for i, frozen in enumerate(DIFF_V2_FROZEN):
        counts = ((2, 1), (4, 2), (8, 1), None, (12, 2), None, None)[i]
        dims = cases.shape(rng, DIFF_V2, 2, 140 if i < 6 else domain.LONGEST, 32, head_counts=counts)
        found.append(cases.case(rng, DIFF_V2, dims, ("float64", "float32")[i % 2], (True, False, None)[i % 3], frozen=frozen,
                                binding=("keyword", "positional")[i % 2], saturated=0.3 if i in (2, 5) else 0.0,
                                zeros=0.25 if i in (0, 3, 4) else 0.0, max_logit=150.0 if i == 4 else None))  # fmt: skip
    found = domain.dead_feature(found, lambda case: case.v, cases.with_values)
    found += [_one_past_blocks(rng, DIFF_V2, "float32"),
              cases.equal_pairs(cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 2, 40, 16), "float64", True))]
    alone = _trainable_alone(rng, DIFF_V2, (1, 1, 2, 1))
    return domain.as_training_inputs([*found, *alone, _one_past_blocks(rng, DIFF_V2, "float64", causal=True),
                                      _one_past_blocks(rng, DIFF_V2, "float64", faint=domain.FIRST_FAINT), domain.summed(found[0]),
                                      *_one_object_calls(rng, DIFF_V2, None, ("float32", "float64")), *_constant_inputs(rng, DIFF_V2),
                                      *_named(rng, found)])


@SETS.register
def gqa_bindings(seed: int) -> list[Case]:
    """gqa_attention with every argument by name (in a shuffled order) and by position, causal True, False and omitted."""
    rng = domain.generator(seed, "gqa_bindings")
    return domain.cycled_modes([
        cases.case(rng, GQA, cases.shape(rng, GQA, 3, 24, 8), "float64", causal, binding=binding)
        for binding in ("names", "positional") for causal in (True, False, None)
    ])  # fmt: skip


@SETS.register
def diff_bindings(seed: int) -> list[Case]:
    """diff_v2_attention with every argument by name (in a shuffled order) and by position, causal True, False and omitted."""
    rng = domain.generator(seed, "diff_bindings")
    return domain.cycled_modes([
        cases.case(rng, DIFF_V2, cases.shape(rng, DIFF_V2, 3, 24, 8), "float64", causal, binding=binding)
        for binding in ("names", "positional") for causal in (True, False, None)
    ])  # fmt: skip


SEQUENCE_SETS = CaseSets()
"""The call sequences: pairs of calls, kept apart from :data:`SETS`, whose members are single calls."""
VARIATIONS = Variations(cases.redrawn, cases.retyped, cases.reflagged, cases.resized, shuffled=cases.shuffled, alone=cases.changed_alone,
                        arguments=cases.PARAMETERS)


def _first_call(rng: np.random.Generator, function: str, how: FirstCall) -> Case:
    """The first call of a sequence (see :func:`sequences`): a length of the whole domain (what a function keeps between calls
    of one shape, such as a workspace, may depend on it) or up to the length ``how`` gives, heads drawn, D up to 8; or at
    the fresh length it is given, with one pair of query heads on one key/value head and D up to 4 (the length is what
    matters; the oracle's cost)."""
    if how.fresh_length:
        dims = cases.shape(rng, function, how.fresh_length, how.fresh_length, 4, head_counts=(2, 1))
    else:
        longest = 1 if how.decoding else how.longest or domain.LONGEST
        dims = cases.shape(rng, function, min(2, longest), longest, 8)
    return cases.case(rng, function, dims, how.dtype, how.causal, grad_mode=how.grad_mode)


@SEQUENCE_SETS.register
def sequences(seed: int) -> list[CallSequence[Case]]:
    """Each function called twice in each way of :data:`~grader.toolkit.domain.SEQUENCE_KINDS` and each mode of
    :data:`~grader.toolkit.domain.SEQUENCE_MODES` (the option is causal; :func:`~grader.toolkit.sequences.first_call` says how the
    first call is made)."""
    return draw_sequences(domain.generator(seed, "sequences"), FUNCTIONS, _first_call, VARIATIONS)


def request(case: Case, grads: bool = False) -> Request:
    """The call of ``case`` (its inputs numbered in the contract's order); with ``grads``, a backward pass with its cotangent."""
    tensors = domain.one_object([
        TensorInput(array, case.dtype, grads and case.requires_grad(name), layout, case.activations, case.held_grads, case.parameters)
        for array, name, layout in zip(case.inputs, case.names, case.memory_layouts)
    ], case.names, case.one_object)  # fmt: skip
    call = bound_call(case.function, case.names, tensors, "causal", case.causal, case.binding, case.keyword_order)
    if not grads:
        return Request((replace(call, grad_mode=case.grad_mode),), inputs=domain.distinct(tensors))
    return Request((call,), backward_from=0, cotangent=case.cotangent, inputs=domain.distinct(tensors), cotangent_layout=case.cotangent_layout)


def gradient_positions(case: Case) -> dict[str, int]:
    """Input name -> tensor number in the case's request, for the inputs whose gradients are requested."""
    return {name: i for i, name in enumerate(domain.tensor_names(case.names, case.one_object)) if case.requires_grad(name)}



FUNCTIONS = (GQA, DIFF_V2)
CONTRACTS = {name: Signature(name, PARAMETERS[name][:-1], "causal", "True") for name in FUNCTIONS}
RUNNER = Runner(request, CONTRACTS)


def outcome(grading: GradingContext, case_set: CaseSet[Case], index: int, case: Case, grads: bool = False) -> Outcome:
    """The run's outcome of case ``index`` of ``case_set`` (made once, with the rest of its set)."""
    return RUNNER.outcome(grading, case_set, index, case, grads)


def value_verdicts(grading: GradingContext, case_set: CaseSet[Case], truth: Callable[[Case], Truth] = expected.output,
                   grads: bool = False) -> list[Comparison]:  # fmt: skip
    """The verdict on every output of ``case_set`` against ``truth`` (default: the oracle's output)."""
    return RUNNER.value_verdicts(grading, case_set, truth, grads)


def result_of(found: Outcome) -> tuple[Returned | None, str | None]:
    """The one call's result if it is a plain tensor, else the problem in one sentence."""
    return verdicts.tensor_result(found, 0)


def described(case: Case, grads: bool = False) -> str:
    """The call of ``case`` for messages."""
    return f"{case.function}({case.label(grads)})" + (" with inputs that require grad" if grads else "")


SEQUENCES = SequenceSuite(sequences, request, gradient_positions, expected.output, expected.gradients,
                          RUNNER.request_outcome)


GRADIENT_SETS = (gqa_gradients, diff_gradients, diff_saturated, gqa_strided, diff_strided)


def prepare(seed: int) -> None:
    """Draw every case set for ``seed`` and compute the oracle's truths for them, once (a batch does, before it forks)."""
    for case_set in SETS:
        for case in case_set(seed):
            expected.output(case)
            if case_set in GRADIENT_SETS:
                expected.gradients(case)
    SEQUENCES.prepare(seed)
