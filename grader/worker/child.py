"""The worker side: a warm fork server, and the worker each fork becomes.

Run as ``python -I -u child.py LISTENER_FD`` by :mod:`grader.worker.client`.
The process imports numpy and torch once, warms them up, then accepts
requests on the listening Unix socket: each brings the descriptors of one
worker (requests, replies, stdout, stderr, exit status) and its
configuration, and is answered with a forked child's pid and pidfd. So a
worker starts in milliseconds instead of paying for a torch import.

The forked child is on the untrusted side of the boundary: it applies the
resource limits and the isolation of :mod:`isolation`, loads the submission,
and reports plain arrays and observed facts; the grader process decides what
they are worth.
"""

from __future__ import annotations

import fcntl
import functools
import gc
import json
import math
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

LIMITS = {
    "address_space": resource.RLIMIT_AS,
    "cpu_seconds": resource.RLIMIT_CPU,
    "file_size": resource.RLIMIT_FSIZE,
    "core": resource.RLIMIT_CORE,
}
TEXT_LIMIT = 4000
TUPLE_ITEMS = 4  # items of a returned tuple or list described one by one
# The descriptors a forked worker gets, in this order, and where it keeps them.
WORKER_FDS = ("requests", "responses", "stdout", "stderr", "status")
REQUESTS_FD, RESPONSES_FD = 3, 4
PLACED_FD = 5  # while isolating: where the fork server says that it has moved the worker into its cgroup
CONFIG_BYTES = 1 << 20
PACKED_GAP = 3  # elements before and between the inputs that lie in one storage (layout "packed")
ALIASED_OFFSET = 5  # elements before the address at which every input of layout "aliased" starts
# the inputs' dtypes; the others only for a 0-dim coefficient, which never requires grad when integer, float16 or bfloat16
INPUT_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64")


