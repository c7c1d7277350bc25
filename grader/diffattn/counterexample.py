"""Shrunk counterexamples: the smallest cut of a failing input that still fails.

When a value (T2) or gradient (T3) check fails because numbers came back
wrong, the failing case with the fewest elements becomes the template. It is
cut down to the batch and head of its worst element and to its first T tokens
and D features, for every T ≤ 4 and D ≤ 3 it has (lambda vectors: their first
n ≤ 4 entries). A cut keeps everything else of the template: dtype, causal
flag and how it is passed, coefficient and its kind, layouts, frozen inputs,
the lambda call of a composed case, the shared value rows or identical
branches of a property check, and the cotangent (cut the same way). So the
candidates follow from the run's seed alone and need no new randomness; for a
causal case a cut to the first T tokens is even the same problem's first rows.

All cuts of a template go to the worker in one diagnostic round trip
(:func:`grader.invoke.invoke_many`); a failed one is not retried and ends
the searches of the run. The cuts are judged against the oracle with the
check's own tolerances. The first failing cut in the order of T·D, then T
(lambda: n) is recorded with ``grading.explain(counterexample=...)``;
docs/report-schema.md describes the record. Nothing here changes a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence, TypeVar, Union

import numpy as np

from grader.compare import Comparison, error_ratios
from grader.diffattn import expected, suite
from grader.diffattn.cases import AttentionCase, LambdaCase
from grader.diffattn.expected import Truth
from grader.diffattn.signatures import CONTRACT
from grader.diffattn.verdicts import tensor_result
from grader.invoke import Outcome, Request, ResultOf, TensorInput, invoke_many
from grader.plugin import GradingContext

MAX_T = 4
MAX_D = 3
MAX_LENGTH = 4
FIRST_STAGE = 3  # cuts in the first request: the three smallest (T·D up to 2; lambda lengths 1 to 3)
GAVE_UP = ("counterexample", "gave up")
"""Cache key set once an extra round trip failed: no further search in the run, so a hang costs one timeout."""

Case = TypeVar("Case", AttentionCase, LambdaCase)


@dataclass(frozen=True)
class Failure:
    """One result outside its tolerance: which result, what came back, the truth, the worst element."""

    with_respect_to: str | None  # None for the output, else the input whose gradient this is
    got: np.ndarray
    truth: Truth
    worst: tuple[int, ...]


Judgement = Union[Failure, str, None]
"""A Failure; a sentence saying why the values could not be compared; or None (within tolerance)."""


def attention_sizes(t: int, d: int) -> list[tuple[int, int]]:
    """The (T, D) of the cuts of a [.., t, d] case, smallest first: by T·D, then T."""
    sizes = [(tt, dd) for tt in range(1, min(t, MAX_T) + 1) for dd in range(1, min(d, MAX_D) + 1)]
    return sorted(sizes, key=lambda size: (size[0] * size[1], size[0]))


def cut_attention(case: AttentionCase, b: int, h: int, t: int, d: int) -> AttentionCase:
    """Batch ``b``, head ``h``, the first ``t`` tokens and ``d`` features (value and cotangent: 2d columns)."""

    def part(x: np.ndarray, width: int) -> np.ndarray:
        return x[b : b + 1, h : h + 1, :t, :width].copy()

    q1, k1, q2, k2 = (part(x, d) for x in (case.q1, case.k1, case.q2, case.k2))
    return replace(case, q1=q1, k1=k1, q2=q2, k2=k2, value=part(case.value, 2 * d), cotangent=part(case.cotangent, 2 * d))


def cut_lambda(case: LambdaCase, n: int) -> LambdaCase:
    """The first ``n`` entries of each lambda vector."""
    return replace(case, q1=case.q1[:n].copy(), k1=case.k1[:n].copy(), q2=case.q2[:n].copy(), k2=case.k2[:n].copy())


_CUTS: expected.Memo = {}


def cuts(case: Case, head: tuple[int, int]) -> list[tuple[dict[str, int], Case]]:
    """Every cut of ``case`` with its size, smallest first; attention cuts keep the (batch, head) ``head``.

    The same case objects for the same case and head, for the whole process:
    their truths are then computed once, however many students need them.
    """
    return expected.remember(_CUTS, (case,), lambda: _cuts(case, head), values=head)


def _cuts(case: Case, head: tuple[int, int]) -> list[tuple[dict[str, int], Case]]:
    if isinstance(case, LambdaCase):
        return [({"length": n}, cut_lambda(case, n)) for n in range(1, min(case.q1.size, MAX_LENGTH) + 1)]
    b, h = head
    _, _, t, d = case.q1.shape
    return [({"B": 1, "H": 1, "T": tt, "D": dd}, cut_attention(case, b, h, tt, dd)) for tt, dd in attention_sizes(t, d)]


def first_failing(judgements: Sequence[Judgement]) -> tuple[int, Failure] | None:
    """The first judgement that is a failure, with its position (candidates come smallest first), or None."""
    return next(((i, judged) for i, judged in enumerate(judgements) if isinstance(judged, Failure)), None)


def _exceeds(with_respect_to: str | None, got: np.ndarray, truth: Truth) -> Judgement:
    """A Failure when ``got`` has the truth's shape and some element is outside its allowance."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != truth.values.shape:
        what = "output" if with_respect_to is None else f"gradient with respect to {with_respect_to}"
        return f"the {what} has shape {list(got.shape)}, not {list(truth.values.shape)}"
    ratio = error_ratios(got, truth.values, np.broadcast_to(truth.allowed, got.shape))[1]
    if not (ratio > 1.0).any():
        return None
    return Failure(with_respect_to, got, truth, tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape)))


