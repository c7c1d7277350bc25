"""The worker process: loads a submission and evaluates the calls it is sent.

Run as ``python -I -u child.py REQUEST_FD RESPONSE_FD CONFIG_JSON`` by
:mod:`grader.worker.client`, in an empty working directory. Everything here is
on the untrusted side of the boundary: the worker reports plain arrays and
observed facts, and the grader process decides what they are worth. Resource
limits are applied before numpy or torch is imported so that they bind the
whole process; the isolation of :mod:`isolation` follows once torch is warm,
before the submission is loaded.
"""

from __future__ import annotations

import json
import os
import resource
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


def apply_limits(limits: dict[str, int | None]) -> None:
    """Set the resource limits named in ``limits`` (None leaves one unchanged)."""
    for name, value in limits.items():
        if value is not None:
            resource.setrlimit(LIMITS[name], (value, value))


def main(argv: list[str]) -> int:
    """Serve requests on the two descriptors until told to exit or the channel closes."""
    request_fd, response_fd = int(argv[1]), int(argv[2])
    config = json.loads(argv[3])
    del sys.argv[1:]  # the submission has no business with the descriptors or the hidden paths
    apply_limits(config["limits"])
    # Loaded from their files: putting the grader's folder on sys.path would
    # let the submission import whatever lies beside it (the reference, say).
    protocol, isolation = (_load_sibling(name) for name in ("protocol", "isolation"))
    isolation.die_with_parent()

    requests = os.fdopen(request_fd, "rb", buffering=0)
    responses = os.fdopen(response_fd, "wb", buffering=0)
    server = Server()
    fenced = isolation.isolate(config["isolation"]) if config["isolation"] else {"protections": {}, "warnings": []}
    protocol.write_message(responses, {**server.ready(), **fenced})
    while True:
        try:
            header, arrays = protocol.read_message(requests)
        except protocol.PeerClosed:
            return 0
        if header.get("op") == "exit":
            return 0
        try:
            reply, out_arrays = server.handle(header, arrays)
        except BaseException as exc:  # e.g. an object whose methods raise while the worker inspects it
            reply, out_arrays = {"status": "error", "error": server.describe_exception(exc)}, []
        protocol.write_message(responses, reply, out_arrays)


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
        self.equal = torch.equal
        self.autograd_grad = torch.autograd.grad
        self.module: types.ModuleType | None = None
        self.filename = "<submission>"
        self._warm_up()

    def _warm_up(self) -> None:
        """Run the operations solutions commonly use, so that every module they
        load lazily is imported while the worker can still read the disk."""
        torch = self.torch

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                (x,) = ctx.saved_tensors
                return 2 * x * grad

        for dtype in (torch.float32, torch.float64):
            q = torch.randn(1, 2, 3, 2, dtype=dtype, requires_grad=True)
            keep = torch.ones(3, 3, dtype=torch.bool).tril()
            logits = torch.einsum("bhid,bhjd->bhij", q, q).masked_fill(~keep, float("-inf"))
            total = logits.softmax(-1).sum() + logits.log_softmax(-1).exp().sum() + torch.logsumexp(logits, -1).sum()
            total = total + torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
            total = total + Square.apply(torch.bmm(q[0], q[0].mT)).sum() + torch.finfo(dtype).min * 0
            self.autograd_grad(total, [q])
            shaped = torch.nn.functional.softmax(q, dim=-1) * q
            self.autograd_grad([shaped], [q], grad_outputs=[torch.ones_like(shaped)], allow_unused=True)
            q.detach().numpy()

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
        try:
            signature = inspect.signature(obj)
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
    """One "run" request: build the inputs, make the calls, observe, differentiate."""

    def __init__(self, server: Server, header: dict[str, Any], arrays: list[Any]) -> None:
        self.server = server
        self.torch = server.torch
        self.header = header
        self.arrays = arrays
        self.out_arrays: list[Any] = []
        self.tensors = [self.make_tensor(spec) for spec in header["tensors"]]
        self.snapshots = [(t.detach().clone(), t._version) for t in self.tensors]
        self.results: list[Any] = []

    def make_tensor(self, spec: dict[str, Any]) -> Any:
        """Build an input tensor with the requested dtype and memory layout."""
        torch = self.torch
        dtype = {"float32": torch.float32, "float64": torch.float64}[spec["dtype"]]
        data = torch.from_numpy(self.arrays[spec["array"]].copy()).to(dtype)
        layout = spec.get("layout", "contiguous")
        if layout == "transposed":
            tensor = data.transpose(-1, -2).contiguous().transpose(-1, -2)
        elif layout == "sliced":
            wide = torch.zeros(*data.shape[:-1], 2 * data.shape[-1], dtype=dtype)
            wide[..., ::2] = data
            tensor = wide[..., ::2]
        elif layout == "heads_permuted":
            tensor = data.transpose(1, 2).contiguous().transpose(1, 2)
        else:
            tensor = data
        return tensor.requires_grad_(bool(spec.get("requires_grad", False)))

    def argument(self, spec: dict[str, Any]) -> Any:
        """Resolve one argument: an input tensor, a JSON value, or an earlier call's result."""
        if "tensor" in spec:
            return self.tensors[spec["tensor"]]
        if "result" in spec:
            return self.results[spec["result"]]
        return spec["value"]

    def execute(self) -> tuple[dict[str, Any], list[Any]]:
        """Make every call, then the backward pass if one was asked for."""
        calls: list[dict[str, Any]] = []
        for call in self.header["calls"]:
            needed = [a["result"] for a in [*call.get("args", []), *call.get("kwargs", {}).values()] if "result" in a]
            if any(calls[i]["status"] != "returned" for i in needed):
                self.results.append(None)
                calls.append({"status": "skipped"})
                continue
            function = getattr(self.server.module, call["fn"], None)
            args = [self.argument(a) for a in call.get("args", [])]
            kwargs = {k: self.argument(a) for k, a in call.get("kwargs", {}).items()}
            started = time.perf_counter()
            try:
                result = function(*args, **kwargs)
            except BaseException as exc:
                self.results.append(None)
                calls.append({"status": "raised", "error": self.server.describe_exception(exc)})
                continue
            self.results.append(result)
            calls.append({"status": "returned", "seconds": time.perf_counter() - started, **self.observe(result)})
        reply: dict[str, Any] = {"status": "ok", "calls": calls, "inputs_after_forward": self.input_changes()}
        backward = self.header.get("backward")
        if backward is not None:
            reply["backward"] = self.backward(backward["call"], self.arrays[backward["cotangent"]])
            reply["inputs_after_backward"] = self.input_changes()
        return reply, self.out_arrays

    def observe(self, result: Any) -> dict[str, Any]:
        """Facts about a returned object, and its values if it is a plain tensor."""
        kind = type(result)
        facts: dict[str, Any] = {
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "is_tensor": isinstance(result, self.server.tensor_type),
            "exact_tensor": kind is self.server.tensor_type,
            "repr": short_repr(result),
        }
        if isinstance(result, (tuple, list)):
            facts["length"] = len(result)
        if facts["exact_tensor"]:
            facts.update(
                shape=list(result.shape),
                dtype=str(result.dtype).replace("torch.", ""),
                device=str(result.device),
                layout=str(result.layout),
                requires_grad=bool(result.requires_grad),
                has_grad_fn=result.grad_fn is not None,
            )
            try:
                facts["value"] = self.add_array(result)
            except BaseException as exc:
                facts["value"] = None
                facts["value_error"] = clip(f"{type(exc).__name__}: {exc}", 300)
        return facts

    def add_array(self, tensor: Any) -> int | None:
        """Queue a tensor's values for the reply; float32/float64 are sent as they are."""
        torch = self.torch
        if tensor.is_complex() or tensor.layout != torch.strided:
            return None
        values = tensor.detach().cpu().resolve_conj().resolve_neg()
        if values.dtype not in (torch.float32, torch.float64):
            values = values.to(torch.float64)
        self.out_arrays.append(values.contiguous().numpy())
        return len(self.out_arrays) - 1

    def input_changes(self) -> list[dict[str, Any]]:
        """For each input tensor: did its values or its version counter change?"""
        changes = []
        for tensor, (before, version) in zip(self.tensors, self.snapshots):
            current = tensor.detach()
            same = current.shape == before.shape and bool(self.server.equal(current, before))
            changes.append({"values_changed": not same, "version_before": version, "version_after": tensor._version})
        return changes

    def backward(self, index: int, cotangent: Any) -> dict[str, Any]:
        """Gradients of <result[index], cotangent> with respect to the inputs that require them."""
        torch = self.torch
        output = self.results[index]
        if type(output) is not self.server.tensor_type:
            return {"status": "skipped", "reason": "the call did not return a plain torch.Tensor"}
        wanted = [i for i, t in enumerate(self.tensors) if t.requires_grad]
        dtype = output.dtype if output.is_floating_point() else torch.float64
        try:
            grads = self.server.autograd_grad(
                [output],
                [self.tensors[i] for i in wanted],
                grad_outputs=[torch.from_numpy(cotangent.copy()).to(dtype).reshape(output.shape)],
                allow_unused=True,
            )
        except BaseException as exc:
            return {"status": "raised", "error": self.server.describe_exception(exc)}
        found: dict[str, Any] = {}
        for i, grad in zip(wanted, grads):
            found[str(i)] = None if grad is None else self.add_array(grad)
        return {"status": "ok", "grads": found}


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
