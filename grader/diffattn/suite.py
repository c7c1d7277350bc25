"""The case sets of the checks, and the worker requests that evaluate them.

Several checks read the same calls (T1 looks at the types of the outputs whose
values T2 compares), so a case set is drawn once per seed and every request is
made once per run, through :meth:`GradingContext.memo`.
"""

from __future__ import annotations

import functools
from typing import Any

from grader.diffattn import cases, expected, verdicts
from grader.diffattn.signatures import signature_problem
from grader.diffattn.cases import STRIDED, AttentionCase, LambdaCase, paper_lambda_init
from grader.invoke import Call, Outcome, Request, ResultOf, TensorInput, invoke, invoke_each
from grader.plugin import GradingContext

LAMBDA = "differential_lambda"
ATTENTION = "differential_attention"
# Each case set is drawn once per seed and process: the same case objects then
# key the oracle's cached truths (expected.py), which a batch computes once.
_per_seed = functools.lru_cache(maxsize=4)


@_per_seed
def lambda_values(seed: int) -> list[LambdaCase]:
    """Vectors of several lengths, both dtypes, the default, the paper's and out-of-[0, 1] lambda_init, lambda > 3 and < -2."""
    rng = cases.generator(seed, "lambda_values")
    return [
        cases.lambda_case(rng, 4, "float32", None),
        cases.lambda_case(rng, 1, "float64", None),
        cases.lambda_case(rng, 8, "float32", paper_lambda_init(1)),
        cases.lambda_case(rng, 16, "float64", paper_lambda_init(int(rng.integers(2, 7)))),
        cases.lambda_case(rng, 3, "float32", paper_lambda_init(int(rng.integers(7, 25)))),
        cases.lambda_case(rng, 6, "float64", 0.2, direction=-1),
        cases.lambda_case(rng, 5, "float32", float(rng.uniform(1.1, 2.0)), direction=1),
        cases.lambda_case(rng, 7, "float64", float(rng.uniform(-1.0, -0.1))),
    ]


@_per_seed
def lambda_strided(seed: int) -> list[LambdaCase]:
    """Sliced (non-contiguous) lambda vectors in both dtypes."""
    rng = cases.generator(seed, "lambda_strided")
    return [cases.lambda_case(rng, 5, dtype, 0.2, layout="sliced") for dtype in ("float32", "float64")]


@_per_seed
def attention_causal(seed: int) -> list[AttentionCase]:
    """Causal cases: several shapes including T=1 and T=37, both dtypes, two with the argument omitted."""
    rng = cases.generator(seed, "attention_causal")
    return [
        cases.attention_case(rng, (2, 2, 5, 4), "float32", True),
        cases.attention_case(rng, (1, 3, 7, 8), "float64", True),
        cases.attention_case(rng, (1, 1, 1, 4), "float32", True),
        cases.attention_case(rng, (2, 1, 4, 2), "float64", None),
        cases.attention_case(rng, (1, 2, 9, 3), "float32", None),
        cases.attention_case(rng, (1, 2, 37, 4), "float32", True),
    ]


@_per_seed
def attention_noncausal(seed: int) -> list[AttentionCase]:
    """causal=False cases: several shapes including T=1 and T=33, both dtypes, once passed positionally."""
    rng = cases.generator(seed, "attention_noncausal")
    return [
        cases.attention_case(rng, (2, 2, 6, 4), "float32", False),
        cases.attention_case(rng, (1, 2, 3, 8), "float64", False),
        cases.attention_case(rng, (1, 1, 1, 2), "float64", False, causal_positional=True),
        cases.attention_case(rng, (1, 1, 33, 2), "float64", False),
    ]


@_per_seed
def attention_coefficients(seed: int) -> list[AttentionCase]:
    """Negative, zero, exactly one, greater-than-one, int and 0-dim tensor (also float64 with float32 inputs) coefficients."""
    rng = cases.generator(seed, "attention_coefficients")
    return [
        cases.attention_case(rng, (1, 2, 5, 4), "float32", True, float(rng.uniform(-1.5, -0.2))),
        cases.attention_case(rng, (2, 1, 4, 4), "float64", False, 0.0),
        cases.attention_case(rng, (1, 2, 6, 2), "float64", True, float(rng.uniform(1.1, 2.5))),
        cases.attention_case(rng, (2, 2, 5, 4), "float32", True, coefficient_kind="tensor"),
        cases.attention_case(rng, (1, 1, 4, 8), "float64", False, coefficient_kind="tensor"),
        cases.attention_case(rng, (1, 2, 5, 4), "float64", True, 1.0),
        cases.attention_case(rng, (2, 1, 4, 2), "float32", False, float(rng.choice([-1, 2, 3])), coefficient_kind="int"),
        cases.attention_case(rng, (1, 2, 4, 4), "float32", True, coefficient_kind="float64 tensor"),
    ]


