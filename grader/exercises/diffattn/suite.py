"""The case sets of the checks, and the worker requests that evaluate them.

Several checks read the same calls (T1 looks at the types of the outputs whose
values T2 compares), so a case set is drawn once per seed and every request is
made once per run, through :meth:`GradingContext.memo`.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from typing import Any, Callable

import numpy as np


from grader.core.invoke import (
    Call,
    Outcome,
    Request,
    ResultOf,
    TensorInput,
    invoke,
    invoke_each,
)
from grader.core.plugin import GradingContext
from grader.exercises.diffattn import cases, expected
from grader.exercises.diffattn.cases import (
    ATTENTION,
    LAMBDA,
    AttentionCase,
    LambdaCase,
    paper_lambda_init,
)
from grader.exercises.diffattn.signatures import signature_problem
from grader.toolkit import domain, verdicts
from grader.toolkit.casesets import CaseSet, CaseSets
from grader.toolkit.compare import Comparison
from grader.toolkit.domain import CallSequence
from grader.toolkit.runs import bound_call
from grader.toolkit.sequences import FirstCall, SequenceSuite, Variations, draw_sequences
from grader.toolkit.tolerance import Memo, remember

SETS = CaseSets()


@SETS.register
def lambda_values(seed: int) -> list[LambdaCase]:
    """Lengths from 1 to 256, both dtypes, the default, the paper's, 0 and out-of-[0, 1] lambda_init (with large exponents and with
    ordinary ones, where it shows), vectors past 256 on every seed, exponents up to the dtype's finite
    limit (of opposite signs too, their difference up to 2.5 times it), products past that limit that cancel in the dot
    product, pairs that tie exactly, every binding; last, one exponent of 30 to 60 beside one within ±3, the first or the
    second the larger, in both dtypes (:func:`cases.distant_exponents`), and two a gap of 0.001 to 0.01 apart
    (:func:`cases.near_tie_exponents`)."""
    rng = domain.generator(seed, "lambda_values")
    long_length = domain.sequence_length(rng, 60)
    return domain.cycled_modes([
        cases.lambda_case(rng, 4, "float32", None),
        cases.lambda_case(rng, 1, "float64", None, binding="positional"),
        cases.lambda_case(rng, 8, "float32", paper_lambda_init(1), binding="positional", frozen=("q1",)),
        cases.lambda_case(rng, 16, "float64", paper_lambda_init(int(rng.integers(2, 7))), binding="names", frozen=("k2",)),
        cases.lambda_case(rng, long_length, "float32", paper_lambda_init(int(rng.integers(7, 25)))),
        cases.lambda_case(rng, 6, "float64", 0.2, exponents=(float(rng.uniform(-1.8, -1.3)), float(rng.uniform(1.3, 1.8)))),
        cases.lambda_case(rng, int(rng.integers(2, 9)), "float32", float(rng.uniform(1.1, 2.0)),
                          exponents=cases.large_exponents(rng, "float32"), binding="positional", frozen=("q2",)),  # fmt: skip
        cases.lambda_case(rng, int(rng.integers(1, 65)), "float64", float(rng.uniform(-1.0, -0.1)),
                          exponents=cases.large_exponents(rng, "float64"), frozen=("k1",)),  # fmt: skip
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float32", None, exponents=cases.large_exponents(rng, "float32"), binding="names"),
        cases.lambda_case(rng, 3, "float64", 0.2, exponents=(float(rng.uniform(5, 40)), float(rng.uniform(5, 40))), binding="positional"),
        cases.lambda_case(rng, int(rng.integers(2, 17)), "float64", 0.0),  # 0 is falsy: `lambda_init or 0.2` replaces it
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float32", 0.0, binding="positional"),
        *(cases.lambda_case(rng, int(rng.integers(1, 9)), dtype, init, exponents=cases.opposite_exponents(rng, dtype, sign, wide))
          for dtype, init, sign, wide in (("float32", 0.2, -1.0, False), ("float32", None, 1.0, True), ("float64", None, -1.0, False),
                                          ("float64", 0.5, 1.0, True))),  # fmt: skip
        cases.cancelling_case(rng, int(rng.integers(1, 5)), "float32", 0.2),
        cases.cancelling_case(rng, int(rng.integers(1, 5)), "float64", None, binding="positional"),
        cases.tied_case(rng, int(rng.integers(1, 9)), "float32", None),
        cases.tied_case(rng, int(rng.integers(1, 9)), "float64", 0.5, binding="positional"),
        # lambda_init above 1 and below 0 again, with exponents within ±2: beside exp(38) a lambda_init of 1.4 is rounding
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float32", float(rng.uniform(1.1, 2.0))),
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float64", float(rng.uniform(-1.0, -0.1)), binding="positional"),
        # vectors past every block size on every seed (the long draw above may stop at 60): code that keeps a head's width of them
        cases.lambda_case(rng, int(rng.integers(max(domain.BLOCK_SIZES) + 1, domain.LONGEST + 1)), "float32", None),
        # one exponent large and the other near 0, every vector trainable: the smaller pair's gradients are e^(small) times a
        # vector, which a form that factors the larger exponential out (e^a·expm1(b − a)) rebuilds from e^(large)
        *(cases.lambda_case(rng, int(rng.integers(1, 9)), dtype, None, exponents=cases.distant_exponents(rng, first_larger))
          for dtype in ("float32", "float64") for first_larger in (True, False)),
        # dot products a nonzero gap of less than 0.01 apart, which float64 resolves: a series for e^a − e^b near a tie
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float64", 0.2, exponents=cases.near_tie_exponents(rng), binding="positional"),
    ])


@SETS.register
def lambda_limits(seed: int) -> list[LambdaCase]:
    """Exponents at the edge of exp's range, for values only (the gradients' factors would overflow): both within 0.3 to
    0.6 of where exp overflows, so that e^a + e^b and 2·exp((a + b)/2) overflow while λ is finite (a form through
    either, such as (e^a + e^b)·tanh((a − b)/2), is not), and one there with the other far below zero; both dtypes; last,
    both far below where exp underflows (λ is λ_init: a form that factors e^(larger) out of λ_init too meets 0·∞)."""
    rng = domain.generator(seed, "lambda_limits")

    def edge(dtype: str) -> float:
        return float(cases.EXP_LIMIT[dtype] - rng.uniform(0.3, 0.6))

    return domain.cycled_modes([
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float32", None, exponents=(edge("float32"), edge("float32"))),
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float64", 0.2, exponents=(edge("float64"), edge("float64")), binding="positional"),
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float32", 0.0, exponents=(-edge("float32"), edge("float32")), binding="names"),
        cases.lambda_case(rng, int(rng.integers(1, 9)), "float64", None, exponents=(edge("float64"), -float(rng.uniform(100.0, 700.0)))),
        *(cases.lambda_case(rng, int(rng.integers(1, 9)), dtype, init, exponents=(-edge(dtype) - below[0], -edge(dtype) - below[1]), binding=binding)
          for dtype, init, binding, below in (("float32", None, "names", rng.uniform(1.0, 300.0, 2)),
                                              ("float64", 0.5, "keyword", rng.uniform(1.0, 2000.0, 2)))),
    ])


@SETS.register(hidden=True)
def lambda_strided(seed: int) -> list[LambdaCase]:
    """Sliced vectors, slices of a fused buffer, vectors at a storage offset and vectors at one address of one storage, both
    dtypes; then one tensor object passed as q1 and q2, as k1 and k2, as q1 and k1, and as all four vectors
    (:func:`domain.hold_one_object`), lambda_init left out once."""
    rng = domain.generator(seed, "lambda_strided")
    return domain.cycled_modes([
        *(cases.lambda_case(rng, int(rng.integers(1, 33)), dtype, 0.2, layout=layout, binding=binding)
          for dtype, layout, binding in (("float32", "sliced", "keyword"), ("float64", "fused", "positional"),
                                         ("float32", "offset", "names"), ("float64", "sliced", "keyword"),
                                         ("float32", domain.ALIASED, "keyword"), ("float64", domain.ALIASED, "names"))),
        *(replace(cases.lambda_case(rng, int(rng.integers(1, 33)), dtype, init, binding=binding), one_object=names)
          for names, dtype, init, binding in ((("q1", "q2"), "float32", None, "keyword"), (("k1", "k2"), "float64", 0.2, "positional"),
                                              (("q1", "k1"), "float32", 0.5, "names"), (cases.LAMBDA_NAMES, "float64", 0.2, "keyword"))),
    ])  # fmt: skip


@SETS.register
def attention_causal(seed: int) -> list[AttentionCase]:
    """Causal cases: T from 1 to 320 (next to block sizes half the time, once past 256), D from 1 to 64, both dtypes, causal omitted, by name and by
    position, padding-like rows of zeros; once T from 1025 to 1040 under inference_mode (:func:`domain.model_scale`); then
    B = H = T = 2D (:func:`cases.coinciding_shapes`), (batch, head) pairs past every block size
    (:func:`cases.many_problems`) and 24 pairs with D from 128 to 256 (:func:`domain.model_scale`, ``wide``); last, a
    float32 call under inference_mode past a context window of 2048 tokens
    (:func:`domain.past_context`) whose first key is an attention sink (:func:`domain.attention_sink`)."""
    rng = domain.generator(seed, "attention_causal")
    return domain.cycled_modes([
        cases.attention_case(rng, (2, 2, 5, 4), "float32", True),
        cases.attention_case(rng, (1, 2, 1, domain.head_width(rng)), "float32", True, binding="positional"),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 40), "float64", None),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 40), "float32", True, binding="positional"),
        cases.attention_case(rng, domain.domain_shape(rng, 60, 140), "float32", None),
        cases.attention_case(rng, domain.domain_shape(rng, 120), "float32", True, binding="positional"),
        cases.attention_case(rng, (1, 1, int(rng.integers(257, domain.LONGEST + 1)), int(rng.integers(1, 9))), "float64", True),
        cases.with_padding(cases.attention_case(rng, domain.domain_shape(rng, 3, 24), str(rng.choice(["float32", "float64"])), True), rng),
    ]) + [replace(cases.attention_case(rng, domain.model_scale(rng, long=True), "float64", True), grad_mode=domain.LONG_CALL_MODE)] + \
        domain.cycled_modes([
            cases.attention_case(rng, cases.coinciding_shapes(rng)[0], "float64", True),
            cases.attention_case(rng, cases.many_problems(rng), "float32", True),
            cases.attention_case(rng, domain.model_scale(rng, long=False, wide=True), "float64", True),
        ]) + [replace(cases.attention_case(rng, domain.past_context(rng), "float32", True, sink=domain.SINK_LOGIT),
                                    grad_mode=domain.LONG_CALL_MODE)]  # fmt: skip


@SETS.register
def attention_noncausal(seed: int) -> list[AttentionCase]:
    """causal=False cases: T from 1 to 320 (once past 256), D from 1 to 64, both dtypes, by name and by position; once 24
    (batch, head) pairs over 24 to 64 tokens (a multiple of 8) with D from 65 to 256 (:func:`domain.model_scale`); then B = H = T = D and B = H = T = 2D
    (:func:`cases.coinciding_shapes`), (batch, head) pairs past every block size, and one head wider than a fused kernel's
    widest (:func:`domain.past_kernel_width`)."""
    rng = domain.generator(seed, "attention_noncausal")
    return domain.cycled_modes([
        cases.attention_case(rng, (2, 2, 6, 4), "float32", False),
        cases.attention_case(rng, (1, 1, 1, 2), "float64", False, binding="positional"),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 40), "float32", False, binding="positional"),
        cases.attention_case(rng, domain.domain_shape(rng, 60, 140), "float64", False, binding="positional"),
        cases.attention_case(rng, domain.domain_shape(rng, 100), "float32", False),
        cases.attention_case(rng, (1, 1, int(rng.integers(257, domain.LONGEST + 1)), int(rng.integers(1, 9))), "float32", False),
        cases.attention_case(rng, domain.model_scale(rng, long=False), "float32", False),
        *(cases.attention_case(rng, shape, "float64", False) for shape in reversed(cases.coinciding_shapes(rng))),
        cases.attention_case(rng, cases.many_problems(rng), "float64", False),
        cases.attention_case(rng, domain.past_kernel_width(rng), "float64", False),
    ])


@SETS.register
def attention_coefficients(seed: int) -> list[AttentionCase]:
    """Negative, zero, exactly one, greater-than-one, int and 0-dim tensor (also float64 with float32 inputs, and int64, a
    signed integer dtype the contract allows) coefficients; then coefficients of magnitude 1e-8 to 1e-3
    (:func:`cases.small_coefficient`; the first below 1e-6), a Python float and a tensor, in float64, in each autograd mode; then exactly one with
    q2 = q1 (keys that differ) and with k2 = k1 (queries that differ); then one tensor object passed as k1 and k2, as q1 and
    q2, and as all four queries and keys (:func:`domain.hold_one_object`), T of 2 or more; last, a tensor coefficient of
    every other dtype the contract allows: float16, bfloat16 and float32 (beside float64 inputs) at a value whose 1 − c and
    1 + c they cannot hold (:func:`domain.inexact_complement`), and int8, int16 and int32 at both ends of the range the
    contract allows (:func:`domain.integer_ends`); last, a float64 call at 1 ± 1e-8 to 1e-6, a Python float near 1."""
    rng = domain.generator(seed, "attention_coefficients")
    shape = functools.partial(domain.domain_shape, rng, 2, 70)
    return domain.cycled_modes([
        cases.attention_case(rng, shape(), "float32", True, float(rng.uniform(-1.5, -0.2))),
        cases.attention_case(rng, shape(), "float64", False, 0.0, binding="positional"),
        cases.attention_case(rng, shape(), "float64", True, float(rng.uniform(1.1, 2.5)), binding="positional"),
        cases.attention_case(rng, shape(), "float32", True, coefficient_kind="tensor"),
        cases.attention_case(rng, shape(), "float64", False, coefficient_kind="tensor", binding="positional"),
        cases.attention_case(rng, shape(), "float64", None, 1.0),
        cases.attention_case(rng, shape(), "float32", False, float(rng.choice([-1, 2, 3])), coefficient_kind="int"),
        cases.attention_case(rng, shape(), "float32", True, coefficient_kind="float64 tensor"),
        cases.attention_case(rng, shape(), "float32", True, float(rng.choice([-1, 2, 3])), coefficient_kind="int64 tensor"),
        *(cases.attention_case(rng, shape(), "float64", causal, cases.small_coefficient(rng, decades), coefficient_kind=kind)
          for causal, kind, decades in ((True, "float", cases.NEAR_INTEGER), (False, "tensor", (-8.0, -3.0)), (None, "float", (-6.0, -3.0)))),
        *(cases.identical_branches(cases.attention_case(rng, shape(), dtype, True), 1.0, tied=(tied,))
          for tied, dtype in (("q", "float64"), ("k", "float32"))),
        *(replace(cases.attention_case(rng, shape(), dtype, causal), one_object=names)
          for names, dtype, causal in ((("k1", "k2"), "float32", True), (("q1", "q2"), "float64", None), (cases.INPUT_NAMES[:4], "float32", True))),
        *(cases.attention_case(rng, shape(), inputs, causal, domain.inexact_complement(rng, dtype), coefficient_kind=f"{dtype} tensor")
          for dtype, (inputs, causal) in zip(cases.EDGE_FLOATING, (("float64", True), ("float32", False), ("float64", None)))),
        *(cases.attention_case(rng, shape(), inputs, causal, float(end), coefficient_kind=f"{dtype} tensor")
          for dtype, (inputs, causal) in zip(cases.EDGE_INTEGER, (("float32", True), ("float64", False), ("float32", None)))
          for end in domain.integer_ends(dtype)),
        cases.attention_case(rng, shape(), "float64", True, 1.0 + cases.small_coefficient(rng, cases.NEAR_INTEGER)),
    ])  # fmt: skip


@SETS.register(hidden=True)
def attention_large_logits(seed: int) -> list[AttentionCase]:
    """float32 inputs whose scaled logits reach 100 to 1000 in magnitude, float64 ones 800 to 5000 (past 709.8, where exp
    overflows float64: a softmax that subtracts no maximum, in one dtype or both, overflows), T up to 320; and past 64
    tokens, keys that fall or rise along the sequence (the maxima of early and late key blocks far apart); every logit of a
    call far below zero (−150 to −400 in float32, −800 to −1500 in float64: exp of each underflows); keys rising to the
    last, shorter block of a sequence past every block size (:func:`domain.past_every_block`); and every logit of a causal
    float64 call below the finite numbers a mask may use for −∞ (:data:`domain.BELOW_FINITE_MASKS`); then two causal float32
    calls (the first of head width 1, where the logits are an outer product) whose last key draws scaled logits of about 1.2e4 to 2.5e4 from every earlier query (:func:`domain.future_far_above`:
    a future key for each, which a finite mask of −1e4 leaves the row's weight), values of 2e5 to 1e6 (outputs past
    float16's range: :func:`domain.large_values`) and one (batch element, head) of values all zero (:func:`domain.zero_head`);
    last, a float32 causal=False call of 1025 to 1040 tokens under inference_mode whose key at an odd position in the second
    half draws scaled logits of about 150 to 300 above every other key (past 89, where exp overflows float32, for every
    query: :func:`domain.off_every_stride`; a shift taken over a sample of the keys misses it)."""
    rng = domain.generator(seed, "attention_large_logits")
    found = domain.cycled_modes([
        *(cases.attention_case(rng, domain.domain_shape(rng, 65), "float32", True, max_logit=float(rng.uniform(200, 1000)), ramp=rising)
          for rising in (False, True)),  # fmt: skip
        cases.attention_case(rng, (1, 2, 6, 8), "float32", True, max_logit=float(rng.uniform(100, 250))),
        cases.attention_case(rng, (1, 2, 6, 8), "float32", False, max_logit=float(rng.uniform(100, 250)), binding="positional"),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 140), "float32", True, max_logit=float(rng.uniform(250, 1000))),
        cases.attention_case(rng, domain.domain_shape(rng, 60), "float32", None, max_logit=float(rng.uniform(100, 1000))),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 60), "float64", True, max_logit=float(rng.uniform(800, 5000))),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 60), "float32", False, below=float(rng.uniform(150, 400))),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 60), "float64", True, below=float(rng.uniform(800, 1500))),
        cases.attention_case(rng, domain.domain_shape(rng, tail := domain.past_every_block(rng), tail, 16), "float32", False,
                             max_logit=float(rng.uniform(200, 1000)), ramp=True),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 60), "float64", True, below=float(rng.uniform(*domain.BELOW_FINITE_MASKS))),
    ])
    shape = domain.model_scale(rng, long=True)
    spike = cases.attention_case(rng, shape, "float32", False, sink=float(rng.uniform(150, 300)), sink_key=domain.off_every_stride(rng, shape[2]))
    future = domain.domain_shape(rng, 2, 60)
    large, zeroed = (cases.attention_case(rng, (2, 3, domain.sequence_length(rng, 2, 60), domain.head_width(rng, 16)), dtype, causal)
                     for dtype, causal in (("float32", None), ("float64", True)))  # fmt: skip
    return [*found, *domain.cycled_modes([
        *(cases.attention_case(rng, dims, "float32", True, future=float(rng.uniform(*domain.FUTURE_ABOVE_VISIBLE)), note=domain.FUTURE_ABOVE_NOTE)
          for dims in ((*domain.domain_shape(rng, 2, 60)[:3], 1), future)),  # fmt: skip
        cases.with_values(large, *domain.large_values(large.value, rng, "float32")),
        cases.with_values(zeroed, *domain.zero_head(zeroed.value, rng, heads=1)),
    ]), replace(spike, grad_mode=domain.LONG_CALL_MODE)]


@SETS.register(hidden=True)
def attention_strided(seed: int) -> list[AttentionCase]:
    """Transposed, head-permuted, sliced, fused-projection, channels_last and offset views as inputs (each input in each of them once, then every input in each, with
    B and H above 1), all inputs in one storage, all at one address of one storage, inputs expanded over the batch, the heads and the tokens (each input in
    turn left out, then all together), both dtypes, tensor coefficient; last, one head stored token-major (heads
    permuted with H = 1: `is_contiguous()` holds, since a size-1 axis's stride is not compared, yet the head stride is the
    token stride, not T·D) with two or three batch elements."""
    rng = domain.generator(seed, "attention_strided")
    return domain.cycled_modes([
        *(cases.attention_case(rng, (2, 3, domain.sequence_length(rng, 2, 40), domain.head_width(rng, 16)), dtype, True,
                               coefficient_kind="tensor", layouts=layouts)
          for layouts, dtype in zip(domain.every_layout(rng), ("float32", "float64") * 8)),  # fmt: skip
        cases.attention_case(rng, domain.domain_shape(rng, 2, 40), "float64", False, layouts=domain.strided_layouts(rng), binding="positional"),
        cases.attention_case(rng, domain.domain_shape(rng, 60, 140), "float32", None, coefficient_kind="tensor",
                             layouts=domain.strided_layouts(rng, choices=domain.OFFSET_LAYOUTS)),  # fmt: skip
        # three batch elements and two heads: code that mixes up the two axes of an expansion meets sizes that differ
        *(cases.attention_case(rng, (3, 2, domain.sequence_length(rng, 2, 40), domain.head_width(rng, 16)), dtype,
                               True, coefficient_kind="tensor", layouts=layouts)
          for layouts, dtype in zip(domain.expanded_layouts(axes=tuple(cases.EXPANSIONS)), itertools.cycle(("float32", "float64")))),  # fmt: skip
        *(cases.attention_case(rng, (int(rng.integers(2, 4)), 2, domain.sequence_length(rng, 2, 40), domain.head_width(rng, 16)), dtype,
                               True, coefficient_kind="tensor", layouts=layouts)
          for layouts, dtype in zip(domain.expanded_together(axes=tuple(cases.EXPANSIONS)), itertools.cycle(("float64", "float32")))),  # fmt: skip
        cases.attention_case(rng, (int(rng.integers(2, 4)), 1, domain.sequence_length(rng, 2, 40), domain.head_width(rng, 16)), "float64",
                             True, coefficient_kind="tensor", layouts=("heads_permuted",) * 5),  # fmt: skip
    ])


# Which inputs a caller leaves without requires_grad: each alone, pairs, and none.
FROZEN_PATTERNS = ((), ("q1",), ("k1",), ("q2",), ("k2",), ("value",), ("coefficient",), ("q1", "k1"), ("q2", "k2", "value"), ())


@SETS.register
def attention_gradients(seed: int) -> list[AttentionCase]:
    """Gradient cases: every input frozen alone and in groups, tensor (also exactly 0 and 1, and int64), int and Python-float coefficients, T up to 320,
    a value feature zero at every token (the first call of heads wider than one), logits up to 1000; T past 512 without the mask and with it (:data:`domain.ONE_PAST_BLOCKS`); both branches equal in value;
    keys past the first 128 faint (:func:`domain.faint_keys`); one tensor passed as q1 and k1, then as all four queries and keys
    (:func:`domain.hold_one_object`); the first call again differentiated as output.sum() (:func:`domain.summed`); each
    input in turn all zeros, then constant (:func:`domain.constant_inputs`); last, the first two calls again with every
    argument by name (:func:`domain.by_name`)."""
    rng = domain.generator(seed, "attention_gradients")
    kinds = ("tensor", "tensor", "float", "tensor", "int", "float64 tensor", "tensor", "float", "tensor", "tensor")
    found = []
    for i, (frozen, kind) in enumerate(zip(FROZEN_PATTERNS, kinds)):
        dtype = ("float64", "float32")[i % 2]
        shape = (1, 1, 1, 4) if i == 4 else domain.domain_shape(rng, 2, 140 if i < 8 else domain.LONGEST, 32)
        coefficient = float(rng.choice([-1, 2])) if kind == "int" else float(rng.uniform(-1.0, 2.0))
        coefficient = {0: 0.0, 3: 1.0}.get(i, coefficient)  # the coefficient's boundaries, as tensors that require grad
        causal = (True, False, None)[i % 3]
        found.append(cases.attention_case(
            rng, shape, dtype, causal, coefficient, coefficient_kind=kind, frozen=frozen,
            max_logit=120.0 if i == 5 else None, binding=("keyword", "positional")[i % 2],
        ))  # fmt: skip
    found = domain.dead_feature(found, lambda case: case.value, cases.with_values)
    # float32 logits of hundreds: masked future logits far above the visible ones overflow any exp taken before masking
    found.append(cases.attention_case(rng, domain.domain_shape(rng, 8, 70, 16), "float32", True, coefficient_kind="tensor",
                                      max_logit=float(rng.uniform(300, 1000))))  # fmt: skip
    found += [
        # without the mask at domain.ONE_PAST_BLOCKS tokens: a backward pass recomputed in blocks of queries meets every key
        cases.attention_case(rng, (1, 1, domain.ONE_PAST_BLOCKS, domain.head_width(rng, 4)), "float64", False, coefficient_kind="tensor"),
        # both branches equal in value (tied initialisations): a shortcut that shares one map loses q2's and k2's gradients
        cases.identical_branches(cases.attention_case(rng, domain.domain_shape(rng, 2, 40, 16), "float32", True, coefficient_kind="tensor"),
                                 float(rng.uniform(-1.0, 2.0))),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 40, 16), "float64", None, float(rng.choice([-1, 2, 3])), coefficient_kind="int64 tensor"),
        # with the mask at domain.ONE_PAST_BLOCKS tokens: a backward pass recomputed in blocks of queries, each against the keys up
        # to its end, must place the mask at the block's own rows
        cases.attention_case(rng, (1, 1, domain.ONE_PAST_BLOCKS, domain.head_width(rng, 4)), "float32", True, coefficient_kind="tensor"),
        # the keys past the first 128 faint: a backward pass that skips a block of tiny weights zeroes those keys' gradients
        cases.attention_case(rng, (1, 1, domain.ONE_PAST_BLOCKS, domain.head_width(rng, 4)), "float64", True, coefficient_kind="tensor",
                             faint=domain.FIRST_FAINT),
        # one tensor as the queries and the keys (a shared projection), then as all four: its gradient is the sum of theirs
        replace(cases.attention_case(rng, domain.domain_shape(rng, 2, 40, 16), "float64", True, coefficient_kind="tensor"), one_object=("q1", "k1")),
        replace(cases.attention_case(rng, domain.domain_shape(rng, 2, 40, 16), "float32", False, coefficient_kind="tensor"),
                one_object=cases.INPUT_NAMES[:4]),
    ]  # fmt: skip
    # zero- and constant-initialised inputs: their gradients are not zero, nor one number for every element
    constant = domain.constant_inputs(lambda: cases.attention_case(rng, domain.domain_shape(rng, 2, 12, 8), "float64", None, coefficient_kind="tensor"),
                                      cases.INPUT_NAMES[:5], rng)  # fmt: skip
    named = [domain.by_name(case, rng, cases.ATTENTION_PARAMETERS) for case in found[:2]]
    return domain.as_training_inputs([*found, domain.summed(found[0]), *constant, *named])


@SETS.register
def frozen_subsets(seed: int) -> list[AttentionCase]:
    """One small case per subset of q1, k1, q2, k2, value and a tensor coefficient that requires grad (every one but the empty set);
    then at one token, one batch element and one head, each input alone requiring grad (see :func:`domain.trainable_alone`)."""
    rng = domain.generator(seed, "frozen_subsets")
    names = (*cases.INPUT_NAMES, "coefficient")
    bases = [cases.attention_case(rng, domain.domain_shape(rng, 2, 12, 4), dtype, causal, coefficient_kind="tensor")
             for dtype, causal in (("float64", True), ("float32", False))]  # fmt: skip
    subsets = [replace(bases[mask % 2], frozen=tuple(n for bit, n in enumerate(names) if not mask >> bit & 1)) for mask in range(1, 2 ** len(names))]
    return domain.as_training_inputs(subsets + [
        cases.attention_case(rng, (1, 1, 1, domain.head_width(rng, 4)), ("float64", "float32")[i % 2], (True, None)[i % 2],
                             coefficient_kind="tensor", frozen=frozen) for i, frozen in enumerate(domain.trainable_alone(names))
    ])  # fmt: skip


@SETS.register
def lambda_frozen_subsets(seed: int) -> list[LambdaCase]:
    """One case per subset of q1, k1, q2, k2 that requires grad (every one but the empty set); then vectors of length 1, each
    alone requiring grad; then one tensor passed as all four vectors and as q1 and q2 (:func:`domain.hold_one_object`), and
    each vector in turn all zeros, then constant (:func:`domain.constant_inputs`)."""
    rng = domain.generator(seed, "lambda_frozen_subsets")
    bases = [cases.lambda_case(rng, int(rng.integers(1, 9)), dtype, 0.2) for dtype in ("float64", "float32")]
    subsets = [replace(bases[mask % 2], frozen=tuple(n for bit, n in enumerate(cases.LAMBDA_NAMES) if not mask >> bit & 1))
               for mask in range(1, 2 ** len(cases.LAMBDA_NAMES))]  # fmt: skip
    alone = [replace(cases.lambda_case(rng, 1, ("float64", "float32")[i % 2], 0.2), frozen=frozen)
             for i, frozen in enumerate(domain.trainable_alone(cases.LAMBDA_NAMES))]  # fmt: skip
    shared = [replace(cases.lambda_case(rng, int(rng.integers(1, 9)), dtype, init), one_object=names)
              for names, dtype, init in ((cases.LAMBDA_NAMES, "float64", 0.2), (("q1", "q2"), "float32", None))]  # fmt: skip
    blank = domain.constant_inputs(lambda: cases.lambda_case(rng, int(rng.integers(2, 9)), "float64", 0.2), cases.LAMBDA_NAMES, rng)
    return domain.as_training_inputs(subsets + alone + shared + blank)


@SETS.register
def end_to_end(seed: int) -> list[AttentionCase]:
    """differential_lambda feeding differential_attention, with the paper's lambda_init."""
    rng = domain.generator(seed, "end_to_end")
    found = []
    for dtype, causal, binding in (("float64", True, "keyword"), ("float32", False, "positional")):
        lam = cases.lambda_case(rng, int(rng.integers(1, 17)), dtype, paper_lambda_init(int(rng.integers(1, 13))), binding=binding)
        found.append(cases.with_lambda(cases.attention_case(rng, domain.domain_shape(rng, 2, 70, 16), dtype, causal, binding=binding), lam))
    return found


@SETS.register
def lambda_bindings(seed: int) -> list[LambdaCase]:
    """differential_lambda with every argument by name (in a shuffled order) and by position, lambda_init given and omitted."""
    rng = domain.generator(seed, "lambda_bindings")
    return domain.cycled_modes([
        cases.lambda_case(rng, int(rng.integers(2, 9)), dtype, init, binding=binding)
        for binding in ("names", "positional")
        for dtype, init in (("float64", float(rng.uniform(0.3, 0.9))), ("float32", None))
    ])


@SETS.register
def attention_bindings(seed: int) -> list[AttentionCase]:
    """differential_attention with every argument by name (in a shuffled order) and by position, causal True, False and omitted."""
    rng = domain.generator(seed, "attention_bindings")
    return domain.cycled_modes([
        cases.attention_case(rng, domain.domain_shape(rng, 3, 24, 8), "float64", causal, binding=binding)
        for binding in ("names", "positional")
        for causal in (True, False, None)
    ])


def _first_call(rng: np.random.Generator, function: str, how: FirstCall) -> LambdaCase | AttentionCase:
    """The first call of a sequence (see :func:`sequences`): λ vectors of 1 to 16; a length of the whole domain (what a
    function keeps between calls of one shape, such as a workspace, may depend on it), or up to the length ``how`` gives, and
    D up to 8 (at the fresh length it is given: one batch element, one head, D up to 4), a Python or a tensor coefficient."""
    if function == LAMBDA:
        return cases.lambda_case(rng, int(rng.integers(1, 17)), how.dtype, float(rng.uniform(0.1, 0.9)), grad_mode=how.grad_mode)
    if how.fresh_length:
        shape = (1, 1, how.fresh_length, domain.head_width(rng, 4))
    else:
        longest = 1 if how.decoding else how.longest or domain.LONGEST
        shape = domain.domain_shape(rng, min(2, longest), longest, 8)
    coefficient = str(rng.choice(["float", "tensor"]))
    return cases.attention_case(rng, shape, how.dtype, how.causal, coefficient_kind=coefficient, grad_mode=how.grad_mode)


@SETS.register
def sequences(seed: int) -> list[CallSequence[LambdaCase | AttentionCase]]:
    """Each function called twice in each way of :data:`~grader.toolkit.domain.SEQUENCE_KINDS` and each mode of
    :data:`~grader.toolkit.domain.SEQUENCE_MODES` (the option is causal (lambda_init for differential_lambda); :func:`~grader.toolkit.sequences.first_call` says how the
    first call is made)."""
    return draw_sequences(domain.generator(seed, "sequences"), (LAMBDA, ATTENTION), _first_call, VARIATIONS)


VARIATIONS: Variations[Any] = Variations(cases.redrawn, cases.retyped, cases.reflagged, cases.resized, cases.layered, cases.stacked,
                                         cases.shuffled, cases.rescaled, cases.changed_alone,
                                         {LAMBDA: (*cases.LAMBDA_NAMES, "lambda_init"), ATTENTION: (*cases.INPUT_NAMES, "coefficient", "causal")})


def lambda_request(case: LambdaCase, requires_grad: bool = False) -> Request:
    """One differential_lambda call; with gradients, a backward pass with the case's upstream value."""
    vectors = domain.one_object([
        TensorInput(v, case.dtype, requires_grad and case.requires_grad(name), case.layout, case.activations, case.held_grads, case.parameters)
        for v, name in zip(case.vectors, cases.LAMBDA_NAMES)
    ], cases.LAMBDA_NAMES, case.one_object)  # fmt: skip
    call = bound_call(LAMBDA, cases.LAMBDA_NAMES, vectors, "lambda_init", case.lambda_init, case.binding, case.keyword_order)
    if not requires_grad:
        return Request((replace(call, grad_mode=case.grad_mode),), inputs=domain.distinct(vectors))
    return Request((call,), backward_from=0, cotangent=domain.exact(case.upstream, case.dtype), inputs=domain.distinct(vectors))


def attention_request(case: AttentionCase, requires_grad: bool = False) -> Request:
    """One differential_attention call (after differential_lambda for a composed case)."""
    inputs = domain.one_object([
        TensorInput(x, case.dtype, requires_grad and case.requires_grad(name), layout, case.activations, case.held_grads, case.parameters)
        for x, layout, name in zip(case.inputs, case.layouts, cases.INPUT_NAMES)
    ], cases.INPUT_NAMES, case.one_object)  # fmt: skip
    calls: tuple[Call, ...] = ()
    numbered: tuple[TensorInput, ...] = domain.distinct(inputs)
    coefficient: Any = case.coefficient
    if case.lambda_case is not None:
        composed = lambda_request(case.lambda_case, requires_grad)
        calls, numbered = composed.calls, composed.inputs + numbered
        coefficient = ResultOf(0)
    elif case.coefficient_is_tensor:
        grad = requires_grad and case.requires_grad("coefficient")
        coefficient = TensorInput(domain.exact(case.coefficient, case.coefficient_dtype), case.coefficient_dtype, grad, activation=case.activations,
                                  held_grad=case.held_grads, parameter=case.parameters)
        numbered += (coefficient,)
    elif case.coefficient_kind == "int":
        coefficient = int(case.coefficient)
    names = (*cases.INPUT_NAMES, "coefficient")
    calls += (bound_call(ATTENTION, names, (*inputs, coefficient), "causal", case.causal, case.binding, case.keyword_order),)
    if not requires_grad:
        return Request(tuple(replace(call, grad_mode=case.grad_mode) for call in calls), inputs=numbered)
    return Request(calls, backward_from=len(calls) - 1, cotangent=case.cotangent, inputs=numbered, cotangent_layout=case.cotangent_layout)


def outcome(
    grading: GradingContext, key: tuple[Any, ...], request: Request | Callable[[], Request], functions: tuple[str, ...] | None = None,
    shared: bool = False,
) -> Outcome:  # fmt: skip
    """The outcome of ``request`` in the submission's worker, made once per run for ``key``.

    A request that needs a function the submission lacks is not sent at all.
    ``request`` may be a function that gives it, with ``functions`` the
    functions its calls call, in order: it is then asked for only when it is
    sent. ``shared``: a request built once per process (see :func:`invoke.invoke_many`).
    """
    notes = {}
    for function in functions if functions is not None else [call.function for call in request.calls]:  # type: ignore[union-attr]
        problem = verdicts.function_problem(grading, function)
        if problem is not None:
            return Outcome(failure=problem)
        parameters = grading.functions.get(function, {}).get("parameters")
        note = grading.memo(("signature", function), lambda: signature_problem(function, parameters))
        if note is not None:
            notes[function] = note
    worker = grading.worker
    if worker is None:
        return Outcome(failure=grading.load_failure or "the submission was not loaded")
    found = grading.memo(key, lambda: invoke(worker, request() if callable(request) else request, shared=shared))
    found.notes = notes
    return found


def case_request(case: LambdaCase | AttentionCase, grads: bool) -> Request:
    """The request that evaluates one case of any set, built once per case object and process.

    A request holds nothing but the case's inputs and how to call: every
    student's run sends the same one (case sets are drawn once per seed).
    """
    return remember(_REQUESTS, (case,), lambda: _built_request(case, grads), values=(grads,))


_REQUESTS: Memo = {}


def _built_request(case: LambdaCase | AttentionCase, grads: bool) -> Request:
    return lambda_request(case, grads) if isinstance(case, LambdaCase) else attention_request(case, grads)


def prefetch(grading: GradingContext, case_set: CaseSet[LambdaCase | AttentionCase], grads: bool) -> None:
    """Ask for every case of a set in one worker round trip, once per run.

    A round trip costs both processes about 0.6 ms, and a run made about 60
    of them one case at a time. Each case is still its own request, made, timed,
    differentiated and counted exactly as if it were sent alone
    (:func:`invoke_each`): the outcomes are the ones the cases would get one
    by one. After a failed round trip (a crash, a hang) the cases not run yet
    are asked for alone, as they would have been anyway.
    """
    done = ("prefetched", case_set.name, grads)
    if done in grading.cache or grading.worker is None:
        return
    grading.cache[done] = True
    wanted = [(i, case_request(case, grads)) for i, case in enumerate(case_set(grading.seed))]
    wanted = [(i, r) for i, r in wanted if (case_set.name, i, grads) not in grading.cache]
    functions = {tuple(sorted({c.function for c in r.calls})) for _, r in wanted}
    if len(wanted) < 2 or len(functions) != 1 or any(verdicts.function_problem(grading, f) for f in functions.pop()):
        return  # (one round trip is for requests that call the same functions; see Worker.run_each)
    for (i, _), found in zip(wanted, invoke_each(grading.worker, [r for _, r in wanted], shared=True)):
        grading.cache[(case_set.name, i, grads)] = found


def lambda_outcome(grading: GradingContext, case_set: CaseSet[Any], index: int, case: LambdaCase, grads: bool = False) -> Outcome:
    """The outcome of lambda case ``index`` of ``case_set``."""
    prefetch(grading, case_set, grads)
    return outcome(grading, (case_set.name, index, grads), lambda: case_request(case, grads), (LAMBDA,), shared=True)


def attention_outcome(grading: GradingContext, case_set: CaseSet[Any], index: int, case: AttentionCase, grads: bool = False) -> Outcome:
    """The outcome of attention case ``index`` of ``case_set``."""
    prefetch(grading, case_set, grads)
    functions = (ATTENTION,) if case.lambda_case is None else (LAMBDA, ATTENTION)
    return outcome(grading, (case_set.name, index, grads), lambda: case_request(case, grads), functions, shared=True)


def case_outcome(grading: GradingContext, case_set: CaseSet[Any], index: int, case: LambdaCase | AttentionCase, grads: bool = False) -> Outcome:
    """The outcome of case ``index`` of ``case_set``, of either kind."""
    if isinstance(case, LambdaCase):
        return lambda_outcome(grading, case_set, index, case, grads)
    return attention_outcome(grading, case_set, index, case, grads)


def value_verdicts(grading: GradingContext, case_set: CaseSet[LambdaCase | AttentionCase], truth: Any = None, grads: bool = False) -> list[Comparison]:
    """The verdict on every case of a set: its last call's output against ``truth(case)`` (default: the case's value).

    With ``grads`` the calls are the gradient checks' own, whose inputs require grad.
    """
    found = []
    for i, case in enumerate(case_set(grading.seed)):
        if isinstance(case, LambdaCase):
            function, last, outcome = LAMBDA, 0, lambda_outcome(grading, case_set, i, case, grads)
        else:
            function, last, outcome = ATTENTION, int(case.lambda_case is not None), attention_outcome(grading, case_set, i, case, grads)
        what = f"{function}({case.label(grads)})" + (" with inputs that require grad" if grads else "")
        found.append(verdicts.values_verdict(outcome, last, what, (truth or expected.case_value)(case)))
    return found


def gradient_positions(case: LambdaCase | AttentionCase) -> dict[str, int]:
    """Input name -> tensor number in the case's request, for the inputs whose gradients are requested."""
    if isinstance(case, LambdaCase):
        return {name: i for i, name in enumerate(domain.tensor_names(cases.LAMBDA_NAMES, case.one_object)) if case.requires_grad(name)}
    if case.lambda_case is not None:
        vectors = {f"lambda_{n}": i for i, n in enumerate(cases.LAMBDA_NAMES) if case.lambda_case.requires_grad(n)}
        return {**vectors, **{n: i + 4 for i, n in enumerate(cases.INPUT_NAMES) if case.requires_grad(n)}}
    names = domain.tensor_names((*cases.INPUT_NAMES, "coefficient"), case.one_object)
    return {name: i for i, name in enumerate(names) if case.requires_grad(name)}


SEQUENCES = SequenceSuite(sequences, case_request, gradient_positions, expected.case_value, expected.case_grads,
                          lambda grading, key, request: outcome(grading, key, request, shared=True))  # fmt: skip


@SETS.register
def row_sums(seed: int) -> list[AttentionCase]:
    """Pairs: a case, then the same with one vector c added to every token's value; the outputs must differ by (1 - λ)·c in every row."""
    rng = domain.generator(seed, "row_sums")
    found = []
    for case in (
        cases.attention_case(rng, (2, 2, 6, 4), "float64", True, float(rng.uniform(-1.0, 2.0))),
        cases.attention_case(rng, domain.domain_shape(rng, 2, 70, 16), "float32", False, coefficient_kind="tensor"),
    ):
        found += [case, cases.shared_offset(case, rng)]
    return domain.cycled_modes(found)


@SETS.register
def lambda_zero(seed: int) -> list[AttentionCase]:
    """coefficient 0: the result must be ordinary causal (or full) softmax attention of branch 1."""
    rng = domain.generator(seed, "lambda_zero")
    return domain.cycled_modes([
        cases.attention_case(rng, domain.domain_shape(rng, 2, 70, 16), dtype, causal, 0.0)
        for dtype, causal in (("float64", True), ("float32", False))
    ])


@SETS.register
def identical_maps(seed: int) -> list[AttentionCase]:
    """q2 = q1 and k2 = k1: at coefficient 1 the maps cancel and the output is 0; at any other c it is (1 - c)·A1·V."""
    rng = domain.generator(seed, "identical_maps")
    return domain.cycled_modes([
        cases.identical_branches(cases.attention_case(rng, (1, 2, 6, 4), "float64", True), 1.0),
        cases.identical_branches(cases.attention_case(rng, domain.domain_shape(rng, 2, 40, 8), "float32", True), 1.0),
        cases.identical_branches(cases.attention_case(rng, domain.domain_shape(rng, 2, 40, 8), "float64", False), float(rng.uniform(-1.0, 0.6))),
    ])


VALUE_SETS = (attention_causal, attention_noncausal, attention_coefficients, attention_large_logits,
              attention_strided, row_sums, lambda_zero, identical_maps, attention_bindings,
              attention_gradients, end_to_end)  # fmt: skip
GRADIENT_SETS = (attention_gradients, frozen_subsets, attention_strided, end_to_end)


def prepare(seed: int) -> None:
    """Draw every case set for ``seed`` and compute the oracle's truths for them, once.

    A batch calls this before it forks its grading processes, so
    that each of them inherits the expected values instead of computing them.
    """
    for case in lambda_values(seed) + lambda_frozen_subsets(seed):
        expected.lambda_value(case)
        expected.lambda_grads(case)
    for case in lambda_strided(seed) + lambda_bindings(seed):
        expected.lambda_value(case)
    SEQUENCES.prepare(seed)
    for case_set in VALUE_SETS + GRADIENT_SETS:  # a case's value and gradients one after the other: they share its maps
        for drawn in case_set(seed):
            expected.attention_output(drawn)
            if case_set in GRADIENT_SETS:
                expected.attention_grads(drawn)
    for drawn in lambda_zero(seed):
        expected.branch_one_output(drawn)
    for drawn in identical_maps(seed):
        expected.identical_maps_output(drawn)