def apply_limits(limits: dict[str, int | None]) -> None:
    """Set the resource limits named in ``limits`` (None leaves one unchanged).

    The worker is forked from a process that already holds torch, so an
    address-space limit below what it maps now would only make it fail later
    in some unrelated allocation: refuse it here, in words.
    """
    wanted = limits.get("address_space")
    if wanted is not None:
        with open("/proc/self/statm") as stream:
            mapped = int(stream.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        if wanted < mapped + (64 << 20):
            raise MemoryError(f"the memory limit of {wanted >> 20} MiB is below the {mapped >> 20} MiB "
                              "that the warmed-up worker maps before loading anything, plus 64 MiB")  # fmt: skip
    for name, value in limits.items():
        if value is not None:
            resource.setrlimit(LIMITS[name], (value, value))


def main(argv: list[str]) -> int:
    """Warm up, then fork one worker per request on the listening socket, forever."""
    listener, parent = socket.socket(fileno=int(argv[1])), int(argv[2])
    del sys.argv[1:]  # the submissions have no business with the descriptors
    # Loaded from their files: putting the grader's folder on sys.path would
    # let the submission import whatever lies beside it (the reference, say).
    protocol, isolation = (_load_sibling(name) for name in ("protocol", "isolation"))
    isolation.die_with_parent()
    if os.getppid() != parent:  # the grader ended before the kernel was asked to end this process with it
        return 0
    server = Server()
    isolation.prepare()
    gc.collect()
    gc.freeze()  # what is warm now is shared with every fork: the collector must not touch (and so copy) it
    ForkServer(listener, server, protocol, isolation).serve()
    return 0


class ForkServer:
    """Accepts fork requests and reaps the workers, passing on how each ended."""

    def __init__(self, listener: socket.socket, server: Server, protocol: Any, isolation: Any) -> None:
        self.listener = listener
        self.server = server
        self.protocol = protocol
        self.isolation = isolation
        self.status_fds: dict[int, int] = {}
        # One pidfd for each process that asks for workers (by its pid), with the
        # workers it got that still run: when that process ends (a batch kills a
        # grading process that ran out of time), they are killed too instead of
        # running on alone. A batch's grading processes ask for thousands of
        # workers each: one descriptor per client, not per worker.
        self.clients: dict[int, set[int]] = {}
        self.client_pidfds: dict[int, int] = {}
        self.grants = isolation.Grants()  # each worker's uid and cgroup
        self.warmed: set[str] = set()  # the exercises' warm-up files already run
        self.wake_read, wake_write = os.pipe()
        for fd in (self.wake_read, wake_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes select

    def serve(self) -> None:
        """Answer fork requests, reap workers and kill the workers of vanished clients until the grader goes away."""
        while True:
            poller = select.poll()  # no limit on descriptor numbers, unlike select()
            for fd in (self.listener.fileno(), self.wake_read, *self.clients):
                poller.register(fd, select.POLLIN)
            try:
                ready = {fd for fd, _ in poller.poll(100 if self.grants.pending else None)}  # retry cgroups still emptying
            except InterruptedError:
                continue
            if self.wake_read in ready:
                while True:
                    try:
                        if not os.read(self.wake_read, 4096):
                            break
                    except BlockingIOError:
                        break
            for client in [fd for fd in ready if fd in self.clients]:
                self.orphaned(client)
            self.reap()
            self.grants.retry()
            if self.listener.fileno() in ready:
                try:
                    connection, _ = self.listener.accept()
                except OSError:
                    continue
                with connection:
                    self.answer(connection)

    def orphaned(self, client: int) -> None:
        """The client behind ``client`` (a pidfd) ended: kill its workers that still run."""
        for pid in self.clients.pop(client):
            if pid in self.status_fds:  # not reaped yet, so the pid and its group are still this worker's
                for kill, target in ((os.kill, pid), (os.killpg, pid)):
                    try:
                        kill(target, signal.SIGKILL)
                    except OSError:
                        pass
        self.client_pidfds = {peer: fd for peer, fd in self.client_pidfds.items() if fd != client}
        os.close(client)

    def warm_up(self, path: Any) -> None:
        """Once per exercise, before its first worker: run its warm-up, then note again what the workers need."""
        if not isinstance(path, str) or path in self.warmed:
            return
        self.warmed.add(path)
        self.server.warm_up_with(path)
        self.isolation.prepare()
        gc.collect()
        gc.freeze()

    def client_of(self, peer: int) -> int:
        """The pidfd of the process ``peer`` (opened once; a pid whose process ended is a new client)."""
        client = self.client_pidfds.get(peer)
        if client is not None:
            ended = select.poll()
            ended.register(client, select.POLLIN)
            if ended.poll(0):  # that process ended, and its pid was reused
                self.orphaned(client)
                client = None
        if client is None:
            client = self.client_pidfds[peer] = os.pidfd_open(peer)
            self.clients[client] = set()
        return client

    def answer(self, connection: socket.socket) -> None:
        """Fork one worker for the request on ``connection`` and send back its pid and pidfd."""
        try:
            credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            peer, uid, _ = struct.unpack("3i", credentials)
            if uid != os.getuid() or self.descends_from_me(peer):
                return  # only the grader's own user may ask for workers, and never a worker itself
            connection.settimeout(10)
            message, fds, _, _ = socket.recv_fds(connection, CONFIG_BYTES, len(WORKER_FDS))
        except OSError:
            return
        try:
            config = json.loads(message)
            if len(fds) != len(WORKER_FDS):
                return
            self.warm_up(config.get("warm_up"))
            client = self.client_of(peer)
            granted, placed = None, None
            if config["isolation"]:
                granted = self.grants.issue(config["limits"].get("address_space"), config["isolation"]["max_processes"])
                config["isolation"].update(granted)
                placed = os.pipe() if granted["cgroups"] else None
            try:
                ids = (os.getuid(), os.getgid())
                pid = self.isolation.fork_into_namespaces() if config["isolation"] else None
                entered = ids if pid is not None else None
                if pid is None:  # no isolation wanted, or the kernel refused: isolate() tries again, or warns
                    pid = os.fork()
            except BaseException:
                if granted is not None:
                    self.grants.abandon(granted)
                for fd in placed or ():
                    os.close(fd)
                raise
            if pid == 0:
                try:
                    self.become_worker(config, fds, entered, placed[0] if placed else None)
                finally:
                    os._exit(70)
            try:
                if granted is not None:
                    self.grants.bind(pid, granted)
                self.status_fds[pid] = os.dup(fds[WORKER_FDS.index("status")])
                self.clients[client].add(pid)
                pidfd = os.pidfd_open(pid)
                try:
                    socket.send_fds(connection, [json.dumps({"pid": pid}).encode()], [pidfd])
                finally:
                    os.close(pidfd)
            finally:
                if placed:
                    # Moving a process into a cgroup waits for an RCU grace period (about 10 ms): done
                    # here, while the worker fences itself, it costs the worker's start next to nothing.
                    os.close(placed[0])
                    self.grants.place(pid, granted, placed[1])
        except Exception:  # a malformed request (or a client already gone) gets no worker
            return
        finally:
            for fd in fds:
                os.close(fd)

    @staticmethod
    def descends_from_me(pid: int) -> bool:
        """Whether ``pid`` is one of this server's workers or their descendants (read from /proc)."""
        me = os.getpid()
        for _ in range(4096):
            if pid == me:
                return True
            if pid <= 1:
                return False
            try:
                with open(f"/proc/{pid}/stat") as stream:
                    pid = int(stream.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                return True  # cannot tell: refuse
        return True

    def reap(self) -> None:
        """Collect every worker that ended and write its exit code to its status pipe."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for workers in self.clients.values():
                workers.discard(pid)
            self.grants.release(pid)
            fd = self.status_fds.pop(pid, None)
            if fd is not None:
                try:
                    os.write(fd, str(os.waitstatus_to_exitcode(status)).encode())
                except OSError:
                    pass  # the grader stopped listening
                os.close(fd)

    def become_worker(self, config: dict[str, Any], fds: list[int], entered: tuple[int, int] | None, placed: int | None) -> None:
        """In the forked child: take the descriptors, the limits and the isolation, then serve.

        ``entered``: the child was forked into new namespaces by a process with these user and group ids.
        ``placed``: the pipe on which the server says when it has moved the child into its cgroup.
        """
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        high = {name: fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for name, fd in zip(WORKER_FDS, fds)}
        kept = RESPONSES_FD
        if placed is not None:
            high["placed"], kept = fcntl.fcntl(placed, fcntl.F_DUPFD, 64), PLACED_FD
            config["isolation"]["placed_fd"] = PLACED_FD
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for name, target in (("stdout", 1), ("stderr", 2), ("requests", REQUESTS_FD), ("responses", RESPONSES_FD), ("placed", PLACED_FD)):
            if name in high:
                os.dup2(high[name], target)
        os.closerange(kept + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.chdir(config["workdir"])
        os.environ["HOME"] = config["workdir"]
        self.isolation.die_with_parent()
        requests = os.fdopen(REQUESTS_FD, "rb", buffering=0)
        responses = os.fdopen(RESPONSES_FD, "wb", buffering=0)
        try:
            apply_limits(config["limits"])
        except MemoryError as exc:
            print(f"diffgrade worker: {exc}", file=sys.stderr)
            os._exit(71)
        code = serve_submission(requests, responses, self.server, config, self.protocol, self.isolation, entered)
        sys.stdout.flush()
        os._exit(code)  # skip interpreter teardown: it costs torch most of a second


def serve_submission(
    requests: Any, responses: Any, server: Server, config: dict[str, Any], protocol: Any, isolation: Any, entered: tuple[int, int] | None
) -> int:  # fmt: skip
    """Fence this worker in, say it is ready, then answer requests until told to exit or the channel closes."""
    fenced = isolation.isolate(config["isolation"], entered) if config["isolation"] else {"protections": {}, "warnings": []}
    protocol.write_message(responses, {**server.ready(), **fenced})
    seal = server.seal(protocol)
    broken, code = type(seal).broken, type(seal).broken.__code__  # held here: the submission cannot reach this frame's locals
    while True:
        try:
            header, arrays = protocol.read_message(requests)
        except protocol.PeerClosed:
            return 0
        if header.get("op") == "exit":
            return 0
        for each_header, each_arrays in _each_request(header, arrays):  # one reply per request, as soon as it is made
            try:
                reply, out_arrays = server.handle(each_header, each_arrays)
            except BaseException as exc:  # e.g. an object whose methods raise while the worker inspects it
                reply, out_arrays = {"status": "error", "error": server.describe_exception(exc)}, []
            replaced = broken(seal) if broken.__code__ is code else "the worker's seal"
            if replaced is not None:  # nothing this worker observed can be trusted any more: say so, and stop
                protocol.write_message(responses, tampered(replaced))
                return 0
            protocol.write_message(responses, reply, out_arrays)


def tampered(replaced: str) -> dict[str, Any]:
    """The reply that replaces any other once the submission has replaced part of the worker (``replaced``: what)."""
    return {"status": "error", "error": {"type": "TamperingError", "traceback": "", "message": (
        f"the submission replaced part of the grader's worker ({replaced}), so nothing the worker observed can be trusted; "
        "a submission must leave the grader's code, and the modules it writes its replies with, as they are")}}  # fmt: skip


def _each_request(header: dict[str, Any], arrays: list[Any]) -> list[tuple[dict[str, Any], list[Any]]]:
    """The requests of a message: a "run_each" message holds several "run" requests and how many arrays each has."""
    if header.get("op") != "run_each":
        return [(header, arrays)]
    found, start = [], 0
    for each, count in zip(header["requests"], header["array_counts"]):
        found.append(({**each, "op": "run"}, arrays[start : start + count]))
        start += count
    return found


def _load_sibling(name: str) -> types.ModuleType:
    """Import a module that sits next to this file, without touching sys.path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"diffgrade_worker_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Server:
    """Holds the loaded submission and turns requests into replies."""

    def __init__(self) -> None:
        import numpy
        import torch

        torch.set_num_threads(1)
        self.np = numpy
        self.torch = torch
        # Bound before any submitted code runs, so that patching torch later
        # cannot change how this worker observes results.
        self.tensor_type = torch.Tensor
        self.autograd_grad = torch.autograd.grad
        self.autograd_backward = torch.autograd.backward
        self.enable_grad = torch.enable_grad
        self.grad_enabled = torch.is_grad_enabled
        self.parameter = functools.partial(torch._C.TensorBase._make_subclass, torch.nn.Parameter)  # nn.Parameter(t), past its __new__
        self.sealing = _load_sibling("seal")
        self.facts = self.sealing.TensorFacts(torch)  # a tensor's facts, whatever the submission does to torch.Tensor
        self.multiply, self.add, self.total = torch.mul, torch.add, torch.sum
        self.module: types.ModuleType | None = None
        self.filename = "<submission>"
        self._warm_up()

    def _warm_up(self) -> None:
        """Run the operations solutions commonly use, so that every module they
        load lazily is imported while the worker can still read the disk."""
        torch = self.torch
        function: Any = torch.autograd.Function

        class Square(function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                (x,) = ctx.saved_tensors
                return 2 * x * grad

        for dtype in (torch.float32, torch.float64):
            x = torch.randn(2, 3, dtype=dtype, requires_grad=True)
            total = Square.apply(x @ x.mT).softmax(-1).sum() + torch.finfo(dtype).min * 0
            self.autograd_grad(total, [x], allow_unused=True)
            x.detach().numpy()

    def warm_up_with(self, path: str) -> None:
        """Run the exercise's warm-up file (``warm_up(torch)``); its failure only costs speed, so it is ignored."""
        import importlib.util

        try:
            spec = importlib.util.spec_from_file_location("diffgrade_exercise_warm_up", path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            module.warm_up(self.torch)
        except Exception:
            pass

    def seal(self, protocol: types.ModuleType) -> Any:
        """A seal (:class:`seal.Seal`) of what this worker's observations and replies rest on, made before the submission loads:
        this module, ``protocol`` and the seal's module, their classes, this server and its tensor facts, and the standard
        modules and numpy that replies are written with. What the worker sets itself later (the loaded module, its file
        name) is left out."""
        import builtins
        import json.encoder

        sealing = self.sealing
        modules = {"worker": sys.modules[__name__], "protocol": protocol, "seal": sealing, "json": json, "json.encoder": json.encoder,
                   "struct": struct, "builtins": builtins, "numpy": self.np}  # fmt: skip
        spaces: dict[str, Any] = {name: vars(module) for name, module in modules.items()}
        for name, module in (("worker", modules["worker"]), ("protocol", protocol), ("seal", sealing)):
            spaces |= {f"{name}.{k}": vars(v) for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__}
        spaces |= {"server": vars(self), "server.facts": vars(self.facts)}
        code = [f for space in spaces.values() for f in [*space.values(), *(getattr(v, "__func__", None) for v in space.values())]
                if isinstance(f, types.FunctionType)]  # fmt: skip
        used = sealing.names_used(code)  # of the large modules, only what the worker's own code uses
        return sealing.Seal(spaces, left_out=("module", "filename"), only={"builtins": used, "numpy": used})

    def ready(self) -> dict[str, Any]:
        """Describe this worker once it can take requests."""
        return {"status": "ready", "torch": self.torch.__version__, "numpy": self.np.__version__, "pid": os.getpid()}

    def handle(self, header: dict[str, Any], arrays: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """Answer one request; never raises for anything the submission does."""
        op = header.get("op")
        if op == "load":
            return self.load(header["source"], header["filename"], header["functions"]), []
        if op == "run":
            return Run(self, header, arrays).execute()
        return {"status": "error", "error": {"type": "ProtocolError", "message": f"unknown op {op!r}"}}, []

    def load(self, source: str, filename: str, functions: list[str]) -> dict[str, Any]:
        """Execute the submission's text as a fresh module and describe the named functions."""
        import linecache

        self.filename = filename
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module = types.ModuleType("submission")
        module.__file__ = filename
        sys.modules["submission"] = module
        try:
            code = compile(source, filename, "exec", dont_inherit=True)
            exec(code, module.__dict__)
        except BaseException as exc:  # a submission may raise anything, SystemExit included
            return {"status": "error", "error": self.describe_exception(exc)}
        self.module = module
        return {"status": "ok", "functions": {name: self.describe_function(name) for name in functions}}

    def describe_function(self, name: str) -> dict[str, Any]:
        """Report whether ``name`` exists, is callable, and its parameters."""
        import inspect

        if not hasattr(self.module, name):
            return {"kind": "missing"}
        obj = getattr(self.module, name)
        if not callable(obj):
            return {"kind": "not_callable", "type": type(obj).__name__}
        try:  # the callable's own parameters, those a call binds to: a decorator's wrapper, not the function it wraps
            signature = inspect.signature(obj, follow_wrapped=False)
        except (TypeError, ValueError):
            return {"kind": "callable", "parameters": None}
        parameters = [
            {
                "name": p.name,
                "kind": p.kind.name,
                "default": None if p.default is p.empty else short_repr(p.default),
                "has_default": p.default is not p.empty,
            }
            for p in signature.parameters.values()
        ]
        return {"kind": "callable", "parameters": parameters}

    def describe_exception(self, exc: BaseException) -> dict[str, Any]:
        """Type, message and the submission's own frames of an exception."""
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == self.filename]
        try:
            message = str(exc)
        except BaseException:
            message = "<the exception's message could not be read: its __str__ raised>"
        described: dict[str, Any] = {
            "type": type(exc).__qualname__,
            "message": clip(message),
            "traceback": clip("".join(traceback.format_list(frames))),
        }
        if isinstance(exc, SyntaxError):
            described.update(line=exc.lineno, column=exc.offset, text=clip(exc.text or "").rstrip("\n"))
        return described


class Run:
    """One "run" request: build the inputs, make the calls, observe, differentiate.

    An input tensor is built when a call first uses it (or refills it), so that
    a call that releases the earlier calls' inputs gets new tensors in the
    memory those freed: a submission that caches by ``id()`` or ``data_ptr``
    meets the reuse it would meet in a training loop.
    """

    def __init__(self, server: Server, header: dict[str, Any], arrays: list[Any]) -> None:
        self.server = server
        self.torch = server.torch
        self.header = header
        self.arrays = arrays
        self.out_arrays: list[Any] = []
        self.tensors: list[Any] = [None] * len(header["tensors"])
        self.snapshots: list[tuple[Any, int, tuple[int, int, tuple[int, ...]]] | None] = [None] * len(header["tensors"])
        self.flags: list[bool] = [False] * len(header["tensors"])  # requires_grad as the caller made each input
        self.released: dict[int, bool] = {}  # input -> whether it had changed when it was released
        self.backings: dict[int, Any] = {}  # input -> the numpy array holding a contiguous input's memory
        self.leaves: dict[int, Any] = {}  # activation or expanded input -> the leaf it is a view of (its gradient is read there)
        self.held: dict[int, Any] = {}  # input -> a copy of the .grad it was given before the calls ("held_grad")
        self.grad_touched: set[int] = set()  # inputs whose held .grad torch.autograd.grad changed (:meth:`asked_twice`)
        self.freed: dict[tuple[str, tuple[int, ...]], list[Any]] = {}  # memory of released contiguous inputs
        self.results: list[Any] = []
        self.cpu_s = 0.0  # CPU time spent in the submission's calls and in the backward pass
        self.shared: dict[tuple[str, str], dict[int, Any]] = {}  # (layout, dtype) -> the inputs in that storage, by index

    def tensor(self, index: int) -> Any:
        """Input tensor ``index``, built (and its state noted) at first use."""
        if self.tensors[index] is None:
            if index in self.released:
                raise ValueError(f"input {index} was released before this call")
            tensor = self.make_tensor(index)
            if index in self.leaves:  # already a view of its leaf (an expanded input)
                if self.header["tensors"][index].get("held_grad"):
                    self.hold_grad(index, self.leaves[index])
            elif self.header["tensors"][index].get("activation") and self.server.facts.requires_grad(tensor):
                with self.server.enable_grad():  # (a submission may turn gradients off globally)
                    self.leaves[index], tensor = tensor, tensor[...]  # a view of a leaf that requires grad is not a leaf
            elif self.header["tensors"][index].get("held_grad") and self.server.facts.requires_grad(tensor):
                self.hold_grad(index, tensor)
            elif self.header["tensors"][index].get("parameter") and self.server.facts.requires_grad(tensor):
                tensor = self.server.parameter(tensor, True)  # a model's weight: the same memory, as a leaf nn.Parameter
            self.tensors[index] = tensor
            self.snapshots[index] = self.snapshot(tensor)
            self.flags[index] = self.server.facts.requires_grad(tensor)
        return self.tensors[index]

    def hold_grad(self, index: int, leaf: Any) -> None:
        """Give leaf input ``index`` a ``.grad`` before any call, as an earlier micro-batch of gradient accumulation leaves
        one: the caller's, which a call must neither reset nor change (:meth:`changed` compares it with a copy)."""
        facts = self.server.facts
        spec = self.header["tensors"][index]
        held = self.torch.from_numpy(self.server.np.full(tuple(facts.shape(leaf)), float(spec["held_grad"]), dtype=spec["dtype"]))
        facts.set_grad(leaf, held)
        self.held[index] = facts.clone(held)

    def make_tensor(self, index: int) -> Any:
        """Build input tensor ``index`` with the requested dtype and memory layout."""
        spec = self.header["tensors"][index]
        torch = self.torch
        if spec["dtype"] not in INPUT_DTYPES:  # the allow-list: a request names no other attribute of torch
            raise KeyError(spec["dtype"])
        dtype = getattr(torch, spec["dtype"])
        layout = spec.get("layout", "contiguous")
        if layout == "contiguous" and spec["dtype"] == "bfloat16":  # (numpy has no bfloat16 to hold the memory in)
            return torch.from_numpy(self.arrays[spec["array"]].copy()).to(dtype).requires_grad_(bool(spec.get("requires_grad", False)))
        if layout == "contiguous":
            memory = self.backings[index] = self.backing(spec)
            return torch.from_numpy(memory).requires_grad_(bool(spec.get("requires_grad", False)))
        if layout == "packed":
            tensor = self.packed_slot(index, dtype)
        elif layout == "aliased":
            tensor = self.aliased_slot(index, dtype)
        elif layout == "stacked":
            tensor = self.stacked_slot(index)
        else:
            data = torch.from_numpy(self.arrays[spec["array"]].copy()).to(dtype)
            if spec.get("requires_grad") and (base := self.expanded_from(data, layout)) is not None:
                # The tensor an input expands is the leaf, and its gradient is read there (the sum over the dim), as a model's
                # gradient reaches the tensor it broadcast.
                self.leaves[index] = base.requires_grad_(True)
                with self.server.enable_grad():  # (a submission may turn gradients off globally)
                    return base.expand(data.shape)
            tensor = self.laid_out(data, layout)
        return tensor.requires_grad_(bool(spec.get("requires_grad", False)))

    def laid_out(self, data: Any, layout: str) -> Any:
        """``data``'s values in memory laid out as ``layout`` says (as they are when a layout needs more axes than it has)."""
        torch = self.torch
        if layout == "transposed" and data.dim() >= 2:
            return data.transpose(-1, -2).contiguous().transpose(-1, -2)
        if layout in ("sliced", "fused") and data.dim() >= 1:  # every other column, or the middle third of a fused projection
            last = data.shape[-1]
            wide = torch.zeros(*data.shape[:-1], (2 if layout == "sliced" else 3) * last, dtype=data.dtype)
            part = (slice(None, None, 2) if layout == "sliced" else slice(last, 2 * last))
            wide[..., part] = data
            return wide[..., part]
        if layout in ("offset", "packed"):  # contiguous, but not at the start of its storage
            storage = torch.zeros(data.numel() + 7, dtype=data.dtype)
            tensor = storage[7:].view(data.shape)
            tensor.copy_(data)
            return tensor
        if (base := self.expanded_from(data, layout)) is not None:
            return base.expand(data.shape)
        if layout == "heads_permuted" and data.dim() >= 3:  # token-major memory; with one head too, whose stride is then the token's
            return data.transpose(1, 2).clone(memory_format=torch.contiguous_format).transpose(1, 2)
        if layout.startswith("order@"):  # the axes stored outermost first in this order (those the tensor has; as domain.axis_order)
            order = [axis for axis in map(int, layout.split("@", 1)[1].split(",")) if axis < data.dim()]
            if sorted(order) == list(range(data.dim())):
                return data.permute(order).contiguous().permute([order.index(axis) for axis in range(data.dim())])
        return data

    def expanded_from(self, data: Any, layout: str) -> Any:
        """For an "expanded" layout, the tensor that ``data`` expands along the layout's dim (its first element there, in
        memory of its own); None for another layout or a tensor without that dim (it stays as it is). The grader sends
        values that repeat the first element along the dim."""
        if not layout.startswith("expanded") or data.dim() < 2:
            return None
        axis = int(layout.split("@", 1)[1]) if "@" in layout else 0
        return data[(slice(None),) * axis + (slice(0, 1),)].clone() if axis < data.dim() else None

    def packed_slot(self, index: int, dtype: Any) -> Any:
        """Input ``index`` in the one storage that every "packed" input of its dtype lies in, as the parts of one fused
        projection are: when they share leading axes ([B, H, T] of attention's inputs), each is a slice of the last axis of
        one [..., total width] tensor (its ``_base``); otherwise they lie one after another at non-zero offsets. Their order
        is that of their own values, not of the arguments: which part comes first is the model's choice, and code that
        assumes one (q1, k1, q2, k2, value, say) must meet another. The storage is filled with all of them at once: views
        share one version counter, which filling one later would move for the others."""
        name = self.header["tensors"][index]["dtype"]
        if ("packed", name) not in self.shared:
            members = self.sharing("packed", name)
            members.sort(key=lambda member: float(member[1].flat[0]) if member[1].size else 0.0)
            shapes = [values.shape for _, values in members]
            shared = 0
            while all(len(shape) > shared + 1 and shape[shared] == shapes[0][shared] for shape in shapes):
                shared += 1
            places = {}
            if shared:
                lead = shapes[0][:shared]
                widths = [math.prod(shape[shared:]) for shape in shapes]
                fused = self.torch.zeros(*lead, sum(widths), dtype=dtype)
                starts = [sum(widths[:n]) for n in range(len(widths))]
                for (i, values), start, width in zip(members, starts, widths):
                    places[i] = fused[..., start : start + width].view(values.shape)
            else:
                storage = self.torch.zeros(sum(values.size + PACKED_GAP for _, values in members) + PACKED_GAP, dtype=dtype)
                end = PACKED_GAP
                for i, values in members:
                    places[i] = storage[end : end + values.size].view(values.shape)
                    end += values.size + PACKED_GAP
            for i, values in members:
                places[i].copy_(self.torch.from_numpy(values.astype(name)))
            self.shared["packed", name] = places
        return self.shared["packed", name][index]

    def aliased_slot(self, index: int, dtype: Any) -> Any:
        """Input ``index`` as a view of the one storage at whose element ALIASED_OFFSET every "aliased" input of its dtype
        starts: the n-th of them (in argument order) with its elements n + 1 apart, so that all have one data_ptr() and
        share some elements, as two views of one parameter do. The grader sends values that agree wherever two inputs share
        an element (grader.toolkit.domain.aliased); an input whose values do not (a counterexample being shrunk) gets
        memory of its own at an offset instead, so every input holds exactly the values sent. All are filled at once, as
        for "packed"."""
        name = self.header["tensors"][index]["dtype"]
        if ("aliased", name) not in self.shared:
            torch = self.torch
            members = self.sharing("aliased", name)
            size = ALIASED_OFFSET + max((values.size - 1) * (n + 1) + 1 for n, (_, values) in enumerate(members))
            storage, filled = torch.zeros(size, dtype=dtype), torch.zeros(size, dtype=torch.bool)
            places = {}
            for n, (i, values) in enumerate(members):
                data = torch.from_numpy(values.astype(name))
                strides = [(n + 1) * math.prod(values.shape[axis + 1 :]) for axis in range(values.ndim)]
                view, seen = (memory.as_strided(values.shape, strides, ALIASED_OFFSET) for memory in (storage, filled))
                if torch.equal(view[seen], data[seen]):
                    view.copy_(data)
                    seen.fill_(True)
                    places[i] = view
                else:
                    places[i] = self.laid_out(data, "offset")
            self.shared["aliased", name] = places
        return self.shared["aliased", name][index]

    def stacked_slot(self, index: int) -> Any:
        """Input ``index`` as one slice of a buffer that stacks every "stacked" input of its dtype and shape, in argument
        order, on a new axis before the last (``[..., n, D]``), as the parts of one fused projection are (keys and values
        of a fused KV projection: same strides, the second D elements after the first)."""
        name = self.header["tensors"][index]["dtype"]
        if ("stacked", name) not in self.shared:
            groups: dict[tuple[int, ...], list[tuple[int, Any]]] = {}
            for i, values in self.sharing("stacked", name):
                groups.setdefault(values.shape, []).append((i, values))
            places: dict[int, Any] = {}
            for members in groups.values():
                dim = max(members[0][1].ndim - 1, 0)
                buffer = self.torch.stack([self.torch.from_numpy(values.astype(name)) for _, values in members], dim=dim)
                places |= {i: buffer.select(dim, n) for n, (i, _) in enumerate(members)}
            self.shared["stacked", name] = places
        return self.shared["stacked", name][index]

    def sharing(self, layout: str, name: str) -> list[tuple[int, Any]]:
        """The inputs of ``layout`` and dtype ``name`` (index and values), in argument order."""
        return [(i, self.arrays[spec["array"]]) for i, spec in enumerate(self.header["tensors"])
                if spec.get("layout") == layout and spec["dtype"] == name]  # fmt: skip

    def backing(self, spec: dict[str, Any]) -> Any:
        """The memory of a contiguous input: a released input's of the same dtype and shape when nothing holds it any more.

        A fresh tensor over freed memory has a new id, the old data_ptr and
        version 0, as the next step's tensors of a training loop have. Memory
        that the submission still holds (a cached tensor or a view of it) is
        not reused, as an allocator would not reuse it either.
        """
        values = self.arrays[spec["array"]].astype(spec["dtype"])
        free = self.freed.get((values.dtype.str, values.shape), [])
        for i in range(len(free)):
            if sys.getrefcount(free[i]) == 2:  # the list and getrefcount's argument: no tensor holds it any more
                self.server.np.copyto(free[i], values)
                return free.pop(i)
        return values

    def argument(self, spec: dict[str, Any]) -> Any:
        """Resolve one argument: an input tensor, a JSON value, or an earlier call's result."""
        if "tensor" in spec:
            return self.tensor(spec["tensor"])
        if "result" in spec:
            return self.results[spec["result"]]
        return spec["value"]

    def prepare(self, call: dict[str, Any]) -> None:
        """What a call asks for before it is made: release the earlier calls' inputs and results, refill inputs."""
        arguments = [*call.get("args", []), *call.get("kwargs", {}).values()]
        if call.get("release"):
            keep = {a["tensor"] for a in arguments if "tensor" in a}
            for index, tensor in enumerate(self.tensors):
                if tensor is not None and index not in keep:
                    self.released[index] = self.changed(index)
                    memory = self.backings.pop(index, None)
                    if memory is not None:
                        self.freed.setdefault((memory.dtype.str, memory.shape), []).append(memory)
                    self.tensors[index] = self.snapshots[index] = None
                    self.leaves.pop(index, None)
                    self.held.pop(index, None)
                    self.grad_touched.discard(index)
                    del tensor, memory
            used = {a["result"] for a in arguments if "result" in a}
            self.results = [r if i in used else None for i, r in enumerate(self.results)]
        for index, array in call.get("refill", []):
            tensor = self.tensor(index)
            target = tensor.data if call.get("refill_through_data") else tensor
            with self.torch.no_grad():
                target.copy_(self.torch.from_numpy(self.arrays[array].copy()).to(tensor.dtype))
            self.snapshots[index] = self.snapshot(tensor)

    def snapshot(self, tensor: Any) -> tuple[Any, int, tuple[int, int, tuple[int, ...]]]:
        """What :meth:`changed` compares an input with later: a copy of its values, its version counter, and where its
        elements lie (address, storage offset, strides: ``x.data = y`` moves them without a write or a new version)."""
        facts = self.server.facts
        return facts.clone(facts.detach(tensor)), facts.version(tensor), (facts.data_ptr(tensor), facts.storage_offset(tensor), facts.stride(tensor))

    def execute(self) -> tuple[dict[str, Any], list[Any]]:
        """Make every call, then the backward pass if one was asked for."""
        calls: list[dict[str, Any]] = []
        for call in self.header["calls"]:
            needed = [a["result"] for a in [*call.get("args", []), *call.get("kwargs", {}).values()] if "result" in a]
            if any(calls[i]["status"] != "returned" for i in needed):
                self.results.append(None)
                calls.append({"status": "skipped"})
                continue
            self.prepare(call)
            function: Any = getattr(self.server.module, call["fn"], None)
            args = [self.argument(a) for a in call.get("args", [])]
            kwargs = {k: self.argument(a) for k, a in call.get("kwargs", {}).items()}
            started, cpu = time.perf_counter(), time.process_time()
            try:
                with self.grad_mode(call.get("grad_mode", "enabled")):
                    called_in = self.server.grad_enabled()
                    result = function(*args, **kwargs)
                    left = self.server.grad_enabled()
            except BaseException as exc:
                self.results.append(None)
                calls.append({"status": "raised", "error": self.server.describe_exception(exc)})
                continue
            finally:
                self.cpu_s += time.process_time() - cpu
                del args, kwargs
            self.results.append(result)
            extra: dict[str, Any] = {} if left == called_in else {"grad_mode_left": bool(left)}
            if (now := call.get("backward_now")) is not None:  # a training step's backward pass, before the next call
                extra["backward_now"] = self.backward([len(self.results) - 1], [self.arrays[now["cotangent"]]], ["contiguous"],
                                                      bool(now.get("retain_graph")), report=False)  # fmt: skip
            facts = self.observe(result, call.get("max_elements"))
            if facts["exact_tensor"] and call.get("grad_mode") != "inference_mode" and self.server.facts.is_inference(result):
                facts["inference_outside"] = True  # its caller, outside inference mode, can neither write into it nor differentiate it
            calls.append({"status": "returned", "seconds": time.perf_counter() - started, **facts, **extra})
            del result  # a later call may release it, and with it the inputs its graph holds
        for call, result in zip(calls[:-1], self.results):  # only a later call can have written into a result
            if call["status"] == "returned" and self.overwritten(result, call.get("value")):
                call["overwritten"] = True
        reply: dict[str, Any] = {"status": "ok", "calls": calls, "inputs_changed_by_forward": self.changed_inputs()}
        backward = self.header.get("backward")
        if backward is not None:
            layouts = backward.get("layouts") or ["contiguous"] * len(backward["calls"])
            reply["backward"] = self.backward(backward["calls"], [self.arrays[i] for i in backward["cotangents"]], layouts)
            reply["inputs_changed_by_backward"] = self.changed_inputs()
        reply["cpu_s"] = self.cpu_s
        return reply, self.out_arrays

    def grad_mode(self, mode: str) -> Any:
        """The autograd mode a call is made in: "enabled", "no_grad" or "inference_mode"."""
        torch = self.torch
        return {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(mode, torch.enable_grad)()

    def overwritten(self, result: Any, array: int | None) -> bool:
        """Whether a returned float tensor no longer holds the values sent for it (a later call wrote into it)."""
        facts = self.server.facts
        if array is None or type(result) is not self.server.tensor_type or facts.dtype(result) not in (self.torch.float32, self.torch.float64):
            return False
        try:
            now = self.values(result)
        except BaseException:
            return False
        return not self.server.np.array_equal(now, self.out_arrays[array], equal_nan=True)

    def observe(self, result: Any, max_elements: int | None = None) -> dict[str, Any]:
        """Facts about a returned object, and its values if it is a plain tensor.

        Values of more than ``max_elements`` elements are withheld (their count
        is sent instead): the grader would refuse them, and copying and sending
        them could take longer than the call.
        """
        kind = type(result)
        facts: dict[str, Any] = {
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "is_tensor": isinstance(result, self.server.tensor_type),
            "exact_tensor": kind is self.server.tensor_type,
            # Only what is not a tensor is described by its repr; formatting a tensor's every element costs more than the call.
            "repr": "" if isinstance(result, self.server.tensor_type) else self.described(result),
        }
        if isinstance(result, (tuple, list)):
            facts["length"] = len(result)
        if facts["exact_tensor"]:
            read = self.server.facts
            facts.update(
                shape=list(read.shape(result)),
                dtype=str(read.dtype(result)).replace("torch.", ""),
                device=str(read.device(result)),
                layout=str(read.layout(result)),
                requires_grad=bool(read.requires_grad(result)),
                has_grad_fn=read.grad_fn(result) is not None,
            )
            if type(max_elements) is int and read.numel(result) > max_elements:
                facts["value"], facts["withheld"] = None, int(read.numel(result))
                return facts
            try:
                facts["value"] = self.add_array(result)
            except BaseException as exc:
                facts["value"] = None
                facts["value_error"] = clip(f"{type(exc).__name__}: {exc}", 300)
        return facts

    def described(self, value: Any, depth: int = 0) -> str:
        """A short description of a returned object that is not a tensor: a tuple or list by its items, each tensor in it by
        its shape and dtype (a repr would format every element), anything else by its repr."""
        if type(value) not in (tuple, list) or depth > 1:
            return short_repr(value)
        try:
            items = [f"a {str(self.server.facts.dtype(item)).replace('torch.', '')} tensor of shape {list(self.server.facts.shape(item))}"
                     if isinstance(item, self.server.tensor_type) else self.described(item, depth + 1) for item in value[:TUPLE_ITEMS]]  # fmt: skip
        except BaseException:
            return short_repr(value)
        items += [f"... {len(value) - TUPLE_ITEMS} more"] if len(value) > TUPLE_ITEMS else []
        text = ", ".join(items) + ("," if type(value) is tuple and len(value) == 1 else "")
        return clip(f"({text})" if type(value) is tuple else f"[{text}]", 200)

    def add_array(self, tensor: Any) -> int | None:
        """Queue a tensor's values for the reply; float32/float64 are sent as they are."""
        facts = self.server.facts
        if facts.is_complex(tensor) or facts.layout(tensor) != self.torch.strided:
            return None
        self.out_arrays.append(self.values(tensor).copy())  # its values now: a later call may write into the tensor
        return len(self.out_arrays) - 1

    def values(self, tensor: Any) -> Any:
        """A dense strided tensor's values as a numpy array (float32 and float64 as they are, other dtypes as float64)."""
        torch, facts = self.torch, self.server.facts
        values = facts.resolve_neg(facts.resolve_conj(facts.cpu(facts.detach(tensor))))
        if facts.dtype(values) not in (torch.float32, torch.float64):
            values = facts.to(values, torch.float64)
        return facts.numpy(facts.contiguous(values))

    def changed_inputs(self) -> list[int]:
        """The input tensors whose values, version counter, place in memory or caller's state changed (while the grader was not
        refilling them)."""
        return [index for index in range(len(self.tensors)) if self.changed(index)]

    def changed(self, index: int) -> bool:
        """Whether input ``index`` changed since it was built or last refilled (never for one never built).

        Its values, its version counter (an in-place write that put the same
        values back), where its elements lie (``x.data`` replaced by a copy),
        or the caller's own state of it: requires_grad switched, a ``.grad``
        left by a backward pass the submission ran, or the ``.grad`` it held
        before the calls reset or changed.
        """
        if index in self.released:
            return self.released[index]
        tensor, snapshot = self.tensors[index], self.snapshots[index]
        if tensor is None or snapshot is None:
            return False
        before, version, placement = snapshot
        facts = self.server.facts
        current = facts.detach(tensor)
        if facts.version(tensor) != version or not self.same(current, before):
            return True
        if (facts.data_ptr(tensor), facts.storage_offset(tensor), facts.stride(tensor)) != placement:
            return True
        if facts.requires_grad(tensor) != self.flags[index]:
            return True
        if index in self.grad_touched:
            return True
        leaf = self.leaves.get(index, tensor)
        grad, held = facts.grad(leaf) if facts.is_leaf(leaf) else None, self.held.get(index)
        if held is None:
            return grad is not None
        return grad is None or not self.same(facts.detach(grad), held)

    def same(self, current: Any, before: Any) -> bool:
        """Whether tensor ``current`` has the shape and values of the copy ``before``."""
        facts = self.server.facts
        return bool(facts.shape(current) == facts.shape(before) and facts.equal(current, before))

    def backward(self, indices: list[int], cotangents: list[Any], layouts: list[str], retain: bool = False, report: bool = True) -> dict[str, Any]:
        """Gradients of the sum of <result[i], cotangent_i> with respect to the inputs that require them.

        One pass for all: calls on separate inputs get their own gradients. Each cotangent is laid out in memory as
        ``layouts`` says, and so is the gradient that reaches the submission's backward pass (as when a model reads
        the output through a transpose); a cotangent of ones is the result's plain sum instead (stride 0). ``retain``:
        the graph is kept for another pass; without ``report``, only the pass's status is sent (no gradient).
        """
        torch, server, facts = self.torch, self.server, self.server.facts
        outputs = [self.results[i] for i in indices]
        if any(type(output) is not server.tensor_type for output in outputs):
            return {"status": "skipped", "reason": "the call did not return a plain torch.Tensor"}
        wanted = [i for i, t in enumerate(self.tensors) if t is not None and facts.requires_grad(t)]
        for output, cotangent in zip(outputs, cotangents):
            if list(facts.shape(output)) != list(cotangent.shape) and facts.numel(output) != cotangent.size:
                raise ValueError(f"the output has shape {list(facts.shape(output))}, so no gradient could be taken with respect to an "
                                 f"output of the expected shape {list(cotangent.shape)}")  # fmt: skip
        seeds = [
            self.laid_out(torch.from_numpy(cotangent.copy()).to(facts.dtype(output) if facts.is_floating_point(output) else torch.float64)
                          .reshape(facts.shape(output)), layout)
            for output, cotangent, layout in zip(outputs, cotangents, layouts)
        ]  # fmt: skip
        detached = [i for i, output in enumerate(outputs) if not facts.requires_grad(output)]
        complex_ = [i for i, output in enumerate(outputs) if facts.is_complex(output)]
        if detached:  # what torch.autograd.grad says of such an output, whatever the others
            error = RuntimeError(f"element {detached[0]} of tensors does not require grad and does not have a grad_fn")
            return {"status": "raised", "error": server.describe_exception(error)}
        if complex_:
            error = RuntimeError(f"output {complex_[0]} is complex ({facts.dtype(outputs[complex_[0]])}): only real outputs have these gradients")
            return {"status": "raised", "error": server.describe_exception(error)}
        try:
            # The scalar sum of <output, seed> has exactly the seeds as its gradients with respect to the
            # outputs. Differentiating it, rather than passing grad_outputs, keeps torch from importing
            # its symbolic-shape machinery (sympy: 0.4 s and 34 MB) in the fork server or any worker.
            # It is built with gradients on (a submission may turn them off globally) and with
            # functions bound before the submission was loaded.
            # A cotangent of ones is taken as the caller's output.sum(), whose gradient reaches the submission's backward
            # pass as one element expanded (stride 0), as it does for every `loss = out.sum()`.
            with server.enable_grad():
                terms = [server.total(output) if bool((cotangent == 1.0).all()) else server.total(server.multiply(output, seed))
                         for output, seed, cotangent in zip(outputs, seeds, cotangents)]  # fmt: skip
                total = terms[0]
                for term in terms[1:]:
                    total = server.add(total, term)
            inputs = [self.leaves.get(i, self.tensors[i]) for i in wanted]
            if report and any(i in self.held for i in wanted):
                grads, added = self.asked_twice(total, wanted, inputs, retain)
            else:
                grads, added = self.accumulated(total, inputs, retain), {}
        except BaseException as exc:
            return {"status": "raised", "error": server.describe_exception(exc)}
        if not report:
            return {"status": "ok"}
        found: dict[str, Any] = {}
        for i, grad in zip(wanted, grads):
            found[str(i)] = None if grad is None else self.add_array(grad)
        reply: dict[str, Any] = {"status": "ok", "grads": found}
        if added:
            reply["accumulated"] = {str(i): None if grad is None else self.add_array(grad) for i, grad in added.items()}
        return reply

    def accumulated(self, total: Any, inputs: list[Any], retain: bool = False) -> list[Any]:
        """The gradients of ``total`` with respect to ``inputs`` (None for one it does not reach), as a training loop gets them.

        ``total.backward()`` with no ``inputs`` argument, then each input's ``.grad``, none held before (reentrant
        checkpointing, ``torch.utils.checkpoint(..., use_reentrant=True)``, supports that way alone: calls whose inputs hold
        no ``.grad`` meet it). What an input held in ``.grad`` before is put back, so the submission's own doing stays visible.
        """
        facts = self.server.facts
        before = [facts.grad(tensor) for tensor in inputs]
        for tensor in inputs:
            facts.set_grad(tensor, None)
        cpu = time.process_time()
        try:
            self.server.autograd_backward(total, retain_graph=retain)
            return [facts.grad(tensor) for tensor in inputs]
        finally:
            self.cpu_s += time.process_time() - cpu
            for tensor, grad in zip(inputs, before):
                facts.set_grad(tensor, grad)

    def asked_twice(self, total: Any, wanted: list[int], inputs: list[Any], retain: bool = False) -> tuple[list[Any], dict[int, Any]]:
        """The gradients of ``total`` with respect to ``inputs`` (input numbers ``wanted``) asked for both ways a caller who
        accumulates them asks, when some inputs keep the ``.grad`` of earlier micro-batches (:attr:`held`):
        ``torch.autograd.grad`` first, whose gradients are returned and which must leave every ``.grad`` as it was, then
        ``total.backward()``, which must add the same gradients to what each held ``.grad`` holds; with the first's
        gradients, the ``.grad`` of each holding input after the second (the grader subtracts what it held). A ``.grad``
        that the first changed makes its input a changed one (:meth:`changed`); every ``.grad`` is put back after."""
        facts, server = self.server.facts, self.server
        before = [facts.grad(tensor) for tensor in inputs]
        copies = [None if grad is None else facts.clone(facts.detach(grad)) for grad in before]
        cpu = time.process_time()
        try:
            grads = list(server.autograd_grad(total, inputs, retain_graph=True, allow_unused=True))
            for i, tensor, grad, copy in zip(wanted, inputs, before, copies):
                now = facts.grad(tensor)
                if i in self.held and (now is not grad or (now is not None and not self.same(facts.detach(now), copy))):
                    self.grad_touched.add(i)
                facts.set_grad(tensor, facts.clone(self.held[i]) if i in self.held else None)
            server.autograd_backward(total, retain_graph=retain)
            return grads, {i: facts.grad(tensor) for i, tensor in zip(wanted, inputs) if i in self.held}
        finally:
            self.cpu_s += time.process_time() - cpu
            for tensor, grad in zip(inputs, before):
                facts.set_grad(tensor, grad)


def short_repr(value: Any) -> str:
    """A bounded repr that survives objects whose __repr__ misbehaves."""
    try:
        return clip(repr(value), 200)
    except BaseException:
        return f"<{type(value).__name__} object with a failing repr>"


def clip(text: str, limit: int = TEXT_LIMIT) -> str:
    """Shorten text to ``limit`` characters, saying how much was cut."""
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more characters]"


if __name__ == "__main__":
    sys.exit(main(sys.argv))