def output_failure(outcome: Outcome, truth: Truth) -> Judgement:
    """Judge the last call's output against ``truth``."""
    result, problem = tensor_result(outcome, len(outcome.functions) - 1)
    if result is None or result.value is None:
        return problem or "the output's values could not be read"
    return _exceeds(None, result.value, truth)


def gradient_failure(outcome: Outcome, truths: dict[str, Truth], keys: dict[str, int]) -> Judgement:
    """Judge the gradients of ``keys`` (name -> input tensor position); the first one outside tolerance fails."""
    result, problem = tensor_result(outcome, len(outcome.functions) - 1)
    if result is None:
        return problem
    if outcome.backward_error is not None:
        return f"the backward pass failed: {outcome.backward_error}"
    reasons = []
    for key, position in keys.items():
        grad = outcome.grads.get(position)
        if grad is None:
            if (truths[key].values != 0).any():
                reasons.append(f"no gradient reached {key}")
            continue
        judged = _exceeds(key, grad, truths[key])
        if isinstance(judged, Failure):
            return judged
        if judged is not None:
            reasons.append(judged)
    return "; ".join(reasons) or None


def call_text(request: Request) -> tuple[str, list[tuple[TensorInput, str]]]:
    """The request's last call written like Python, and its input tensors named after their parameters.

    Tensors are listed in the order the worker numbers them; those of an
    earlier call (differential_lambda feeding differential_attention) are
    prefixed with its short name, as in ``lambda_q1``, and its result appears
    inline as an argument.
    """
    named: list[tuple[TensorInput, str]] = []
    texts: list[str] = []
    for position, call in enumerate(request.calls):
        positional, keyword, _ = CONTRACT[call.function]
        parameters = [*positional, keyword]
        prefix = "" if position == len(request.calls) - 1 else call.function.removeprefix("differential_") + "_"

        def text(argument: Any, name: str) -> str:
            if isinstance(argument, TensorInput):
                if not any(argument is t for t, _ in named):
                    named.append((argument, prefix + name))
                return next(n for t, n in named if t is argument)
            if isinstance(argument, ResultOf):
                return texts[argument.call]
            return repr(argument)

        words = [text(a, parameters[i] if i < len(parameters) else f"arg{i}") for i, a in enumerate(call.args)]
        words += [f"{name}={text(a, name)}" for name, a in call.kwargs.items()]
        texts.append(f"{call.function}({', '.join(words)})")
    return texts[-1], named


