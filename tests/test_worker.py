"""The worker boundary: arrays only, crashes and hangs contained, restarts, broken files graded 0."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, grade

from grader.core.invoke import Call, Request, TensorInput, invoke
from grader.worker import protocol
from grader.worker.client import ForkServer, Worker, WorkerLimits

FUNCTIONS = ["differential_lambda", "differential_attention"]
MISBEHAVING = """
import os, sys, time, torch
def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    print("lambda was called")
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init
def crash():
    os._exit(7)
def hang():
    while True:
        pass
def leave():
    raise SystemExit(0)
def hoard():
    raise MemoryError("no room")
"""


@pytest.fixture(scope="module")
def forks() -> ForkServer:
    """One fork server for the workers of this module."""
    with ForkServer() as server:
        yield server


@pytest.fixture(scope="module")
def worker(forks: ForkServer) -> Worker:
    """One worker on a file with a correct lambda and functions that crash, hang or exit."""
    running = Worker(MISBEHAVING, "misbehaving.py", FUNCTIONS + ["crash"], WorkerLimits(call_timeout_s=3, max_restarts=3), forks)
    yield running
    running.close()


def _lambda_call(worker: Worker) -> float:
    vectors = tuple(TensorInput(np.array([0.5, -0.25]), "float64") for _ in range(4))
    outcome = invoke(worker, Request((Call("differential_lambda", vectors),)))
    assert outcome.failure is None, outcome.failure
    return float(outcome.results[0].value)


def test_load_reports_which_functions_exist(worker: Worker) -> None:
    """The load reply says which named functions are callable and which are missing."""
    functions = worker.load()["functions"]
    assert functions["differential_lambda"]["kind"] == "callable"
    assert functions["differential_attention"] == {"kind": "missing"}
    assert [p["name"] for p in functions["differential_lambda"]["parameters"]] == ["q1", "k1", "q2", "k2", "lambda_init"]


WRAPPED = """
import functools


def _keyword_causal(fn):
    @functools.wraps(fn)
    def inner(q1, k1, q2, k2, value, coefficient, *extra, causal=True):
        return fn(q1, k1, q2, k2, value, coefficient, causal=causal)
    return inner