@_per_seed
def attention_large_logits(seed: int) -> list[AttentionCase]:
    """float32 inputs whose scaled logits reach 100 to 250 in magnitude (a naive exp overflows)."""
    rng = cases.generator(seed, "attention_large_logits")
    return [
        cases.attention_case(rng, (1, 2, 6, 8), "float32", causal, max_logit=float(rng.uniform(100, 250)))
        for causal in (True, False)
    ]


@_per_seed
def attention_strided(seed: int) -> list[AttentionCase]:
    """Transposed, head-permuted and sliced views as inputs, both dtypes, tensor coefficient."""
    rng = cases.generator(seed, "attention_strided")
    return [
        cases.attention_case(rng, (2, 3, 5, 4), "float32", True, coefficient_kind="tensor", layouts=STRIDED),
        cases.attention_case(rng, (1, 2, 4, 2), "float64", False, layouts=STRIDED[::-1]),
    ]


@_per_seed
def attention_gradients(seed: int) -> list[AttentionCase]:
    """Gradient cases: tensor coefficient, both dtypes, causal and not, T=1 and T=34, large logits, frozen inputs."""
    rng = cases.generator(seed, "attention_gradients")
    return [
        cases.attention_case(rng, (2, 2, 5, 4), "float64", True, coefficient_kind="tensor"),
        cases.attention_case(rng, (1, 2, 4, 8), "float64", False, coefficient_kind="tensor"),
        cases.attention_case(rng, (2, 1, 6, 4), "float32", True, coefficient_kind="tensor"),
        cases.attention_case(rng, (1, 3, 5, 2), "float32", False, float(rng.uniform(-1.0, 2.0)), coefficient_kind="tensor"),
        cases.attention_case(rng, (1, 1, 1, 4), "float64", True, coefficient_kind="tensor"),
        cases.attention_case(rng, (1, 2, 6, 8), "float32", True, coefficient_kind="tensor", max_logit=120.0),
        cases.attention_case(rng, (1, 1, 34, 4), "float64", True, coefficient_kind="tensor"),
        cases.attention_case(rng, (2, 1, 5, 4), "float64", False, coefficient_kind="tensor", frozen=("q1", "k1")),
        cases.attention_case(rng, (1, 2, 4, 4), "float32", True, coefficient_kind="float64 tensor"),
    ]


@_per_seed
def end_to_end(seed: int) -> list[AttentionCase]:
    """differential_lambda feeding differential_attention, with the paper's lambda_init."""
    rng = cases.generator(seed, "end_to_end")
    found = []
    for dtype, causal in (("float64", True), ("float32", False)):
        lam = cases.lambda_case(rng, 4, dtype, paper_lambda_init(int(rng.integers(1, 13))))
        found.append(cases.with_lambda(cases.attention_case(rng, (2, 2, 4, 4), dtype, causal), lam))
    return found


def lambda_request(case: LambdaCase, requires_grad: bool = False) -> Request:
    """One differential_lambda call; with gradients, a backward pass with the case's upstream value."""
    vectors = tuple(TensorInput(v, case.dtype, requires_grad, case.layout) for v in case.vectors)
    kwargs = {} if case.lambda_init is None else {"lambda_init": case.lambda_init}
    call = Call(LAMBDA, vectors, kwargs)
    if not requires_grad:
        return Request((call,))
    return Request((call,), backward_from=0, cotangent=cases.exact(case.upstream, case.dtype))


def attention_request(case: AttentionCase, requires_grad: bool = False) -> Request:
    """One differential_attention call (after differential_lambda for a composed case)."""
    inputs = tuple(
        TensorInput(x, case.dtype, requires_grad and case.requires_grad(name), layout)
        for x, layout, name in zip(case.inputs, case.layouts, cases.INPUT_NAMES)
    )
    calls: tuple[Call, ...] = ()
    coefficient: Any = case.coefficient
    if case.lambda_case is not None:
        calls = lambda_request(case.lambda_case, requires_grad).calls
        coefficient = ResultOf(0)
    elif case.coefficient_is_tensor:
        coefficient = TensorInput(cases.exact(case.coefficient, case.coefficient_dtype), case.coefficient_dtype, requires_grad)
    elif case.coefficient_kind == "int":
        coefficient = int(case.coefficient)
    args = (*inputs, coefficient)
    kwargs = {} if case.causal is None else {"causal": case.causal}
    if case.causal_positional:
        args, kwargs = (*args, case.causal), {}
    calls += (Call(ATTENTION, args, kwargs),)
    if not requires_grad:
        return Request(calls)
    return Request(calls, backward_from=len(calls) - 1, cotangent=case.cotangent)