def plain(values: Any) -> Any:
    """Values as nested lists of Python floats (a bare float for 0-dim), non-finite ones as None."""
    array = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(array), array, None).tolist()


def record(request: Request, size: dict[str, int], failure: Failure, searched: int) -> dict[str, Any]:
    """The JSON-safe counterexample of ``failure``, found among ``searched`` cuts (docs/report-schema.md)."""
    call, named = call_text(request)
    truth = failure.truth
    ratio = error_ratios(failure.got, truth.values, np.broadcast_to(truth.allowed, failure.got.shape))[1]
    worst = float(ratio.max())
    return {
        "found": True,
        "note": f"The smallest failing input of the {searched} tried, all cut down from a failing call.",
        "function": request.calls[-1].function,
        "size": size,
        "call": call,
        "inputs": [
            {
                "name": name,
                "shape": list(t.values.shape),
                "dtype": t.dtype,
                "layout": t.layout,
                "requires_grad": t.requires_grad,
                "values": plain(t.values),
            }
            for t, name in named
        ],
        "cotangent": None if request.backward_from is None else plain(request.cotangent),
        "result": "output" if failure.with_respect_to is None else "gradient",
        "with_respect_to": failure.with_respect_to,
        "expected": plain(truth.values),
        "got": plain(failure.got),
        "difference": plain(failure.got - truth.values),
        "allowed": plain(np.broadcast_to(truth.allowed, failure.got.shape)),
        "mismatched": int((ratio > 1.0).sum()),
        "elements": int(ratio.size),
        "worst_ratio": worst if np.isfinite(worst) else None,
        "searched": searched,
    }


def not_found(function: str, sizes: list[dict[str, int]], judgements: Sequence[Judgement]) -> dict[str, Any]:
    """The record saying that no cut fails (and why some could not be compared)."""
    limits = ", ".join(f"{k} ≤ {max(s[k] for s in sizes)}" for k in sizes[-1] if k not in ("B", "H"))
    note = f"None of the {len(sizes)} inputs cut down from a failing call ({limits}) fails"
    reasons = [j for j in judgements if isinstance(j, str)]
    if reasons:
        note += f"; {len(reasons)} could not be compared, for example because {reasons[0]}."
    else:
        note += ": the bug shows only on larger inputs."
    absent = ("size", "call", "inputs", "cotangent", "result", "with_respect_to", "expected", "got", "difference", "allowed")
    empty = dict.fromkeys(absent)
    return {"found": False, "note": note, "function": function, **empty,
            "mismatched": None, "elements": None, "worst_ratio": None, "searched": len(sizes)}  # fmt: skip


def _outcome(grading: GradingContext, set_name: str, index: int, case: Case, grads: bool) -> Outcome:
    """The check's own (memoised) outcome of case ``index``."""
    if isinstance(case, LambdaCase):
        return suite.lambda_outcome(grading, set_name, index, case, grads)
    return suite.attention_outcome(grading, set_name, index, case, grads)


def _elements(case: Case) -> tuple[int, int]:
    """Sort key of a template: T·D, then T (lambda: the vector length)."""
    if isinstance(case, LambdaCase):
        return case.q1.size, case.q1.size
    t, d = case.q1.shape[2:]
    return t * d, t