@_keyword_causal
def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return value
"""


def test_a_decorated_function_is_described_by_the_parameters_its_callers_bind(forks: ForkServer) -> None:
    """A functools.wraps wrapper reports its own parameters (a `*extra` before causal), not those of the function it wraps."""
    wrapped = Worker(WRAPPED, "wrapped.py", ["differential_attention"], WorkerLimits(call_timeout_s=10), forks)
    try:
        parameters = wrapped.load()["functions"]["differential_attention"]["parameters"]
    finally:
        wrapped.close()
    assert [(p["name"], p["kind"]) for p in parameters][5:] == [("coefficient", "POSITIONAL_OR_KEYWORD"), ("extra", "VAR_POSITIONAL"),
                                                                 ("causal", "KEYWORD_ONLY")]  # fmt: skip


def test_values_come_back_as_arrays(worker: Worker) -> None:
    """A plain call returns its value: exp(0.3125) - exp(0.3125) + 0.2 = 0.2."""
    assert _lambda_call(worker) == pytest.approx(0.2, abs=1e-15)


def test_crash_fails_the_call_and_the_worker_restarts(worker: Worker) -> None:
    """os._exit inside a call becomes a failure naming the exit status; the next call works."""
    before = worker.restarts
    outcome = invoke(worker, Request((Call("crash"),)))
    assert outcome.failure == "the worker process ended during the call (exit status 7)"
    assert _lambda_call(worker) == pytest.approx(0.2, abs=1e-15)
    assert worker.restarts == before + 1


def test_hang_times_out_and_the_worker_restarts(worker: Worker) -> None:
    """An infinite loop is stopped at the call timeout; grading continues."""
    outcome = invoke(worker, Request((Call("hang"),)))
    assert outcome.failure == "the call did not finish within 3 s; the worker was stopped"
    assert _lambda_call(worker) == pytest.approx(0.2, abs=1e-15)


def test_system_exit_in_a_call_is_an_ordinary_exception(worker: Worker) -> None:
    """SystemExit raised by submitted code is reported as raised, and the worker stays up."""
    outcome = invoke(worker, Request((Call("leave"),)))
    assert outcome.failure is None
    assert outcome.results[0].raised["type"] == "SystemExit"


def test_output_is_captured(worker: Worker) -> None:
    """What the submission prints is kept for the report."""
    _lambda_call(worker)
    assert "lambda was called" in worker.captured()["stdout"]


def test_a_function_that_keeps_crashing_is_not_called_again(forks: ForkServer) -> None:
    """After two crashes a function fails at once; other functions still run."""
    worker = Worker(MISBEHAVING, "misbehaving.py", FUNCTIONS, WorkerLimits(call_timeout_s=3), forks)
    try:
        messages = [invoke(worker, Request((Call("crash"),))).failure for _ in range(3)]
        assert _lambda_call(worker) == pytest.approx(0.2, abs=1e-15)
    finally:
        worker.close()
    assert messages[2] == "not run: crash already crashed, hung or raised MemoryError in the worker 2 times"


def test_a_function_that_keeps_running_out_of_memory_is_not_called_again(forks: ForkServer) -> None:
    """A MemoryError (the worker's memory limit reached) counts as a crash does: after two, the function fails at once."""
    worker = Worker(MISBEHAVING, "misbehaving.py", FUNCTIONS, WorkerLimits(call_timeout_s=3), forks)
    try:
        outcomes = [invoke(worker, Request((Call("hoard"),))) for _ in range(3)]
        assert _lambda_call(worker) == pytest.approx(0.2, abs=1e-15)
    finally:
        worker.close()
    assert [o.failure is None and (o.results[0].raised or {}).get("type") for o in outcomes[:2]] == ["MemoryError", "MemoryError"]
    assert outcomes[2].failure == "not run: hoard already crashed, hung or raised MemoryError in the worker 2 times"


def test_restart_cap_stops_endless_crashes(forks: ForkServer) -> None:
    """After max_restarts restarts, further calls fail at once without a new worker."""
    limits = WorkerLimits(call_timeout_s=3, max_restarts=1, max_failures_per_function=9)
    worker = Worker(MISBEHAVING, "misbehaving.py", FUNCTIONS, limits, forks)
    try:
        messages = [invoke(worker, Request((Call("crash"),))).failure for _ in range(3)]
    finally:
        worker.close()
    assert messages[-1] == "not run: the worker was already restarted 1 times"


def _forged(header: dict, body: bytes = b"") -> io.BytesIO:
    """A message with a hand-written header (its "arrays" descriptions as given) and body."""
    payload = json.dumps(header).encode()
    return io.BytesIO(len(payload).to_bytes(4, "big") + payload + body)


def test_protocol_round_trips_plain_arrays() -> None:
    """float32, float64, int, bool and 0-dim arrays come back equal, with their dtype and shape."""
    sent = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(2.5), np.array([True, False]), np.arange(3)[::-1]]
    buffer = io.BytesIO()
    protocol.write_message(buffer, {"status": "ok"}, sent)
    buffer.seek(0)
    header, got = protocol.read_message(buffer)
    assert header == {"status": "ok"}
    assert [(g.dtype, g.shape) for g in got] == [(a.dtype, a.shape) for a in sent]
    assert all(np.array_equal(g, a) for g, a in zip(got, sent))


