"""Truths computed by two threads at once: a single run's oracle thread and its checks share every result, computed once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.toolkit.casesets import drawn_once
from grader.toolkit.tolerance import Memo, remember


def test_a_result_asked_for_by_two_threads_is_computed_once() -> None:
    """The second thread waits for the first one's computation and gets the very same object."""
    store: Memo = {}
    key_object = object()
    calls: list[str] = []

    def slow() -> list[str]:
        calls.append(threading.current_thread().name)
        time.sleep(0.2)
        return ["result"]

    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = (pool.submit(remember, store, (key_object,), slow) for _ in range(2))
        got = first.result(), second.result()
    assert len(calls) == 1
    assert got[0] is got[1] and got[0] == ["result"]


def test_a_computation_that_raises_is_made_again_by_the_thread_that_waited() -> None:
    """Nothing is stored for a failure: the waiting thread computes the result itself, and meets its own outcome."""
    store: Memo = {}
    key_object = object()
    started = threading.Event()
    attempts: list[int] = []

    def fails_first() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            started.set()
            time.sleep(0.2)
            raise ValueError("the first attempt fails")
        return 42

    with ThreadPoolExecutor(max_workers=2) as pool:
        failing = pool.submit(remember, store, (key_object,), fails_first)
        started.wait()
        waiting = pool.submit(remember, store, (key_object,), fails_first)
        with pytest.raises(ValueError, match="first attempt"):
            failing.result()
        assert waiting.result() == 42
    assert len(attempts) == 2
    assert remember(store, (key_object,), lambda: -1) == 42


def test_a_set_drawn_by_two_threads_at_once_is_one_set_of_objects() -> None:
    """Both threads get the same list (the case objects key the truths), drawn once."""
    draws: list[int] = []

    @drawn_once
    def draw(seed: int) -> list[object]:
        draws.append(seed)
        time.sleep(0.2)
        return [object()]

    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = (pool.submit(draw, 7) for _ in range(2))
        assert first.result() is second.result()
    assert draws == [7]
    assert draw(8) is not draw(7)


def test_a_computation_that_asks_for_its_own_key_computes_it_instead_of_waiting_for_itself() -> None:
    """Re-entering the same key in the same thread computes again (as without threads) rather than hanging."""
    store: Memo = {}
    key_object = object()
    depth: list[int] = []

    def nested() -> int:
        depth.append(1)
        return 1 if len(depth) > 1 else 1 + remember(store, (key_object,), nested)

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(remember, store, (key_object,), nested).result(timeout=10) == 2
    assert remember(store, (key_object,), lambda: -1) == 2