def outcome(grading: GradingContext, key: tuple[Any, ...], request: Request) -> Outcome:
    """The outcome of ``request`` in the submission's worker, made once per run for ``key``.

    A request that needs a function the submission lacks is not sent at all.
    """
    notes = {}
    for call in request.calls:
        problem = verdicts.function_problem(grading, call.function)
        if problem is not None:
            return Outcome(failure=problem)
        parameters = grading.functions.get(call.function, {}).get("parameters")
        note = grading.memo(("signature", call.function), lambda: signature_problem(call.function, parameters))
        if note is not None:
            notes[call.function] = note
    found = grading.memo(key, lambda: invoke(grading.worker, request))
    found.notes = notes
    return found


def case_request(case: LambdaCase | AttentionCase, grads: bool) -> Request:
    """The request that evaluates one case of any set."""
    return lambda_request(case, grads) if isinstance(case, LambdaCase) else attention_request(case, grads)


def prefetch(grading: GradingContext, set_name: str, grads: bool) -> None:
    """Ask for every case of a set in one worker round trip, once per run.

    A round trip costs both processes about 0.6 ms, and a run made about 60
    of them one case at a time. Each case is still its own request, made, timed,
    differentiated and counted exactly as if it were sent alone
    (:func:`invoke_each`): the outcomes are the ones the cases would get one
    by one. After a failed round trip (a crash, a hang) the cases not run yet
    are asked for alone, as they would have been anyway.
    """
    done = ("prefetched", set_name, grads)
    if done in grading.cache or grading.worker is None:
        return
    grading.cache[done] = True
    wanted = [(i, case_request(case, grads)) for i, case in enumerate(globals()[set_name](grading.seed))]
    wanted = [(i, r) for i, r in wanted if (set_name, i, grads) not in grading.cache]
    functions = {tuple(sorted({c.function for c in r.calls})) for _, r in wanted}
    if len(wanted) < 2 or len(functions) != 1 or any(verdicts.function_problem(grading, f) for f in functions.pop()):
        return  # (one round trip is for requests that call the same functions; see Worker.run_each)
    for (i, _), found in zip(wanted, invoke_each(grading.worker, [r for _, r in wanted])):
        grading.cache[(set_name, i, grads)] = found


def lambda_outcome(grading: GradingContext, set_name: str, index: int, case: LambdaCase, grads: bool = False) -> Outcome:
    """The outcome of lambda case ``index`` of set ``set_name``."""
    prefetch(grading, set_name, grads)
    return outcome(grading, (set_name, index, grads), lambda_request(case, grads))


def attention_outcome(grading: GradingContext, set_name: str, index: int, case: AttentionCase, grads: bool = False) -> Outcome:
    """The outcome of attention case ``index`` of set ``set_name``."""
    prefetch(grading, set_name, grads)
    return outcome(grading, (set_name, index, grads), attention_request(case, grads))


@_per_seed
def row_sums(seed: int) -> list[AttentionCase]:
    """Every token shares one value vector c, so each output row must be (1 - λ) c."""
    rng = cases.generator(seed, "row_sums")
    return [
        cases.shared_value_rows(cases.attention_case(rng, (2, 2, 6, 4), "float64", True, float(rng.uniform(-1.0, 2.0))), rng),
        cases.shared_value_rows(cases.attention_case(rng, (1, 2, 5, 2), "float32", False, coefficient_kind="tensor"), rng),
    ]


@_per_seed
def lambda_zero(seed: int) -> list[AttentionCase]:
    """coefficient 0: the result must be ordinary causal (or full) softmax attention of branch 1."""
    rng = cases.generator(seed, "lambda_zero")
    return [cases.attention_case(rng, (2, 2, 5, 4), dtype, causal, 0.0) for dtype, causal in (("float64", True), ("float32", False))]


@_per_seed
def identical_maps(seed: int) -> list[AttentionCase]:
    """q2 = q1, k2 = k1 and coefficient 1: the two maps cancel and the output is 0."""
    rng = cases.generator(seed, "identical_maps")
    return [cases.identical_branches(cases.attention_case(rng, (1, 2, 6, 4), dtype, True)) for dtype in ("float64", "float32")]


VALUE_SETS = ("attention_causal", "attention_noncausal", "attention_coefficients", "attention_large_logits",
              "attention_strided", "row_sums", "lambda_zero", "identical_maps")  # fmt: skip
GRADIENT_SETS = ("attention_gradients", "attention_strided", "end_to_end")


def prepare(seed: int) -> None:
    """Draw every case set for ``seed`` and compute the oracle's truths for them, once.

    A batch calls this before it forks its grading processes, so
    that each of them inherits the expected values instead of computing them.
    """
    for case in lambda_values(seed):
        expected.lambda_value(case)
        expected.lambda_grads(case)
    for case in lambda_strided(seed):
        expected.lambda_value(case)
    for name in VALUE_SETS:
        for case in globals()[name](seed):
            expected.attention_output(case)
    for name in GRADIENT_SETS:
        for case in globals()[name](seed):
            expected.attention_grads(case)
