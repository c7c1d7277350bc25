"""Describe calls to make in the worker, and read back what it observed.

The grader builds a :class:`Request` from plain numpy inputs; :func:`invoke`
sends it to a worker and turns the untrusted reply into an :class:`Outcome`,
checking the type of every field it keeps. Any reply that does not have the
expected shape becomes a failure message, never an exception.

The grader protects itself from what a reply may hold: arrays larger than a
request can need are refused before they are read (:func:`reply_limit`),
and every string is clipped and cleaned of control characters as it is read
(:mod:`grader.worker.client`, :mod:`grader.toolkit.safetext`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import numpy as np

from grader.worker.client import ReplyRefused, Worker, WorkerFailure, WorkerStartFailure
from grader.worker.protocol import Description, Limit, Written

SKIPPED = {"type": "Skipped", "message": "not called, because a call it depends on failed", "traceback": ""}
# A reply's array may hold this many times the elements its request can need, plus a floor
# (a wrong but honest shape, such as T×T attention maps instead of T×D outputs, is still read and judged).
REPLY_FACTOR = 4
REPLY_FLOOR = 16_384
HELD_GRAD = 0.25  # every element of the .grad that an input given as a "held_grad" leaf holds before the calls


@dataclass(frozen=True, eq=False)
class TensorInput:
    """An input tensor: float64 values (exact in ``dtype``: float32 or float64; a 0-dim coefficient may also be float16,
    bfloat16 or a signed integer dtype), dtype, grad flag, memory layout, and how one that requires grad is given: as an activation (a
    non-leaf view of the leaf its gradient is read from, as the outputs of a model's earlier layers are), or as a leaf that
    already holds a ``.grad`` (``held_grad``: as after an earlier micro-batch of gradient accumulation), which the call must
    leave as it was, or as a leaf ``torch.nn.Parameter`` (``parameter``: as a model's weights are)."""

    values: np.ndarray
    dtype: str
    requires_grad: bool = False
    layout: str = "contiguous"
    activation: bool = False
    held_grad: bool = False
    parameter: bool = False


@dataclass(frozen=True)
class ResultOf:
    """An argument that is the result of an earlier call in the same request."""

    call: int


Argument = Union[TensorInput, ResultOf, float, int, bool, None]


@dataclass(frozen=True)
class Call:
    """One call of a submitted function.

    Before the call, ``release`` frees every input tensor and earlier result
    that the call does not use (its new inputs then reuse their memory), and
    ``refill`` overwrites inputs in place, as an optimiser step does, with the
    values of the paired arrays (exact in the input's dtype); with
    ``refill_through_data`` it writes through ``tensor.data``, as older
    training code does, which leaves the version counter as it was. After
    the call, ``backward_now`` (cotangent, retain_graph) back-propagates
    through its result at once, as a training step does before the next call
    (with retain_graph, the graph is kept for a second backward pass through
    the same result); only an error of that pass is reported.
    """

    function: str
    args: tuple[Argument, ...] = ()
    kwargs: dict[str, Argument] = field(default_factory=dict)
    refill: tuple[tuple[TensorInput, np.ndarray], ...] = ()
    refill_through_data: bool = False
    release: bool = False
    grad_mode: str = "enabled"  # or "no_grad" or "inference_mode": the autograd mode the call is made in
    backward_now: tuple[np.ndarray, bool] | None = None


@dataclass(frozen=True)
class Request:
    """Calls made in order in one worker round trip, optionally followed by a backward pass.

    ``inputs`` fixes the numbering of input tensors (gradients and changes are
    reported by number) whatever order the calls pass them in; tensors not
    listed are numbered after them in order of first use.
    """

    calls: tuple[Call, ...]
    backward_from: int | None = None
    cotangent: np.ndarray | None = None
    inputs: tuple[TensorInput, ...] = ()
    # More results differentiated in the same backward pass, as (call, cotangent): calls made one after the other and then
    # differentiated together, as two micro-batches of a training step are.
    also_backward: tuple[tuple[int, np.ndarray], ...] = ()
    # How the cotangents are laid out in memory when every input is contiguous (else they follow the first other input's
    # layout): a layout name of the worker's, as the gradient of an output that the caller reads through a view arrives.
    cotangent_layout: str = "contiguous"


@dataclass
class Returned:
    """What one call produced, as observed by the worker."""

    raised: dict[str, str] | None = None
    type_name: str = ""
    is_tensor: bool = False
    exact_tensor: bool = False
    repr: str = ""
    length: int | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    device: str | None = None
    layout: str | None = None
    value_error: str | None = None  # why the values could not be read
    requires_grad: bool = False
    has_grad_fn: bool = False
    value: np.ndarray | None = None
    overwritten: bool = False  # a later call of the same request wrote into this result
    grad_mode_left: bool | None = None  # whether grad mode was on when the call returned, if it was not as the call found it
    inference_outside: bool = False  # an inference tensor returned by a call made outside torch.inference_mode
    backward_now_error: str | None = None  # why the backward pass right after the call (Call.backward_now) failed


@dataclass
class Outcome:
    """The answer to a request: per-call results, gradients and input changes, or a failure."""

    failure: str | None = None
    functions: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # function -> why its signature breaks calls
    results: list[Returned] = field(default_factory=list)
    backward_error: str | None = None
    grads: dict[int, np.ndarray | None] = field(default_factory=dict)
    # The .grad of each input that held HELD_GRAD, after the second way of asking (.backward()), as the worker read it
    accumulated: dict[int, np.ndarray | None] = field(default_factory=dict)
    changed_inputs: list[int] = field(default_factory=list)
    changed_by_backward: list[int] = field(default_factory=list)  # those of changed_inputs that only the backward pass changed


class MalformedReply(Exception):
    """The worker's reply is missing a field or has one of the wrong type."""


def invoke(worker: Worker, request: Request, *, shared: bool = False) -> Outcome:
    """Run ``request`` in ``worker`` and return what was observed (``shared``: see :func:`invoke_many`)."""
    return invoke_many(worker, [request], shared=shared)[0]


def invoke_many(worker: Worker, requests: Sequence[Request], *, diagnostic: bool = False, shared: bool = False) -> list[Outcome]:
    """Run independent requests in one worker round trip and return one outcome each.

    Their calls are made in order and their backward passes are one
    ``torch.autograd.grad`` over all their results, which gives each request
    its own gradients as long as no two share an input. A failure of the
    round trip (or of the shared backward pass) is every request's failure.
    ``diagnostic``: see :meth:`Worker.run`. ``shared``: the requests are
    built once per process and sent for submission after submission (a
    batch), so their encoding is kept with them (:func:`_encoded`).
    """
    header, arrays, spans, limit = _encoded(requests, shared)
    try:
        answer: Answer = worker.run(header, arrays, diagnostic=diagnostic, limit=limit)
    except Exception as exc:  # a WorkerFailure, or anything odd about the reply
        answer = exc
    return _outcomes(answer, requests, header, spans)


def invoke_each(worker: Worker, requests: Sequence[Request], *, shared: bool = False) -> list[Outcome]:
    """The outcomes of ``requests`` made one after another exactly as :func:`invoke` makes each, in one round trip.

    The worker answers each request as it finishes it (see
    :meth:`Worker.run_each`), so every request gets its own timeout, backward
    pass and failure count. The list ends at the first request whose round
    trip failed (with that failure): the ones after it were not run.
    ``shared``: see :func:`invoke_many`.
    """
    encoded = [_encoded([request], shared) for request in requests]
    answers = worker.run_each([(header, arrays) for header, arrays, _, _ in encoded], [limit for _, _, _, limit in encoded])
    return [_outcomes(answer, [request], header, spans)[0] for answer, request, (header, _, spans, _) in zip(answers, requests, encoded)]


Span = tuple[int, int, int, int]  # a request's calls [c0, c1) and tensors [t0, t1) within its round trip
Encoded = tuple[dict[str, Any], list[np.ndarray], list[Span], Limit]
_ENCODED: dict[tuple[int, ...], tuple[tuple[Request, ...], Encoded]] = {}


def _encoded(requests: Sequence[Request], shared: bool) -> Encoded:
    """The header, arrays and spans of a round trip making ``requests`` (:func:`_encode`), and the limit on its reply.

    All four depend on the requests alone and are read, never changed, by
    what sends them. Of ``shared`` requests they are computed once per
    process (kept with the requests themselves, so that an id is never
    another request's), the header with its JSON text
    (:class:`protocol.Written`); of the others, every time.
    """
    if not shared:
        return _encoded_once(requests)
    key = tuple(map(id, requests))
    found = _ENCODED.get(key)
    if found is None or any(kept is not given for kept, given in zip(found[0], requests)):
        header, arrays, spans, limit = _encoded_once(requests)
        found = _ENCODED[key] = (tuple(requests), (Written(header), arrays, spans, limit))
    return found[1]


def _encoded_once(requests: Sequence[Request]) -> tuple[dict[str, Any], list[np.ndarray], list[Span], Limit]:
    """:func:`_encode` and the reply's limit, from one reckoning of the sizes each call's result and gradient can need."""
    results, grads = _expected_sizes(requests)
    return (*_encode(requests, results), _size_limit(results, grads))


Answer = Union[tuple[dict[str, Any], list[np.ndarray]], Exception]  # the worker's reply and arrays, or why there is none


def _encode(requests: Sequence[Request], results: list[tuple[str, int]]) -> tuple[dict[str, Any], list[np.ndarray], list[Span]]:
    """The header and arrays of one round trip making ``requests``, and each one's share of it; ``results``: what each call's
    result can need (:func:`_expected_sizes`), sent as the call's cap."""
    tensors: list[TensorInput] = []
    refills: list[np.ndarray] = []
    calls: list[dict[str, Any]] = []
    spans: list[Span] = []
    backward: list[tuple[int, np.ndarray, str]] = []
    for request in requests:
        first_call, first_tensor = len(calls), len(tensors)
        tensors += request.inputs
        calls += [_encode_call(c, tensors, refills, first_call, first_tensor) for c in request.calls]
        if request.backward_from is not None and request.cotangent is not None:
            # A request with inputs in other memory gets its cotangents in the first such input's layout (but an
            # expanded one, which keeps a single batch element's values).
            layout = next((t.layout for t in tensors[first_tensor:] if t.layout != "contiguous" and not t.layout.startswith("expanded")),
                          request.cotangent_layout)  # fmt: skip
            backward.append((first_call + request.backward_from, np.asarray(request.cotangent, dtype=np.float64), layout))
            backward += [(first_call + call, np.asarray(cotangent, dtype=np.float64), layout) for call, cotangent in request.also_backward]
        spans.append((first_call, len(calls), first_tensor, len(tensors)))
    for call in calls:  # refill arrays (and the cotangents of backward passes right after a call) follow the input arrays
        if "refill" in call:
            call["refill"] = [[tensor, len(tensors) + index] for tensor, index in call["refill"]]
        if "backward_now" in call:
            call["backward_now"]["cotangent"] += len(tensors)
    arrays = [np.asarray(t.values, dtype=np.float64) for t in tensors] + refills
    header: dict[str, Any] = {
        "calls": calls,
        "tensors": [
            {"array": i, "dtype": t.dtype, "requires_grad": t.requires_grad, "layout": t.layout}
            | ({"activation": True} if t.activation and t.requires_grad else {})
            | ({"held_grad": HELD_GRAD} if t.held_grad and t.requires_grad and not t.activation else {})
            | ({"parameter": True} if t.parameter and t.requires_grad and not (t.activation or t.held_grad) else {})
            for i, t in enumerate(tensors)
        ],
    }
    for call, (_, size) in zip(calls, results):
        call["max_elements"] = _most_elements(size)
    if backward:
        header["backward"] = {"calls": [c for c, _, _ in backward], "cotangents": list(range(len(arrays), len(arrays) + len(backward))),
                              "layouts": [layout for _, _, layout in backward]}  # fmt: skip
        arrays += [cotangent for _, cotangent, _ in backward]
    return header, arrays, spans


def _outcomes(answer: Answer, requests: Sequence[Request], header: dict[str, Any], spans: list[Span]) -> list[Outcome]:
    """Each request's outcome from the worker's answer to their round trip (or the failure that replaced it)."""
    if isinstance(answer, WorkerStartFailure):
        raise answer  # the grader's own failure (no worker could be started): the check errors, nobody is marked down
    if isinstance(answer, (WorkerFailure, ReplyRefused)):
        whole = Outcome(failure=str(answer))
    else:
        try:
            if isinstance(answer, Exception):
                raise answer
            whole = _decode(*answer)
            if whole.failure is None and len(whole.results) != len(header["calls"]):
                raise MalformedReply(f"{len(whole.results)} results for {len(header['calls'])} calls")
        except Exception as exc:  # the reply may be forged by the submission: anything odd is malformed
            whole = Outcome(failure=f"the worker sent a malformed reply ({type(exc).__name__}: {exc})")
    return [_part(whole, request, span) for request, span in zip(requests, spans)]


def _expected_sizes(requests: Sequence[Request]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """How many elements each call's result and each input's gradient of one round trip can need, and their names.

    A gradient has its input's size. A result is assumed no larger than the
    call's largest tensor argument (an earlier call's result counting with
    its own bound), and at least one element: true of every function of an
    exercise whose outputs are shaped like its inputs or reduce them.
    """
    results: list[tuple[str, int]] = []
    grads: list[tuple[str, int]] = []
    for request in requests:
        first = len(results)
        for call in request.calls:
            sizes = [1]
            for argument in (*call.args, *call.kwargs.values()):
                if isinstance(argument, TensorInput):
                    sizes.append(int(np.size(argument.values)))
                elif isinstance(argument, ResultOf) and 0 <= argument.call < len(results) - first:
                    sizes.append(results[first + argument.call][1])
            results.append((call.function, max(sizes)))
        for i, (tensor, function) in enumerate(_request_tensors(request)):
            grads.append((f"the gradient of {function}'s input tensor {i}", int(np.size(tensor.values))))
    return results, grads


def reply_limit(requests: Sequence[Request]) -> Limit:
    """The limit on the arrays of the reply to ``requests`` (see :func:`grader.worker.protocol.read_message`).

    Each array may hold ``REPLY_FACTOR`` times the elements that the call
    result or gradient it is sent as can need, plus ``REPLY_FLOOR``; an array
    sent as neither may hold the floor, and all of them together no more
    than the sum of those bounds. A larger reply is refused unread, with a
    message that says what was sent and what was expected.
    """
    return _size_limit(*_expected_sizes(requests))


def _size_limit(results: list[tuple[str, int]], grads: list[tuple[str, int]]) -> Limit:
    """:func:`reply_limit` for the calls' results and the inputs' gradients as :func:`_expected_sizes` names and sizes them."""

    def judge(reply: dict[str, Any], described: list[Description]) -> str | None:
        roles: dict[int, tuple[str, int, str]] = {}
        calls = reply.get("calls")
        for i, call in enumerate(calls[: len(results)] if isinstance(calls, list) else []):
            index = call.get("value") if isinstance(call, dict) else None
            withheld = call.get("withheld") if isinstance(call, dict) else None
            if type(withheld) is int and withheld > _most_elements(results[i][1]):
                return _refusal(results[i][0], withheld, results[i][1], "returned")
            if type(index) is int:
                roles.setdefault(index, (results[i][0], results[i][1], "returned"))
        backward = reply.get("backward")
        allowed = REPLY_FLOOR + sum(_most_elements(size) for _, size in [*results, *grads])
        for part in ("grads", "accumulated"):  # the gradients, and the .grad of inputs that held one (as large)
            found = backward.get(part) if isinstance(backward, dict) else None
            for key, index in found.items() if isinstance(found, dict) else ():
                tensor = int(key) if isinstance(key, str) and key.isdigit() else -1
                if type(index) is int and 0 <= tensor < len(grads):
                    roles.setdefault(index, (grads[tensor][0], grads[tensor][1], "had"))
                    allowed += _most_elements(grads[tensor][1]) if part == "accumulated" else 0
        total = 0
        for index, (_, shape) in enumerate(described):
            count = math.prod(shape)
            total += count
            what, size, verb = roles.get(index, ("an array sent as no result or gradient", 0, "had"))
            if count > _most_elements(size):
                return _refusal(what, count, size, verb)
        if total > allowed:
            return f"the reply's arrays held {total:,} elements in all where at most {allowed:,} could be expected; the reply was refused"
        return None

    return judge


def _most_elements(size: int) -> int:
    """The most elements a reply's array may hold where ``size`` can be needed."""
    return REPLY_FACTOR * size + REPLY_FLOOR


def _refusal(what: str, count: int, size: int, verb: str) -> str:
    """Why a reply was refused: ``what`` (a call or a gradient) held ``count`` elements where ``size`` were expected."""
    return f"{what} {verb} {count:,} elements where {size:,} were expected; the reply was refused"


def _request_tensors(request: Request) -> list[tuple[TensorInput, str]]:
    """The input tensors of a request numbered as :func:`_encode` numbers them, each with the function of the first call using it.

    That is ``request.inputs`` first, then the others in order of first use
    (arguments, then refilled tensors, call after call).
    """
    used = [(call.function, [*call.args, *call.kwargs.values(), *(tensor for tensor, _ in call.refill)]) for call in request.calls]

    def user(tensor: TensorInput) -> str:
        return next((function for function, arguments in used if any(a is tensor for a in arguments)), request.calls[-1].function)

    found = [(tensor, user(tensor)) for tensor in request.inputs]
    for function, arguments in used:
        for argument in arguments:
            if isinstance(argument, TensorInput) and not any(argument is seen for seen, _ in found):
                found.append((argument, function))
    return found


def _part(whole: Outcome, request: Request, span: tuple[int, int, int, int]) -> Outcome:
    """The share of one request in the outcome of a round trip, with its own call and tensor numbering."""
    first_call, end_call, first_tensor, end_tensor = span
    differentiated = request.backward_from is not None and request.cotangent is not None
    return Outcome(
        failure=whole.failure,
        functions=[c.function for c in request.calls],
        results=whole.results[first_call:end_call],
        backward_error=(whole.backward_error if differentiated else None) or next(
            (f"the backward pass right after the call raised {r.backward_now_error}" for r in whole.results[first_call:end_call] if r.backward_now_error), None),
        grads={i - first_tensor: g for i, g in whole.grads.items() if first_tensor <= i < end_tensor},
        accumulated={i - first_tensor: g for i, g in whole.accumulated.items() if first_tensor <= i < end_tensor},
        changed_inputs=[i - first_tensor for i in whole.changed_inputs if first_tensor <= i < end_tensor],
        changed_by_backward=[i - first_tensor for i in whole.changed_by_backward if first_tensor <= i < end_tensor],
    )


def _encode_call(
    call: Call, tensors: list[TensorInput], refills: list[np.ndarray], first_call: int, first_tensor: int
) -> dict[str, Any]:
    """The wire form of ``call``, whose request's calls and tensors start at the given positions.

    Its refills are numbered within ``refills``; :func:`_encode` makes them array numbers.
    """

    def tensor_number(tensor: TensorInput) -> int:
        if not any(tensor is t for t in tensors[first_tensor:]):
            tensors.append(tensor)
        return next(i for i, t in enumerate(tensors) if i >= first_tensor and t is tensor)

    def encode(argument: Argument) -> dict[str, Any]:
        if isinstance(argument, TensorInput):
            return {"tensor": tensor_number(argument)}
        if isinstance(argument, ResultOf):
            return {"result": first_call + argument.call}
        return {"value": argument}

    encoded: dict[str, Any] = {
        "fn": call.function,
        "args": [encode(a) for a in call.args],
        "kwargs": {name: encode(a) for name, a in call.kwargs.items()},
    }
    if call.release:
        encoded["release"] = True
    if call.grad_mode != "enabled":
        encoded["grad_mode"] = call.grad_mode
    if call.refill_through_data:
        encoded["refill_through_data"] = True
    if call.refill:
        encoded["refill"] = []
        for tensor, values in call.refill:
            encoded["refill"].append([tensor_number(tensor), len(refills)])
            refills.append(np.asarray(values, dtype=np.float64))
    if call.backward_now is not None:
        cotangent, retain = call.backward_now
        encoded["backward_now"] = {"cotangent": len(refills), "retain_graph": retain}
        refills.append(np.asarray(cotangent, dtype=np.float64))
    return encoded


def _field(mapping: Any, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if not isinstance(mapping, dict):
        raise MalformedReply(f"expected an object around {key!r}")
    if key not in mapping:
        if default is ...:
            raise MalformedReply(f"missing {key!r}")
        return default
    value = mapping[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise MalformedReply(f"{key!r} has type {type(value).__name__}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _array(index: Any, arrays: list[np.ndarray]) -> np.ndarray:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(arrays):
        raise MalformedReply(f"array index {index!r} out of range")
    array = arrays[index]
    if array.dtype.kind != "f":
        raise MalformedReply(f"array of dtype {array.dtype} is not floating point")
    return array


def _error_text(error: Any) -> dict[str, str]:
    return {
        "type": _field(error, "type", str),
        "message": _field(error, "message", str),
        "traceback": _field(error, "traceback", str, ""),
    }


def _decode(reply: dict[str, Any], arrays: list[np.ndarray]) -> Outcome:
    status = _field(reply, "status", str)
    if status == "error":
        error = _error_text(_field(reply, "error", dict))
        return Outcome(failure=f"what the call returned could not be used ({error['type']}: {error['message']})")
    if status != "ok":
        raise MalformedReply(f"status {status!r}")
    outcome = Outcome()
    for call in _field(reply, "calls", list):
        status = _field(call, "status", str)
        if status in ("raised", "skipped"):
            error = _error_text(_field(call, "error", dict)) if status == "raised" else SKIPPED
            outcome.results.append(Returned(raised=error))
            continue
        returned = Returned(
            type_name=_field(call, "type", str),
            is_tensor=_field(call, "is_tensor", bool),
            exact_tensor=_field(call, "exact_tensor", bool),
            repr=_field(call, "repr", str),
            length=_field(call, "length", int, None),
            grad_mode_left=_field(call, "grad_mode_left", bool, None),
            inference_outside=_field(call, "inference_outside", bool, False),
        )
        if returned.exact_tensor:
            returned.shape = tuple(int(n) for n in _field(call, "shape", list))
            returned.dtype = _field(call, "dtype", str)
            returned.device = _field(call, "device", str)
            returned.layout = _field(call, "layout", str)
            returned.value_error = _field(call, "value_error", str, None)
            returned.requires_grad = _field(call, "requires_grad", bool)
            returned.has_grad_fn = _field(call, "has_grad_fn", bool)
            returned.overwritten = _field(call, "overwritten", bool, False)
            now = _field(call, "backward_now", dict, None)
            if now is not None and _field(now, "status", str) != "ok":
                returned.backward_now_error = _backward_error(now)
            index = _field(call, "value", (int, type(None)))
            returned.value = None if index is None else _array(index, arrays)
            if returned.value is not None and (returned.value.shape != returned.shape or (
                    returned.dtype in ("float32", "float64") and returned.value.dtype != np.dtype(returned.dtype))):
                raise MalformedReply(f"the values sent ({returned.value.dtype} {list(returned.value.shape)}) are not those of the tensor "
                                     f"described ({returned.dtype} {list(returned.shape)})")  # fmt: skip
        outcome.results.append(returned)
    for key in ("inputs_changed_by_forward", "inputs_changed_by_backward"):
        for index in _field(reply, key, list, []):
            if type(index) is not int:
                raise MalformedReply(f"{key!r} holds a {type(index).__name__}")
            if index not in outcome.changed_inputs:
                outcome.changed_inputs.append(index)
                if key == "inputs_changed_by_backward":
                    outcome.changed_by_backward.append(index)
    backward = _field(reply, "backward", dict, None)
    if backward is not None:
        if _field(backward, "status", str) == "ok":
            for key, index in _field(backward, "grads", dict).items():
                outcome.grads[int(key)] = None if index is None else _array(index, arrays)
            for key, index in _field(backward, "accumulated", dict, {}).items():
                outcome.accumulated[int(key)] = None if index is None else _array(index, arrays)
        else:
            outcome.backward_error = _backward_error(backward)
    return outcome


def _backward_error(backward: dict[str, Any]) -> str:
    """Why a backward pass the worker reports on did not give gradients: the error it raised, or why it was skipped."""
    status = _field(backward, "status", str)
    if status == "raised":
        error = _error_text(_field(backward, "error", dict))
        return f"{error['type']}: {error['message']}"
    return str(_field(backward, "reason", str, status))
