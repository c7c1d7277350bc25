"""Case sets in one round trip: kept only when every call returned, else each case is asked for alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.diffattn import oracle, suite
from grader.invoke import invoke
from grader.plugin import GradingContext
from grader.worker.client import ForkServer, Worker, WorkerLimits

SEED = 3
SET = "attention_causal"


class OracleWorker:
    """Answers differential_attention calls with the oracle (no torch), raising for T = ``raise_at``."""

    def __init__(self, raise_at: int | None = None) -> None:
        self.raise_at = raise_at
        self.trips: list[tuple[bool, int]] = []  # (tentative, number of calls) per round trip

    def run(self, header: dict[str, Any], arrays: list[np.ndarray], *, diagnostic: bool = False) -> tuple[dict[str, Any], list[np.ndarray]]:
        """One round trip: every call's output as an array, or the error it raised."""
        self.trips.append((diagnostic, len(header["calls"])))
        tensors = [arrays[t["array"]] for t in header["tensors"]]
        replies: list[dict[str, Any]] = []
        out: list[np.ndarray] = []
        for call in header["calls"]:
            inputs = [tensors[a["tensor"]] for a in call["args"][:5]]
            if inputs[0].shape[2] == self.raise_at:
                replies.append({"status": "raised", "error": {"type": "ValueError", "message": "too long", "traceback": ""}})
                continue
            coefficient = call["args"][5]
            coefficient = float(tensors[coefficient["tensor"]]) if "tensor" in coefficient else coefficient["value"]
            causal = call["kwargs"].get("causal", {"value": True})["value"]
            out.append(oracle.differential_attention(*inputs, coefficient, causal))
            replies.append({"status": "returned", "type": "torch.Tensor", "is_tensor": True, "exact_tensor": True, "repr": "",
                            "shape": list(out[-1].shape), "dtype": "float64", "device": "cpu", "layout": "torch.strided",
                            "requires_grad": False, "has_grad_fn": False, "value": len(out) - 1})  # fmt: skip
        return {"status": "ok", "calls": replies}, out


def outcomes_of(worker: Any) -> list[Any]:
    """Every case of the set, asked for the way the checks ask."""
    functions = {suite.ATTENTION: {"kind": "callable", "parameters": None}}
    grading = GradingContext(seed=SEED, worker=worker, functions=functions)
    return [suite.attention_outcome(grading, SET, i, case) for i, case in enumerate(suite.attention_causal(SEED))]


def test_a_working_submission_answers_a_case_set_in_one_tentative_round_trip() -> None:
    """Six cases, one trip; each outcome holds the same values as the case asked for alone."""
    worker = OracleWorker()
    together = outcomes_of(worker)
    assert worker.trips == [(True, 6)]
    for case, found in zip(suite.attention_causal(SEED), together):
        alone = invoke(OracleWorker(), suite.attention_request(case))  # type: ignore[arg-type]
        assert found.failure is None and len(found.results) == 1
        assert np.array_equal(found.results[0].value, alone.results[0].value)


def test_a_case_that_raises_sends_every_case_alone() -> None:
    """One raising call discards the trip: six single trips follow, and only that case records the error."""
    worker = OracleWorker(raise_at=37)
    found = outcomes_of(worker)
    assert worker.trips == [(True, 6)] + [(False, 1)] * 6
    raised = [o.results[0].raised for o in found]
    assert raised[5] is not None and raised[5]["message"] == "too long"
    assert raised[:5] == [None] * 5


HANGS_WHEN_LONG = """
import torch
def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    if q1.shape[2] > 30:
        while True:
            pass
    d = q1.shape[-1] ** 0.5
    mask = torch.ones(q1.shape[2], q1.shape[2], dtype=torch.bool).tril() if causal else None
    def attend(q, k):
        s = q @ k.transpose(-1, -2) / d
        return (s.masked_fill(~mask, float("-inf")) if mask is not None else s).softmax(-1)
    return (attend(q1, k1) - coefficient * attend(q2, k2)) @ value
"""


def test_a_hang_in_one_case_costs_that_case_only() -> None:
    """The tentative trip's timeout is not counted: with one failure allowed, the short cases still run."""
    limits = WorkerLimits(call_timeout_s=2.0, max_failures_per_function=1)
    with ForkServer() as forks:
        worker = Worker(HANGS_WHEN_LONG, "hangs.py", [suite.ATTENTION], limits, forks)
        try:
            worker.load()
            functions = {suite.ATTENTION: {"kind": "callable", "parameters": None}}
            grading = GradingContext(seed=SEED, worker=worker, functions=functions)
            found = [suite.attention_outcome(grading, SET, i, case) for i, case in enumerate(suite.attention_causal(SEED))]
        finally:
            worker.close()
    assert [o.failure is None for o in found] == [True] * 5 + [False]
    assert "did not finish" in str(found[5].failure)
