"""The grader's side of the workers: a fork server, and one worker per submission.

A :class:`ForkServer` is a process running ``child.py`` that imports torch
once and forks a fresh worker on request (one per submission, and one per
restart). A :class:`Worker` owns one submission's current worker. Every
exchange has a wall-clock deadline; a worker that dies, hangs or sends
garbage is killed (with everything it started), and the next request forks a
fresh one, until a restart cap or the time budget says stop. Nothing the
worker sends is trusted beyond its shape: :mod:`protocol` loads arrays
without pickle (and, given a limit, refuses arrays larger than the request
can need before reading them), every string of a reply is clipped and
cleaned of control characters here (:func:`grader.toolkit.safetext.reply`), and
callers validate every field they use.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader.toolkit import safetext
from grader.worker import protocol
from grader.worker.forks import (
    ForkedProcess,
    ForkServer,
    WorkerFailure,
    WorkerStartFailure,
)

MiB = 1024 * 1024
READ_BYTES = 65536  # what one read of a reply asks for: a pipe holds 64 KiB


@dataclass(frozen=True)
class WorkerLimits:
    """Deadlines and resource limits for one submission's workers."""

    call_timeout_s: float = 20.0
    startup_timeout_s: float = 90.0
    budget_s: float = 600.0
    max_restarts: int = 24
    max_failures_per_function: int = 2
    address_space_bytes: int | None = 4096 * MiB
    cpu_seconds: int | None = 900
    file_size_bytes: int | None = 64 * MiB
    max_processes: int = 64
    workdir_bytes: int = 64 * MiB
    output_bytes: int = 8192

    def rlimits(self) -> dict[str, int | None]:
        """The resource limits as the child applies them."""
        return {
            "address_space": self.address_space_bytes,
            "cpu_seconds": self.cpu_seconds,
            "file_size": self.file_size_bytes,
            "core": 0,
        }


Reply = tuple[dict[str, Any], list[np.ndarray]]


def _out_of_memory(header: dict[str, Any], reply: Reply) -> list[str]:
    """The functions whose calls in ``reply`` raised MemoryError: they reached the worker's memory limit, which
    costs every later call as much again, so they count as failures as crashes and hangs do."""
    made = header.get("calls", [])
    return sorted({str(call.get("fn")) for call, done in zip(made, reply[0].get("calls", []))
                   if isinstance(done, dict) and (done.get("error") or {}).get("type") == "MemoryError"})  # fmt: skip


class ReplyRefused(Exception):
    """A reply whose arrays are larger than its request can need: refused unread, the worker still in step."""


class CappedOutput:
    """Drains one pipe in a thread, keeping the first ``limit`` bytes only."""

    def __init__(self, stream: Any, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream: Any) -> None:
        with stream:
            while chunk := stream.read1(65536):
                room = self.limit - len(self.kept)
                self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        """What was kept, decoded leniently, with a note of what was dropped (control characters left in)."""
        text = self.kept.decode("utf-8", errors="replace")
        return text + (f"\n[... {self.dropped} more bytes dropped]" if self.dropped else "")


class _Deadline:
    """File-like access to a pipe descriptor that gives up at a deadline.

    Reads go through ``buffer``, which the caller keeps from one message to
    the next: one system call takes whatever the pipe holds (the worker
    writes replies back to back), and later reads are served from it.
    """

    def __init__(self, fd: int, deadline: float, buffer: bytearray | None = None) -> None:
        self.fd = fd
        self.deadline = deadline
        self.buffer = bytearray() if buffer is None else buffer

    def _wait(self, readable: bool) -> None:
        remaining = self.deadline - time.monotonic()
        waiting: tuple[list[int], list[int], list[int]] = ([self.fd], [], []) if readable else ([], [self.fd], [])
        if remaining <= 0 or not any(select.select(*waiting, remaining)):
            raise TimeoutError

    def read(self, size: int) -> bytes:
        if not self.buffer:
            self._wait(readable=True)
            chunk = os.read(self.fd, max(size, READ_BYTES))
            if len(chunk) <= size:
                return chunk
            self.buffer += chunk
        taken = bytes(self.buffer[:size])
        del self.buffer[:size]
        return taken

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            self._wait(readable=False)
            view = view[os.write(self.fd, view[:65536]) :]

    def flush(self) -> None:
        pass


