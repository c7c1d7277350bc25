"""The stable-softmax exercise's cases and the worker requests that evaluate them."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from grader.core.invoke import Call, Outcome, Request, TensorInput, invoke_many
from grader.core.plugin import GradingContext
from grader.toolkit.compare import Comparison, combine, compare
from softmax_exercise.oracle import softmax_rows

UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}


@dataclass(frozen=True)
class Case:
    """One call: the logits (exact in ``dtype``) and the axis to normalise."""

    x: np.ndarray
    dtype: str
    dim: int


def draw(seed: int, name: str, scale: float) -> list[Case]:
    """Six cases of ``name``'s own stream: shapes up to 4 x 33, both dtypes, both axes, logits up to ``scale``."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    found = []
    for index in range(6):
        dtype = ("float32", "float64")[index % 2]
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 34)))
        x = (rng.uniform(-scale, scale, size=shape)).astype(dtype).astype(np.float64)
        found.append(Case(x, dtype, -1 if index < 4 else 0))
    return found


def truth(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """The expected output and the error allowed on each element (a few rounded operations per term)."""
    moved = np.moveaxis(case.x, case.dim, -1)
    expected = np.moveaxis(softmax_rows(moved), -1, case.dim)
    terms = moved.shape[-1] + 4
    return expected, 8 * terms * UNIT_ROUNDOFF[case.dtype] * (np.abs(expected) + UNIT_ROUNDOFF[case.dtype])


def outcomes(grading: GradingContext, name: str, scale: float) -> list[tuple[Case, Outcome]]:
    """Every case of ``name``, run once per submission (checks of both tiers read them)."""

    def run() -> list[tuple[Case, Outcome]]:
        cases = draw(grading.seed, name, scale)
        requests = [Request((Call("stable_softmax", (TensorInput(c.x, c.dtype),), {"dim": c.dim}),)) for c in cases]
        return list(zip(cases, invoke_many(grading.worker, requests))) if grading.worker is not None else []

    return grading.memo(("stable_softmax", name), run)


def problem(outcome: Outcome, case: Case) -> str | None:
    """Why this call's result cannot be compared: it failed, raised, or is not a tensor of the input's shape and dtype."""
    if outcome.failure is not None:
        return outcome.failure
    result = outcome.results[0]
    if result.raised is not None:
        return f"stable_softmax raised {result.raised['type']}: {result.raised['message']}"
    if not result.exact_tensor:
        return f"stable_softmax returned {result.type_name}; expected a torch.Tensor"
    if result.shape != case.x.shape or result.dtype != case.dtype:
        return (f"stable_softmax returned shape {list(result.shape or ())} {result.dtype}; "
                f"expected the input's shape {list(case.x.shape)} and dtype {case.dtype}")  # fmt: skip
    return None


def values_verdict(found: list[tuple[Case, Outcome]]) -> Comparison:
    """Each output against the oracle, within its allowance."""
    verdicts = []
    for case, outcome in found:
        expected, allowed = truth(case)
        why = problem(outcome, case)
        what = f"stable_softmax(x of shape {list(case.x.shape)}, {case.dtype}, dim={case.dim})"
        if why is not None:
            verdicts.append(Comparison(False, f"{why}\n(in {what})", None))
        else:
            verdicts.append(compare(what, outcome.results[0].value, expected, allowed))
    return combine(verdicts)