@pytest.mark.parametrize(
    ("description", "problem"),
    [
        (["|O", [1]], "array dtype must be one of"),
        ([">f8", [1]], "array dtype must be one of"),
        (["<U4", [1]], "array dtype must be one of"),
        (["<f8", [-1]], "array shape must be at most 32 non-negative ints"),
        (["<f8", [1.5]], "array shape must be at most 32 non-negative ints"),
        (["<f8", [1] * 33], "array shape must be at most 32 non-negative ints"),
        (["<f8"], "an array description must be [dtype, shape]"),
        (["<f8", [2**24]], "message exceeds the limit"),
        (["<f8", [2**20, 2**20]], "exceeds any limit"),
    ],
    ids=["object", "big-endian", "string", "negative", "fraction", "too-many-dims", "no-shape", "oversized", "absurd"],
)
def test_protocol_refuses_arrays_that_are_not_plain_numbers(description: list, problem: str) -> None:
    """Objects, strings, foreign byte orders, odd shapes and oversized arrays are refused before any byte is read."""
    with pytest.raises(protocol.ProtocolError, match=re.escape(problem)):
        protocol.read_message(_forged({"status": "ok", "arrays": [description]}, b"\0" * 64))


def test_protocol_reports_a_closed_channel() -> None:
    """A truncated message raises PeerClosed, never hangs or returns half a message."""
    with pytest.raises(protocol.PeerClosed):
        protocol.read_message(io.BytesIO(b"\x00\x00\x00\x10{}"))


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("def differential_lambda(:\n    pass\n", "SyntaxError at line 1, column 25"),
        ("import not_a_real_module_xyz\n", "importing the submission raised ModuleNotFoundError: No module named 'not_a_real_module_xyz'"),
        ("import sys\nsys.exit(3)\n", "importing the submission raised SystemExit: 3"),
        ("", "the file is empty"),
        ("while True:\n    pass\n", "the submission could not be imported: importing the submission did not finish within 2 s"),
    ],
    ids=["syntax", "import", "exit", "empty", "hang"],
)
def test_broken_submission_is_graded_zero_with_the_reason(source: str, fragment: str, tmp_path: Path) -> None:
    """A file that cannot be imported scores 0, exit 1, and every check carries the reason."""
    path = tmp_path / "broken.py"
    path.write_text(source)
    run = grade(path, tmp_path, 1, "--call-timeout", "2")
    assert run.code == 1, run.stderr
    assert run.report["score"] == 0.0
    assert fragment in run.report["submission"]["load_error"], run.report["submission"]["load_error"]
    assert all(fragment in c["message"] for t in run.report["tiers"] for c in t["checks"])


