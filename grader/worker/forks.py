"""The fork server's client side: start the warm server, ask it for workers, watch them.

Only the standard library is imported here, so that the ``diffgrade``
command can start the server (whose torch import is the longest step of a
run) before it imports anything heavy itself (:mod:`grader.commands.launch`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHILD_SCRIPT = Path(__file__).with_name("child.py")
ENVIRONMENT_KEPT = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


class WorkerFailure(Exception):
    """A request got no valid answer: the worker crashed, hung, or was not run."""


class WorkerStartFailure(WorkerFailure):
    """The worker died or hung before it could load any submission: not the submission's fault."""


class ForkServer:
    """The warm process that forks workers; start one per grading session and share it.

    It listens on a Unix socket in a folder only the grader's user can enter
    (and which the workers' isolation hides). Until the server has imported
    torch, requests wait in the socket's backlog, so creating one costs the
    caller nothing: the first :meth:`fork` waits for the warm-up instead.
    """

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="diffgrade-forks-")
        self.address = os.path.join(self.directory, "forks")
        self._log = tempfile.TemporaryFile(prefix="diffgrade-forks-log-")
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.directory, "OMP_NUM_THREADS": "1"}
        env.update({k: os.environ[k] for k in ENVIRONMENT_KEPT if k in os.environ})
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
            listener.bind(self.address)
            listener.listen(128)
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-u", str(CHILD_SCRIPT), str(listener.fileno()), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                pass_fds=(listener.fileno(),),
                cwd=self.directory,
                env=env,
                start_new_session=True,
            )
        # Readable once the server has ended; usable from processes forked later (a batch's graders).
        self._pidfd = os.pidfd_open(self._process.pid)

    @property
    def pid(self) -> int:
        """The server's process id (its CPU time, and its workers' once it has collected them, are in /proc/PID/stat)."""
        return self._process.pid

    def alive(self) -> bool:
        """Whether the server still runs (from any process that inherited this object)."""
        return not select.select([self._pidfd], [], [], 0)[0]

    def fork(self, config: dict[str, Any], fds: list[int], status_fd: int, timeout: float) -> ForkedProcess:
        """Fork a worker with ``config`` and the descriptors ``fds`` (see child.WORKER_FDS)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
                connection.settimeout(timeout)
                connection.connect(self.address)
                socket.send_fds(connection, [json.dumps(config).encode()], fds)
                message, pidfds, _, _ = socket.recv_fds(connection, 4096, 1)
        except OSError as exc:  # socket.timeout included
            raise WorkerStartFailure(f"the fork server did not answer ({exc or 'timed out'}){self.last_words()}") from None
        try:
            pid = int(json.loads(message)["pid"])
        except (ValueError, KeyError, TypeError):
            for fd in pidfds:
                os.close(fd)
            raise WorkerStartFailure(f"the fork server gave no worker{self.last_words()}") from None
        if len(pidfds) != 1:
            raise WorkerStartFailure("the fork server sent no process handle for the worker")
        return ForkedProcess(pid, pidfds[0], status_fd)

    def last_words(self) -> str:
        """Whether the server has stopped, and its last line of output, as a suffix for error messages."""
        size = os.fstat(self._log.fileno()).st_size
        tail = os.pread(self._log.fileno(), 4096, max(0, size - 4096))  # no shared file offset to disturb
        lines = [line.strip() for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
        ended = "" if self.alive() else "; the fork server has stopped"
        return f"{ended}; its last words: {lines[-1]}" if lines else ended

    def close(self) -> None:
        """Stop the server; its workers die with it (parent-death signal), and their cgroups are removed."""
        from grader.worker.isolation import (
            remove_server_groups,  # ctypes: not needed before the server runs
        )

        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        remove_server_groups(self._process.pid)
        os.close(self._pidfd)
        self._log.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ForkedProcess:
    """A worker forked by the fork server: killed through its pidfd, its exit code read from a pipe.

    The fork server reaps the worker and writes its exit code (Popen's
    convention: negative for a signal) to the status pipe; end of file without
    a code means the server itself is gone, which kills the worker too.
    """

    def __init__(self, pid: int, pidfd: int, status_fd: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.server_gone = False  # ended because the fork server did, not through its own fault
        self._pidfd = pidfd
        self._status_fd = status_fd

    def poll(self) -> int | None:
        """The exit code if the worker has ended and been reaped, else None."""
        if self.returncode is None and select.select([self._status_fd], [], [], 0)[0]:
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code; raise subprocess.TimeoutExpired after ``timeout`` seconds."""
        if self.returncode is None:
            if not select.select([self._status_fd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("worker", timeout or 0)
            self._collect()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the worker (never another process that reused its pid)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _collect(self) -> None:
        text = os.read(self._status_fd, 64).decode("ascii", "replace").strip()
        self.server_gone = not text.lstrip("-").isdigit()
        self.returncode = -signal.SIGKILL if self.server_gone else int(text)
        for fd in (self._pidfd, self._status_fd):
            os.close(fd)