def shrink(
    grading: GradingContext,
    set_name: str,
    cases: Sequence[Case],
    verdicts: Sequence[Comparison],
    judge: Callable[[Case, Outcome], Judgement],
    grads: bool,
) -> dict[str, Any] | None:
    """The counterexample of a check over ``cases`` (whose per-case ``verdicts`` it made), or None.

    None when every verdict is positive, when no failure is numeric (the call
    raised, crashed or returned another shape), or when the extra round trip
    failed.
    """
    failed = sorted((_elements(case), index) for index, (case, verdict) in enumerate(zip(cases, verdicts)) if not verdict.ok)
    for _, index in failed:  # the smallest failing case with wrong numbers is the template
        case = cases[index]
        failure = judge(case, _outcome(grading, set_name, index, case, grads))
        if isinstance(failure, Failure):
            break
    else:
        return None
    head = (failure.worst[0], failure.worst[1]) if len(failure.worst) == 4 else (0, 0)
    candidates = cuts(case, head)
    requests = [suite.case_request(cut, grads) for _, cut in candidates]
    judgements: list[Judgement] = []
    # Most bugs show on the smallest cuts: those go first, the others only if none of them fails.
    for stage, (start, stop) in enumerate(((0, FIRST_STAGE), (FIRST_STAGE, len(candidates)))):
        if start >= stop:
            break
        key = ("counterexample", set_name, index, grads, head, stage)
        outcomes = grading.memo(key, lambda: invoke_many(grading.worker, requests[start:stop], diagnostic=True, shared=True))
        if outcomes[0].failure is not None:
            grading.cache[GAVE_UP] = outcomes[0].failure
            return None
        judgements += [judge(cut, outcome) for (_, cut), outcome in zip(candidates[start:stop], outcomes)]
        chosen = first_failing(judgements)
        if chosen is not None:
            position, found = chosen
            return record(requests[position], candidates[position][0], found, len(judgements))
    return not_found(requests[0].calls[-1].function, [size for size, _ in candidates], judgements)


def search(
    grading: GradingContext, set_name: str, verdicts: Sequence[Comparison], judge: Callable[[Case, Outcome], Judgement], grads: bool
) -> None:
    """Attach the counterexample of a failed check over the suite's case set ``set_name`` to the running check.

    Nothing happens for a check that passed, or once an extra round trip of
    the run failed (so a submission that hangs costs one timeout at most).
    """
    if all(v.ok for v in verdicts) or GAVE_UP in grading.cache:
        return
    cases = getattr(suite, set_name)(grading.seed)
    grading.explain(counterexample=shrink(grading, set_name, cases, verdicts, judge, grads))


def explain_values(
    grading: GradingContext,
    set_name: str,
    verdicts: Sequence[Comparison],
    truth: Callable[[AttentionCase], Truth] = expected.attention_output,
) -> None:
    """Attach the counterexample of a failed differential_attention value check over case set ``set_name``."""

    def judge(case: AttentionCase, outcome: Outcome) -> Judgement:
        return output_failure(outcome, truth(case))

    search(grading, set_name, verdicts, judge, grads=False)


def explain_gradients(grading: GradingContext, set_name: str, verdicts: Sequence[Comparison], keys: tuple[str, ...]) -> None:
    """Attach the counterexample of a failed differential_attention gradient check of the gradients named ``keys``."""

    def judge(case: AttentionCase, outcome: Outcome) -> Judgement:
        wanted = {name: position for name, position in suite.gradient_positions(case).items() if name in keys}
        return gradient_failure(outcome, expected.attention_grads(case), wanted)

    search(grading, set_name, verdicts, judge, grads=True)


def explain_lambda(grading: GradingContext, verdicts: Sequence[Comparison], grads: bool = False) -> None:
    """Attach the counterexample of a failed differential_lambda value (or, with ``grads``, gradient) check."""

    def judge(case: LambdaCase, outcome: Outcome) -> Judgement:
        if grads:
            return gradient_failure(outcome, expected.lambda_grads(case), suite.gradient_positions(case))
        return output_failure(outcome, expected.lambda_value(case))

    search(grading, "lambda_values", verdicts, judge, grads)