def test_non_utf8_file_is_graded_zero(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 are named, not decoded into garbage."""
    path = tmp_path / "latin.py"
    path.write_bytes(b"x = '\xe9'\n")
    run = grade(path, tmp_path, 1)
    assert run.code == 1
    assert "not valid UTF-8 text (byte 5" in run.report["submission"]["load_error"]


def test_missing_function_is_named(tmp_path: Path) -> None:
    """A file without differential_attention fails its checks saying so; lambda checks still run."""
    path = tmp_path / "half.py"
    path.write_text(MISBEHAVING)
    run = grade(path, tmp_path, 1, "--tiers", "T1,T2")
    assert run.check("causal_values")["message"].startswith("the submission does not define differential_attention")
    assert run.check("lambda_values")["status"] == "passed"
    assert os.path.exists(tmp_path / "report.html")


def test_a_dead_fork_server_is_the_graders_failure_not_the_submissions() -> None:
    """When the fork server dies, the next request raises WorkerStartFailure (an internal error), not a failed check."""
    from grader.worker.client import WorkerStartFailure

    forks = ForkServer()
    worker = Worker(MISBEHAVING, "misbehaving.py", FUNCTIONS, WorkerLimits(call_timeout_s=3), forks)
    try:
        assert _lambda_call(worker) == pytest.approx(0.2, abs=1e-15)
        forks._process.kill()
        forks._process.wait()
        assert not forks.alive()
        with pytest.raises(WorkerStartFailure, match="fork server"):
            vectors = tuple(TensorInput(np.array([0.5]), "float64") for _ in range(4))
            invoke(worker, Request((Call("differential_lambda", vectors),)))
    finally:
        worker.close()
        forks.close()


def test_workers_die_with_the_process_that_asked_for_them(forks: ForkServer) -> None:
    """A client killed mid-call (a batch's grading process past its deadline) leaves no worker spinning."""
    read_fd, write_fd = os.pipe()
    client = os.fork()
    if client == 0:  # the client: start a worker, report its pid, then hang in a call
        try:
            os.close(read_fd)
            worker = Worker(MISBEHAVING, "misbehaving.py", FUNCTIONS + ["hang"], WorkerLimits(call_timeout_s=60), forks)
            worker.load()
            os.write(write_fd, str(worker._process.pid).encode())
            invoke(worker, Request((Call("hang"),)))
        finally:
            os._exit(0)
    os.close(write_fd)
    worker_pid = int(os.read(read_fd, 64))
    os.close(read_fd)
    os.kill(client, signal.SIGKILL)
    os.waitpid(client, 0)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{worker_pid}").exists()


def test_the_fork_server_refuses_its_own_descendants() -> None:
    """A worker (or anything it starts) is never served: the server checks the asker's ancestry."""
    import importlib.util
    import subprocess

    from grader.worker.forks import CHILD_SCRIPT

    spec = importlib.util.spec_from_file_location("diffgrade_child_for_test", CHILD_SCRIPT)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    sleeper = subprocess.Popen(["sleep", "5"])
    try:
        assert child.ForkServer.descends_from_me(sleeper.pid)
        assert child.ForkServer.descends_from_me(os.getpid())
        assert not child.ForkServer.descends_from_me(os.getppid())
    finally:
        sleeper.kill()
        sleeper.wait()


def test_gradients_are_checked_with_gradients_turned_off_globally(tmp_path: Path) -> None:
    """The backward pass turns gradients on for itself: a correct file that switches them off at import still passes T3."""
    from conftest import REFERENCE

    path = tmp_path / "grad_off.py"
    path.write_text(REFERENCE.read_text() + "\n\ntorch.set_grad_enabled(False)\n"
                    "differential_lambda = torch.enable_grad()(differential_lambda)\n"
                    "differential_attention = torch.enable_grad()(differential_attention)\n")  # fmt: skip
    run = grade(path, tmp_path, 5, "--tiers", "T3")
    assert run.report["score"] == run.report["max_score"], [c["message"] for t in run.report["tiers"] for c in t["checks"] if c["status"] != "passed"]


def test_the_fork_server_keeps_one_descriptor_per_client(forks: ForkServer) -> None:
    """Thirty workers for one process leave the fork server with as many open descriptors as before."""
    def open_fds() -> int:
        return len(os.listdir(f"/proc/{forks._process.pid}/fd"))

    def settled() -> int:
        # The server writes a worker's exit code before it closes its copy of the status pipe:
        # a client that is quick enough would count in between.
        count, deadline = open_fds(), time.monotonic() + 2
        while time.monotonic() < deadline:
            time.sleep(0.02)
            count, before = open_fds(), count
            if count == before:
                break
        return count

    counts: list[int] = []
    for _ in range(31):
        worker = Worker("x = 1\n", "s.py", ["f"], WorkerLimits(), forks, isolate=False)
        worker.load()
        worker.close()
        counts.append(settled())
    assert counts[1:] == counts[:1] * 30, counts


# ---- the grading process protects itself: reply caps and clean strings ------------------

HOSTILE_REPLIES = '''
import sys, torch
def huge(x):
    return torch.zeros(16_000_000)
def square(x):
    return torch.zeros(x.shape[-1], x.shape[-1], dtype=x.dtype)
def fine(x):
    return x * 2
def loud(x):
    print("\\x1b[2J\\x1b]0;pwned\\x07tick\\r\\x00tock\\n::error ok")
    raise type("E" * 1_000_000, (Exception,), {})("first line\\n\\x1b[31mred\\x1b[0m\\r\\x85end")
'''


def _one_tensor_call(function: str, size: int = 640) -> Request:
    return Request((Call(function, (TensorInput(np.linspace(-1, 1, size).reshape(-1, 8), "float32"),)),))


@pytest.fixture(scope="module")
def hostile(forks: ForkServer) -> Worker:
    """A worker whose functions return a 64 MB tensor, a wrong but honest square, a right value, and a loud exception."""
    running = Worker(HOSTILE_REPLIES, "hostile.py", ["huge", "square", "fine", "loud"], WorkerLimits(call_timeout_s=10), forks)
    yield running
    running.close()


def test_a_huge_reply_is_refused_unread_and_the_worker_goes_on(hostile: Worker) -> None:
    """A 64 MB result for a 640-element call fails with expected versus got, buffers under 4 MiB, and the worker keeps serving."""
    import tracemalloc

    tracemalloc.start()
    try:
        refused = invoke(hostile, _one_tensor_call("huge"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.failure == "huge returned 16,000,000 elements where 640 were expected; the reply was refused"
    assert peak < 4 * 1024 * 1024, peak
    after = invoke(hostile, _one_tensor_call("fine"))
    assert after.failure is None and hostile.restarts == 0
    assert np.allclose(after.results[0].value, np.linspace(-2, 2, 640).reshape(-1, 8).astype(np.float32))


def test_the_worker_withholds_a_result_over_its_cap_and_sends_its_count(hostile: Worker) -> None:
    """A 64 MB result of a call capped at 1,000 elements comes back as its shape and element count, with no array."""
    header = {"calls": [{"fn": "huge", "args": [{"value": 0}], "max_elements": 1_000}], "tensors": []}
    reply, arrays = hostile.run(header, [])
    assert arrays == []
    assert reply["calls"][0]["value"] is None and reply["calls"][0]["withheld"] == 16_000_000
    assert reply["calls"][0]["shape"] == [16_000_000]


def test_an_honest_wrong_shape_is_still_read(hostile: Worker) -> None:
    """A result bigger than expected but within the cap (an 8×8 map for an 80×8 input) comes back to be judged."""
    outcome = invoke(hostile, _one_tensor_call("square"))
    assert outcome.failure is None
    assert outcome.results[0].value.shape == (8, 8)


def test_a_gradient_or_stray_array_over_its_cap_is_refused() -> None:
    """The limit names the gradient, or the array sent as nothing, with expected versus got."""
    from grader.core.invoke import reply_limit

    tensor = TensorInput(np.zeros((2, 3)), "float64", requires_grad=True)
    judge = reply_limit([Request((Call("f", (tensor,)),), backward_from=0, cotangent=np.zeros((2, 3)))])
    f8 = np.dtype("<f8")
    assert judge({"calls": [{"value": 0}], "backward": {"grads": {"0": 1}}}, [(f8, (2, 3)), (f8, (6,))]) is None
    assert judge({"calls": [{"value": 0}], "backward": {"grads": {"0": 1}}}, [(f8, (2, 3)), (f8, (100_000,))]) == (
        "the gradient of f's input tensor 0 had 100,000 elements where 6 were expected; the reply was refused"
    )
    assert judge({"calls": [{"value": None}]}, [(f8, (20_000,))]) == (
        "an array sent as no result or gradient had 20,000 elements where 0 were expected; the reply was refused"
    )
    assert judge({"calls": [{"value": None, "withheld": 20_000}]}, []) == (
        "f returned 20,000 elements where 6 were expected; the reply was refused"
    )
    assert judge({"calls": [{"value": None, "withheld": 20}]}, []) is None  # within the cap: judged as a missing value


def test_protocol_drops_refused_arrays_and_stays_in_step() -> None:
    """A refused message's 12 MB are read in chunks and dropped; the next message on the stream reads whole."""
    import tracemalloc

    buffer = io.BytesIO()
    protocol.write_message(buffer, {"status": "ok"}, [np.zeros(3_000_000, dtype=np.float32)])
    protocol.write_message(buffer, {"status": "next"}, [np.arange(3.0)])
    buffer.seek(0)
    tracemalloc.start()
    try:
        with pytest.raises(protocol.Refused, match="^too big$"):
            protocol.read_message(buffer, lambda header, described: "too big" if described[0][1] == (3_000_000,) else None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * protocol.CHUNK_BYTES, peak
    header, arrays = protocol.read_message(buffer)
    assert header == {"status": "next"} and arrays[0].tolist() == [0.0, 1.0, 2.0]


def test_strings_from_the_worker_are_clipped_and_cleaned(hostile: Worker) -> None:
    """A million-character type name is cut to 200 characters; escapes, carriage returns and C1 controls are gone, newlines kept."""
    raised = invoke(hostile, _one_tensor_call("loud")).results[0].raised
    assert raised is not None
    assert len(raised["type"]) == 200 and raised["type"].endswith("more characters cut]")
    assert raised["type"].startswith("EEEE") and "999," in raised["type"]
    assert raised["message"] == "first line\nred\nend"
    captured = hostile.captured()["stdout"]
    assert "tick\n" in captured and "tock\n::error ok" in captured
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", captured), repr(captured)


@pytest.mark.parametrize(
    ("raw", "one_line", "multi_line"),
    [
        ("alice\n::error file=x::pwned", "alice\\n::error file=x::pwned", "alice\n::error file=x::pwned"),
        ("\x1b[31mred\x1b[0m\r\n", "\\x1b[31mred\\x1b[0m\\r\\n", "red\n"),
        ("a\u202eb\udcffc\x85d\x00", "a\\u202eb\\udcffc\\x85d\\x00", "ab\ufffdcd"),
        ("over\rwrite\ttab", "over\\rwrite\\ttab", "over\nwrite\ttab"),
    ],
    ids=["log-injection", "ansi", "bidi-surrogate-c1", "carriage-return"],
)
def test_safetext_escapes_names_and_strips_text(raw: str, one_line: str, multi_line: str) -> None:
    """line() shows every control character as an escape on one line; text() drops them but keeps newlines and tabs."""
    from grader.toolkit import safetext

    assert safetext.line(raw) == one_line
    assert safetext.text(raw) == multi_line


BUSY = """
import time, torch
def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    spent = time.process_time()
    while time.process_time() - spent < 0.05:
        pass
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init
"""


def test_the_submissions_own_cpu_time_is_counted(forks: ForkServer) -> None:
    """A call that burns 50 ms of CPU adds about 50 ms to the worker's count of the submission's time, not the grader's time."""
    busy = Worker(BUSY, "busy.py", FUNCTIONS, WorkerLimits(call_timeout_s=5), forks)
    try:
        assert busy.submission_cpu_s == 0.0
        _lambda_call(busy)
        _lambda_call(busy)
        assert 0.1 <= busy.submission_cpu_s < 0.15
    finally:
        busy.close()


def test_a_forged_cpu_time_counts_nothing() -> None:
    """A reply whose cpu_s is not a finite non-negative number adds nothing."""
    from grader.worker.client import seconds_in

    assert [seconds_in({"cpu_s": value}) for value in (0.25, 3, -1.0, float("inf"), float("nan"), "1", True, None)] == [0.25, 3.0] + [0.0] * 6


def test_values_that_are_not_those_of_the_tensor_described_make_a_malformed_reply() -> None:
    """A reply claiming a float32 [2] result whose values are float64, or of another shape, is malformed; a true one is read."""

    class Replying:
        """Stands for a worker that sends ``values`` as the result it describes as float32 [2]."""

        def __init__(self, values: np.ndarray) -> None:
            self.values = values

        def run(self, header: dict[str, Any], arrays: list[np.ndarray], **_: Any) -> tuple[dict[str, Any], list[np.ndarray]]:
            call = {"status": "returned", "type": "torch.Tensor", "is_tensor": True, "exact_tensor": True, "repr": "", "shape": [2],
                    "dtype": "float32", "device": "cpu", "layout": "torch.strided", "requires_grad": False, "has_grad_fn": False, "value": 0}  # fmt: skip
            return {"status": "ok", "calls": [call]}, [self.values]

    x = TensorInput(np.ones(2), "float32")
    request = Request((Call("f", (x,)),), inputs=(x,))
    assert invoke(Replying(np.ones(2, dtype=np.float32)), request).failure is None  # type: ignore[arg-type]
    for values in (np.ones(2), np.ones(3, dtype=np.float32)):
        failure = invoke(Replying(values), request).failure  # type: ignore[arg-type]
        assert "the worker sent a malformed reply (MalformedReply: the values sent" in str(failure), failure


def test_reentrant_checkpointing_fails_where_torch_autograd_grad_is_asked(tmp_path: Path) -> None:
    """Calls whose leaves hold no .grad are differentiated with .backward(), which reentrant checkpointing supports; those
    whose leaves hold one are asked with torch.autograd.grad too, as a caller who accumulates asks, and there a file that
    checkpoints with use_reentrant=True raises: it loses points of T3, with torch's own reason in the message."""
    from conftest import REFERENCE

    path = tmp_path / "reentrant.py"
    path.write_text(REFERENCE.read_text().replace("def differential_attention(", "def _attention(", 1) + "\n\nimport torch.utils.checkpoint\n\n\n"
                    "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n"
                    "    return torch.utils.checkpoint.checkpoint(lambda *a: _attention(*a, causal), q1, k1, q2, k2, value, coefficient,\n"
                    "                                             use_reentrant=True)\n")  # fmt: skip
    run = grade(path, tmp_path, 5, "--tiers", "T3")
    failed = [c for t in run.report["tiers"] for c in t["checks"] if c["status"] == "failed"]
    assert failed and all(c["id"] != "toy_experiment" for c in failed)
    assert all("use_reentrant=True, torch.utils.checkpoint is incompatible with .grad()" in c["message"] for c in failed)


LYING_MODES = """
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class _Unchanged(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "__get__":  # every getter of the C base class: _version reads 0
            return 0 if getattr(func, "__self__", None) is torch._C.TensorBase.__dict__["_version"] else func(*args)
        return func(*args, **(kwargs or {}))


class _Equal(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return True if func is torch.ops.aten.equal.default else func(*args, **(kwargs or {}))


_Unchanged().__enter__()
_Equal().__enter__()


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    q1.data.mul_(2.0)
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init
"""


REBOUND = """
import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    q1.data = q1.data.clone()  # the same values, in memory of its own: the caller's tensor no longer shares its old storage
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init
"""


@pytest.mark.parametrize(
    ("source", "filename"),
    [(LYING_MODES, "liar.py"), (REBOUND, "mover.py")],
    ids=["modes_left_active_lie_about_version_and_equal", "data_replaced_by_a_copy"],
)
def test_a_hidden_change_to_an_input_is_still_seen(source: str, filename: str, forks: ForkServer) -> None:
    """q1 counts as changed when modes pushed at import lie about _version and torch.equal, and when `x.data` is replaced by a
    copy (the same values and version counter, in memory of its own)."""
    submission = Worker(source, filename, FUNCTIONS, WorkerLimits(call_timeout_s=10), forks)
    try:
        vectors = tuple(TensorInput(np.array([0.5, -0.25]), "float64") for _ in range(4))
        outcome = invoke(submission, Request((Call("differential_lambda", vectors),)))
    finally:
        submission.close()
    assert outcome.failure is None, outcome.failure
    assert outcome.changed_inputs == [0]


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_fork_server_whose_grader_ends_at_once_ends_too() -> None:
    """A grader that ends right after starting its fork server, before the server asked to end with it, leaves none behind."""
    code = "import os\nfrom grader.worker.client import ForkServer\nprint(ForkServer().pid, flush=True)\nos._exit(0)\n"
    started = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    pid, deadline = int(started.stdout), time.monotonic() + 60
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid)
