"""The toy experiment: a shared value offset comes out scaled by exactly 1 - λ.

Four tokens carry values ``signal_t + offset``: a distinguishable signal per
token plus one offset shared by all of them. Rows of the signed map sum to
1 - λ, so the offset's contribution to every output row is (1 - λ)·offset,
whatever the maps look like. Sweeping λ over [0, 1], the experiment measures
that factor (the offset response) from the outputs with and without the
offset, and how much of the signal the two differing maps retain, relative to
λ = 0. The same sweep produces the reference's preview curve and the graded
curve of a submission.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from grader.core.exercise import ExperimentUnavailable
from grader.core.invoke import Outcome, Request, invoke
from grader.exercises.diffattn import cases, expected
from grader.exercises.diffattn.cases import AttentionCase
from grader.exercises.diffattn.expected import Truth
from grader.exercises.diffattn.suite import ATTENTION, attention_request
from grader.exercises.diffattn.verdicts import tensor_result, unreadable
from grader.toolkit.compare import Comparison, combine, compare
from grader.worker.client import Worker

LAMBDAS = tuple(round(0.1 * i, 10) for i in range(11))
TOKENS = 4
WIDTH = 4  # D; values are 2D = 8 wide


@dataclass(frozen=True)
class Sweep:
    """One pass over LAMBDAS: the cases with and without the offset, and the outcome."""

    with_offset: list[AttentionCase]
    signal_only: list[AttentionCase]
    offset: np.ndarray
    outcome: Outcome


def toy_case(seed: int) -> tuple[AttentionCase, np.ndarray]:
    """The four-token sequence (values are the signal alone) and the shared offset."""
    rng = cases.generator(seed, "toy_experiment")
    case = cases.attention_case(rng, (1, 1, TOKENS, WIDTH), "float64", True, note="toy experiment")
    offset = cases.exact(rng.uniform(1.0, 3.0, 2 * WIDTH) * rng.choice([-1.0, 1.0], 2 * WIDTH), "float64")
    return case, offset


@functools.lru_cache(maxsize=4)  # one set of case objects per seed, so that their truths are computed once
def sweep_cases(seed: int) -> tuple[list[AttentionCase], list[AttentionCase], np.ndarray]:
    """The cases at every λ with the offset, the same without it, and the offset."""
    base, offset = toy_case(seed)
    signal_only = [replace(base, coefficient=lam) for lam in LAMBDAS]
    with_offset = [replace(case, value=case.value + offset, note="toy experiment, values + offset") for case in signal_only]
    return with_offset, signal_only, offset


def offset_contribution(shifted: AttentionCase, plain: AttentionCase) -> Truth:
    """What output(values + offset) - output(values) must be for the one sequence: (1 - λ)·offset in every row."""
    truth = expected.shared_offset_difference(plain, shifted)
    return Truth(truth.values[0, 0], truth.allowed[0, 0])


def prepare(seed: int) -> None:
    """Compute the oracle's outputs for the sweep of ``seed`` once (a batch does, before it forks)."""
    with_offset, signal_only, _ = sweep_cases(seed)
    for case in with_offset + signal_only:
        expected.attention_output(case)


def sweep(worker: Worker, seed: int) -> Sweep:
    """Run differential_attention at every λ, with and without the offset, in one round trip."""
    with_offset, signal_only, offset = sweep_cases(seed)
    calls = tuple(attention_request(case).calls[0] for case in with_offset + signal_only)
    return Sweep(with_offset, signal_only, offset, invoke(worker, Request(calls)))


def _outputs(result: Sweep) -> tuple[list[np.ndarray | None], list[Comparison]]:
    """The [T, 2D] output of every call (None where it failed) and the problems found."""
    outputs, problems = [], []
    for index, case in enumerate(result.with_offset + result.signal_only):
        returned, problem = tensor_result(result.outcome, index)
        if returned is not None and returned.value is None:
            problem = unreadable(returned)
        elif returned is not None and returned.value.shape != case.value.shape:
            problem = f"expected an output of shape {list(case.value.shape)}, got {list(returned.shape or ())}"
        outputs.append(None if problem else returned.value[0, 0].astype(np.float64))
        if problem:
            problems.append(Comparison(False, problem, None, f"{ATTENTION}({case.label()})"))
    return outputs, problems


def curves(result: Sweep) -> dict[str, list[float | None]]:
    """Offset response (should be 1 - λ) and signal retained (relative to λ = 0) per λ."""
    outputs, _ = _outputs(result)
    n = len(LAMBDAS)
    offset = result.offset
    response: list[float | None] = []
    retained: list[float | None] = []
    reference = outputs[n]
    for shifted, plain in zip(outputs[:n], outputs[n:]):
        if shifted is None or plain is None:
            response.append(None)
            retained.append(None)
            continue
        response.append(_finite(float(((shifted - plain) @ offset).sum() / (TOKENS * offset @ offset))))
        base = None if reference is None else float(np.linalg.norm(reference))
        retained.append(_finite(float(np.linalg.norm(plain)) / base) if base else None)
    return {"offset_response": response, "signal_retained": retained}


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def verdict(result: Sweep) -> Comparison:
    """At every λ, the offset's contribution must equal (1 - λ)·offset in every row, and the signal's output the oracle's.

    The second half keeps the check from being earned without attention: (1 - λ)·value alone passes the first.
    """
    outputs, problems = _outputs(result)
    if problems:
        return combine(problems)
    n = len(LAMBDAS)
    found = []
    for lam, shifted_case, plain_case, shifted, plain in zip(
        LAMBDAS, result.with_offset, result.signal_only, outputs[:n], outputs[n:]
    ):
        truth = offset_contribution(shifted_case, plain_case)
        found.append(compare(f"toy experiment at λ={lam:g}: offset contribution, output(values + offset) - output(values)", shifted - plain, truth.values, truth.allowed))
        signal = expected.attention_output(plain_case)
        found.append(compare(f"toy experiment at λ={lam:g}: output(values), the signal alone", plain, signal.values[0, 0], signal.allowed[0, 0]))
    return combine(found)


def shared_fields(seed: int) -> dict[str, Any]:
    """The parts of the report's toy_experiment that do not depend on who ran it."""
    _, offset = toy_case(seed)
    return {
        "lambdas": list(LAMBDAS),
        "offset": [float(x) for x in offset],
        "expected_offset_response": [1.0 - lam for lam in LAMBDAS],
    }


def experiment(worker: Worker, seed: int) -> dict[str, Any]:
    """The curves from ``worker`` (used for the reference's preview)."""
    result = sweep(worker, seed)
    if result.outcome.failure is not None:
        raise ExperimentUnavailable(result.outcome.failure)
    return curves(result)