class Worker:
    """One submission's worker process, restarted on demand."""

    def __init__(
        self, source: str, filename: str, functions: list[str], limits: WorkerLimits, forks: ForkServer,
        *, isolate: bool = True, hide: tuple[str, ...] = (), warm_up: str | None = None,
    ) -> None:  # fmt: skip
        self.forks = forks
        self.warm_up = warm_up  # a file whose warm_up(torch) the fork server runs once before forking
        self.isolate = isolate
        self.hide = hide
        self.source = source
        self.filename = filename
        self.functions = functions
        self.limits = limits
        self.restarts = 0
        self.submission_cpu_s = 0.0  # CPU time the workers report for the submission's own calls and backward passes
        self.started_at = time.monotonic()
        self.info: dict[str, Any] = {}
        self.load_reply: dict[str, Any] | None = None
        self._process: ForkedProcess | None = None
        self._workdir: str | None = None
        self._ready = False
        self._spawns = 0
        self._failures: dict[str, int] = {}
        self._outputs: list[CappedOutput] = []
        self._captured = {"stdout": "", "stderr": ""}
        self._received = bytearray()  # bytes of the worker's replies read but not yet used

    def spawn(self) -> None:
        """Have the fork server fork a fresh worker (it waits for the server's warm-up, once)."""
        self._spawns += 1
        self._received = bytearray()
        self._workdir = tempfile.mkdtemp(prefix="diffgrade-worker-")
        request_read, self._request_fd = os.pipe()
        self._response_fd, response_write = os.pipe()
        (stdout_read, stdout_write), (stderr_read, stderr_write), (status_read, status_write) = (os.pipe() for _ in range(3))
        isolation = None
        if self.isolate:
            isolation = {
                "hide": [*self.hide, self.forks.directory],
                "workdir": self._workdir,
                "workdir_bytes": self.limits.workdir_bytes,
                "max_processes": self.limits.max_processes,
            }
        config = {"limits": self.limits.rlimits(), "isolation": isolation, "workdir": self._workdir, "warm_up": self.warm_up}
        theirs = [request_read, response_write, stdout_write, stderr_write, status_write]
        try:
            self._process = self.forks.fork(config, theirs, status_read, self.limits.startup_timeout_s)
        except WorkerStartFailure:
            for fd in (self._request_fd, self._response_fd, stdout_read, stderr_read, status_read):
                os.close(fd)
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        self._outputs = [CappedOutput(os.fdopen(stdout_read, "rb"), self.limits.output_bytes),
                         CappedOutput(os.fdopen(stderr_read, "rb"), self.limits.output_bytes)]  # fmt: skip
        self._ready = False

    def load(self) -> dict[str, Any]:
        """Wait for the worker to start, load the submission, and return the load reply.

        Raises WorkerFailure when the worker dies or hangs while starting or
        while importing the submission.
        """
        if self._process is None:
            self.spawn()
        if not self._ready:
            try:
                self.info = self._receive(self.limits.startup_timeout_s, "starting the worker")[0]
            except WorkerFailure as exc:
                lines = [line for line in self.captured()["stderr"].splitlines() if line.strip()]
                last = f"; its last words: {safetext.line(lines[-1].strip())}" if lines else ""
                raise WorkerStartFailure(f"{exc}{last}") from None
            request = {"op": "load", "source": self.source, "filename": self.filename, "functions": self.functions}
            self._send(request, [], self.limits.call_timeout_s, "importing the submission")
            self.load_reply = self._receive(self.limits.call_timeout_s, "importing the submission")[0]
            self._ready = True
        assert self.load_reply is not None
        return self.load_reply

    def run(
        self, header: dict[str, Any], arrays: list[np.ndarray], *, diagnostic: bool = False, limit: protocol.Limit | None = None
    ) -> Reply:
        """Send one request and return the reply, restarting a dead worker first.

        Functions that already crashed or hung the worker, or raised MemoryError,
        ``max_failures_per_function`` times are not called again, so one broken
        function cannot use up the restarts that the others need. A
        ``diagnostic`` request (extra calls that only explain a failure) gets
        one call's timeout in all, and its failure is not counted, so it
        cannot change how later requests run. A reply that ``limit`` refuses
        (see :func:`protocol.read_message`) raises :class:`ReplyRefused`: the
        worker goes on, and nothing is counted against the functions.
        """
        functions = self._ready_for(header)
        count, what = self._calls(header)
        timeout = min(self.limits.call_timeout_s * (1 if diagnostic else count), self._remaining())  # per call, also in a batch
        try:
            self._send({"op": "run", **header}, arrays, timeout, what)
            reply = self._receive(timeout, what, limit)
        except WorkerFailure:
            self._count_failure(functions if not diagnostic else [])
            raise
        self._count_failure(_out_of_memory(header, reply) if not diagnostic else [])
        return reply

    def run_each(
        self, requests: list[tuple[dict[str, Any], list[np.ndarray]]], limits: list[protocol.Limit | None] | None = None
    ) -> list[Reply | WorkerFailure | ReplyRefused]:
        """Send several requests in one message; the worker answers each as it finishes it.

        The same as calling :meth:`run` for each in turn, in one round trip:
        each answer is awaited with the timeout its request would get alone,
        a failure counts against that request's functions, and the list ends
        at the first failure (in its place), the requests after it not run.
        ``limits`` (one per request) work as :meth:`run`'s: a refused reply is
        a :class:`ReplyRefused` in its place, and the next request goes on.
        Headers whose JSON text is known (:class:`protocol.Written`: requests
        sent again and again) are sent as that text.
        """
        try:
            functions = self._ready_for(requests[0][0])
        except WorkerFailure as exc:
            return [exc]
        headers = [header for header, _ in requests]
        if any(self._functions_of(header) != functions for header in headers[1:]):
            raise ValueError("run_each needs requests that call the same functions")
        limits = limits if limits is not None else [None] * len(headers)
        if len(limits) != len(headers):
            raise ValueError(f"run_each needs one limit per request (got {len(limits)} for {len(headers)})")
        arrays = [array for _, each in requests for array in each]
        answers: list[Reply | WorkerFailure | ReplyRefused] = []
        try:
            count, what = self._calls(headers[0])
            timeout = min(self.limits.call_timeout_s * count, self._remaining())
            message = {"op": "run_each", "array_counts": [len(each) for _, each in requests]}
            if all(isinstance(header, protocol.Written) for header in headers):
                self._send(message, arrays, timeout, what, {"requests": f"[{', '.join(header.text for header in headers)}]"})  # type: ignore[attr-defined]
            else:
                self._send({**message, "requests": headers}, arrays, timeout, what)
            for header, limit in zip(headers, limits):
                count, what = self._calls(header)
                remaining = self._remaining()
                if remaining <= 0:  # where run() would have refused this request, it is stopped instead
                    self.stop()
                    answers.append(self._used_up())
                    break
                try:
                    reply = self._receive(min(self.limits.call_timeout_s * count, remaining), what, limit)
                    self._count_failure(_out_of_memory(header, reply))
                    answers.append(reply)
                except ReplyRefused as exc:
                    answers.append(exc)
        except WorkerFailure as exc:
            self._count_failure(functions)
            answers.append(exc)
        return answers

    def _count_failure(self, functions: list[str]) -> None:
        """One more crash, hang or MemoryError of each of ``functions`` (see ``max_failures_per_function``)."""
        for name in functions:
            self._failures[name] = self._failures.get(name, 0) + 1

    def _used_up(self) -> WorkerFailure:
        return WorkerFailure(f"not run: the time budget of {self.limits.budget_s:g} s for this submission is used up")

    @staticmethod
    def _functions_of(header: dict[str, Any]) -> list[str]:
        return sorted({str(call.get("fn")) for call in header.get("calls", [])})

    def _ready_for(self, header: dict[str, Any]) -> list[str]:
        """Check that ``header``'s request may run, restart and reload the worker if needed; return its functions.

        Functions that already crashed or hung the worker, or raised MemoryError,
        ``max_failures_per_function`` times are not called again, and nothing
        runs once the time budget is used up (a WorkerFailure says which).
        """
        functions = self._functions_of(header)
        for name in functions:
            if self._failures.get(name, 0) >= self.limits.max_failures_per_function:
                raise WorkerFailure(f"not run: {name} already crashed, hung or raised MemoryError in the worker {self._failures[name]} times")
        if self._remaining() <= 0:
            raise self._used_up()
        if self._process is None or self._process.poll() is not None:
            self._restart()
        if self.load().get("status") != "ok":
            raise WorkerFailure("not run: the submission could not be imported again after the worker restarted")
        if self._remaining() <= 0:  # after any restart and load
            raise self._used_up()
        return functions

    def _remaining(self) -> float:
        return self.limits.budget_s - (time.monotonic() - self.started_at)

    @staticmethod
    def _calls(header: dict[str, Any]) -> tuple[int, str]:
        """How many calls a request makes (at least 1, for its timeout), and how a message names them."""
        count = max(1, len(header.get("calls", [])))
        return count, "the call" if count == 1 else f"the {count} calls"

    def _restart(self) -> None:
        if self._spawns:
            if self.restarts >= self.limits.max_restarts:
                raise WorkerFailure(f"not run: the worker was already restarted {self.restarts} times")
            self.restarts += 1
        self.stop()
        self.spawn()

    def _send(self, header: dict[str, Any], arrays: list[np.ndarray], timeout: float, what: str, encoded: dict[str, str] | None = None) -> None:
        try:
            protocol.write_message(_Deadline(self._request_fd, time.monotonic() + timeout), header, arrays, encoded)
        except (TimeoutError, BrokenPipeError, OSError) as exc:
            raise self._fail(what, timeout, timed_out=isinstance(exc, TimeoutError)) from None

    def _receive(self, timeout: float, what: str, limit: protocol.Limit | None = None) -> Reply:
        """The next reply, its strings cleaned (:func:`safetext.reply`); a failure stops the worker, a refusal by ``limit`` does not."""
        try:
            reply = protocol.read_message(_Deadline(self._response_fd, time.monotonic() + timeout, self._received), limit, safetext.reply_of)
        except protocol.Refused as exc:
            raise ReplyRefused(str(exc)) from None
        except TimeoutError:
            raise self._fail(what, timeout, timed_out=True) from None
        except protocol.PeerClosed:
            raise self._fail(what, timeout, timed_out=False) from None
        except Exception as exc:  # a reply forged by the submission may break the reader in any way
            self.stop()
            raise WorkerFailure(f"{what} produced an invalid reply from the worker ({exc}); the worker was stopped") from None
        self.submission_cpu_s += seconds_in(reply[0])
        return reply

    def _fail(self, what: str, timeout: float, timed_out: bool) -> WorkerFailure:
        """Stop the worker and describe why it gave no answer."""
        if timed_out:
            self.stop()
            return WorkerFailure(f"{what} did not finish within {timeout:g} s; the worker was stopped")
        assert self._process is not None
        try:
            code = self._process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        gone = self._process.server_gone or not self.forks.alive()
        self.stop()
        if gone:  # the grader's own infrastructure failed: not the submission's fault
            return WorkerStartFailure(f"the fork server stopped during {what}, taking the worker with it")
        return WorkerFailure(f"the worker process ended during {what} ({describe_exit(code)})")

    def stop(self) -> None:
        """Kill the worker, every descendant and its process group; release its resources.

        In a PID namespace the worker is the namespace's init, so killing it
        makes the kernel kill everything the submission started.
        """
        if self._process is None:
            return
        if self._process.poll() is None:  # once reaped, its pid may already belong to someone else
            for pid in descendants(self._process.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self._process.kill()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        for fd in (self._request_fd, self._response_fd):
            os.close(fd)
        for name, output in zip(("stdout", "stderr"), self._outputs):
            output.thread.join(timeout=2)
            self._captured[name] += output.text()
        self._outputs = []
        shutil.rmtree(self._workdir or "", ignore_errors=True)
        self._process = None
        self._ready = False
        self._received = bytearray()

    def close(self) -> None:
        """Ask the worker to exit, then make sure it and its process group are gone."""
        if self._process is not None and self._process.poll() is None:
            try:
                protocol.write_message(_Deadline(self._request_fd, time.monotonic() + 1), {"op": "exit"})
                self._process.wait(timeout=2)
            except (TimeoutError, OSError, subprocess.TimeoutExpired):
                pass
        self.stop()

    def captured(self) -> dict[str, str]:
        """The submission's stdout and stderr (first bytes only) over all workers so far, clipped and cleaned."""
        live = {name: output.text() for name, output in zip(("stdout", "stderr"), self._outputs)}
        return {name: safetext.text(self._captured[name] + live.get(name, ""), safetext.MAX_LONG_TEXT) for name in ("stdout", "stderr")}


def seconds_in(header: dict[str, Any]) -> float:
    """The CPU seconds a reply says the submission's code took; 0 when it says nothing plausible (a forged reply)."""
    seconds = header.get("cpu_s")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 <= seconds < math.inf:
        return float(seconds)
    return 0.0


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children of any of their threads), read from /proc."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                fresh = [int(c) for c in children.read_text().split() if int(c) not in found]
                found += fresh
                frontier += fresh
    return found


def describe_exit(code: int | None) -> str:
    """Say how a process ended, from its Popen return code."""
    if code is None:
        return "it did not exit and was killed"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
