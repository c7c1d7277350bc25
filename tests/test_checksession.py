"""One pytest session grades many submissions: each gets only its own records, and a broken session says so."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from pytest_jsonreport.plugin import JSONReport

from grader.core.checksession import CheckSessionError, RunChecks, run_session
from grader.core.plugin import GradingContext, GradingPlugin
from grader.exercises.diffattn import exercise

TIERS = {"T1", "T2", "T3"}


def unloadable(message: str, seed: int = 1) -> GradingContext:
    """A submission that did not load: every check fails with ``message`` without touching a worker."""
    return GradingContext(seed=seed, worker=None, functions={}, load_failure=message)


def messages(records: list[dict[str, Any]]) -> set[str]:
    """The distinct messages of a run's graded checks."""
    return {r["metadata"]["message"] for r in records if r.get("metadata", {}).get("tier")}


def test_each_submission_gets_only_its_own_records() -> None:
    """Three submissions in one session: each run returns every check once, with that submission's message only."""

    def body(run: RunChecks) -> list[list[dict[str, Any]]]:
        return [run(unloadable(f"problem {i}")) for i in range(3)]

    runs = run_session(exercise(), TIERS, body)
    counts = {len(records) for records in runs}
    assert len(counts) == 1 and counts.pop() >= 20
    assert [messages(records) for records in runs] == [{"problem 0"}, {"problem 1"}, {"problem 2"}]
    assert all(r["outcome"] == "failed" for records in runs for r in records if r.get("metadata", {}).get("tier"))


def test_a_long_session_keeps_one_report_plugin() -> None:
    """Fifty submissions leave one pytest-json-report plugin alive, not one per submission."""

    def alive() -> int:
        gc.collect()
        return sum(issubclass(type(o), JSONReport) for o in gc.get_objects())  # type(): no object's __class__ runs

    def body(run: RunChecks) -> int:
        for i in range(50):
            run(unloadable(f"problem {i}"))
        return alive()

    before = alive()
    assert run_session(exercise(), TIERS, body) - before == 1


def test_an_internal_error_stops_the_session_for_every_later_submission(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault that escapes pytest's handling of a check fails that run and every later one with CheckSessionError."""
    original = GradingPlugin.pytest_json_runtest_metadata

    def faulty(self: GradingPlugin, item: pytest.Item, call: pytest.CallInfo[None]) -> dict[str, Any]:
        if self.context.seed == 666:
            raise RuntimeError("a fault in a hook")
        return original(self, item, call)

    monkeypatch.setattr(GradingPlugin, "pytest_json_runtest_metadata", faulty)
    outcomes: list[str] = []

    def body(run: RunChecks) -> list[str]:
        for seed in (1, 666, 2):
            try:
                run(unloadable("problem", seed))
                outcomes.append("graded")
            except CheckSessionError as exc:
                outcomes.append(str(exc))
        return outcomes

    run_session(exercise(), TIERS, body)
    assert outcomes[0] == "graded"
    assert outcomes[1] == "the checks stopped with an internal error (RuntimeError: a fault in a hook)"
    assert outcomes[2].startswith("an earlier internal error stopped this check session")
