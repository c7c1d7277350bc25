"""Case sets in one round trip: each case still made, timed and counted as if it were sent alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import attention_arguments

from grader.core.invoke import Outcome, invoke
from grader.core.plugin import GradingContext
from grader.exercises.diffattn import expected, oracle, suite
from grader.toolkit.casesets import CaseSet
from grader.worker.client import ForkServer, Worker, WorkerLimits

SEED = 3
SET = suite.attention_causal  # T = 5, 1, 32, 33, 127, 255, 303, 16 for this seed, in this order
LENGTHS = [case.q1.shape[2] for case in suite.attention_causal(SEED)]
FUNCTIONS = {name: {"kind": "callable", "parameters": None} for name in (suite.LAMBDA, suite.ATTENTION)}


class OracleWorker:
    """Answers differential_attention calls with the oracle (no torch), raising for T = ``raise_at``."""

    def __init__(self, raise_at: int | None = None) -> None:
        self.raise_at = raise_at
        self.trips: list[tuple[str, int]] = []  # ("run" or "run_each", requests) per round trip

    def run(self, header: dict[str, Any], arrays: list[np.ndarray], *, diagnostic: bool = False, limit: Any = None) -> tuple[dict[str, Any], list[np.ndarray]]:
        """One request: every call's output as an array, or the error it raised."""
        self.trips.append(("run", 1))
        return self.answer(header, arrays)

    def run_each(self, requests: list[tuple[dict[str, Any], list[np.ndarray]]], limits: Any = None) -> list[tuple[dict[str, Any], list[np.ndarray]]]:
        """Several requests in one trip, one answer each."""
        self.trips.append(("run_each", len(requests)))
        return [self.answer(header, arrays) for header, arrays in requests]

    def answer(self, header: dict[str, Any], arrays: list[np.ndarray]) -> tuple[dict[str, Any], list[np.ndarray]]:
        tensors = [arrays[t["array"]] for t in header["tensors"]]
        replies: list[dict[str, Any]] = []
        out: list[np.ndarray] = []
        for call in header["calls"]:
            inputs, coefficient, causal = attention_arguments(call, tensors)
            if inputs[0].shape[2] == self.raise_at:
                replies.append({"status": "raised", "error": {"type": "ValueError", "message": "too long", "traceback": ""}})
                continue
            out.append(oracle.differential_attention(*inputs, coefficient, causal))
            replies.append({"status": "returned", "type": "torch.Tensor", "is_tensor": True, "exact_tensor": True, "repr": "",
                            "shape": list(out[-1].shape), "dtype": "float64", "device": "cpu", "layout": "torch.strided",
                            "requires_grad": False, "has_grad_fn": False, "value": len(out) - 1})  # fmt: skip
        return {"status": "ok", "calls": replies}, out


def outcomes_of(worker: Any, case_set: CaseSet[Any] = SET, grads: bool = False) -> list[Outcome]:
    """Every case of a set, asked for the way the checks ask."""
    grading = GradingContext(seed=SEED, worker=worker, functions=FUNCTIONS)
    found = []
    for i, case in enumerate(case_set(SEED)):
        ask = suite.lambda_outcome if case_set.name.startswith("lambda") else suite.attention_outcome
        found.append(ask(grading, case_set, i, case, grads))
    return found


def test_a_case_set_goes_in_one_round_trip_with_the_same_outcomes() -> None:
    """Thirteen cases, one trip; each outcome holds the same values as the case asked for alone."""
    worker = OracleWorker()
    together = outcomes_of(worker)
    assert worker.trips == [("run_each", len(LENGTHS))] and len(set(LENGTHS)) == len(LENGTHS) == 13
    for case, found in zip(suite.attention_causal(SEED), together):
        alone = invoke(OracleWorker(), suite.attention_request(case))  # type: ignore[arg-type]
        assert found.failure is None and len(found.results) == 1
        assert np.array_equal(found.results[0].value, alone.results[0].value)


def test_a_case_that_raises_is_not_asked_for_again() -> None:
    """A raising call is that case's outcome, as alone: nothing is sent twice."""
    worker = OracleWorker(raise_at=LENGTHS[1])
    found = outcomes_of(worker)
    assert worker.trips == [("run_each", len(LENGTHS))]
    raised = [o.results[0].raised for o in found]
    assert raised[1] is not None and raised[1]["message"] == "too long"
    assert raised[:1] + raised[2:] == [None] * (len(LENGTHS) - 1)


@pytest.fixture(scope="module")
def forks() -> ForkServer:
    """One fork server for the real workers of this module."""
    with ForkServer() as server:
        yield server


def real_worker(source: str, forks: ForkServer, **limits: Any) -> Worker:
    """A loaded worker for ``source``."""
    worker = Worker(source, "submission.py", [suite.LAMBDA, suite.ATTENTION], WorkerLimits(**limits), forks)
    worker.load()
    return worker


ATTENTION = """
import time, torch
def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    {before}
    d = q1.shape[-1] ** 0.5
    mask = torch.ones(q1.shape[2], q1.shape[2], dtype=torch.bool).tril() if causal else None
    def attend(q, k):
        s = q @ k.transpose(-1, -2) / d
        return (s.masked_fill(~mask, float("-inf")) if mask is not None else s).softmax(-1)
    return (attend(q1, k1) - coefficient * attend(q2, k2)) @ value
"""


def test_a_hang_costs_its_case_and_the_next_cases_run_alone(forks: ForkServer) -> None:
    """The second case hangs: counted once, as alone; the cases after it are asked for one by one after a restart."""
    hang = f"if q1.shape[2] == {LENGTHS[1]}:\n        time.sleep(60)"
    worker = real_worker(ATTENTION.format(before=hang), forks, call_timeout_s=2.0)
    try:
        found = outcomes_of(worker)
    finally:
        worker.close()
    assert [o.failure is None for o in found] == [True, False] + [True] * (len(LENGTHS) - 2)
    assert "did not finish within 2 s" in str(found[1].failure)
    assert worker.restarts == 1


def test_a_stateful_submission_is_called_once_per_case(forks: ForkServer) -> None:
    """Raising the first time each length is seen: every case raises, as alone, and each call prints once."""
    before = "print('call', q1.shape[2])\n    if q1.shape[2] not in SEEN:\n        SEEN.add(q1.shape[2])\n        raise ValueError('first time')"
    worker = real_worker("SEEN = set()\n" + ATTENTION.format(before=before), forks)
    try:
        found = outcomes_of(worker)
    finally:
        worker.close()
    assert all(o.results[0].raised is not None and o.results[0].raised["message"] == "first time" for o in found)
    assert worker.captured()["stdout"].count("call") == len(found)


BUFFERED_LAMBDA = """
import torch
BUFFER = {}
def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    value = torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init
    if value.requires_grad:
        return value
    with torch.inference_mode(False):  # a normal tensor, whichever mode the call that creates it is made in
        out = BUFFER.setdefault(value.dtype, torch.zeros((), dtype=value.dtype))
    out.copy_(value)
    return out
"""


def test_an_output_buffer_reused_by_later_calls_is_read_when_its_call_returns(forks: ForkServer) -> None:
    """Every case reads its own value, although the submission returns one tensor per dtype and overwrites it."""
    worker = real_worker(BUFFERED_LAMBDA, forks)
    try:
        found = outcomes_of(worker, suite.lambda_values)
    finally:
        worker.close()
    for case, outcome in zip(suite.lambda_values(SEED), found):
        truth = expected.lambda_value(case)
        assert abs(float(outcome.results[0].value) - float(truth.values)) <= float(truth.allowed)
