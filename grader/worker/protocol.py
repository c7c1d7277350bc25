"""Framing of the messages exchanged with a worker process.

A message is a JSON header followed by zero or more arrays as raw bytes. The
header describes each array by a dtype taken from a short list of plain
numeric types and a shape; the reader checks both before it reads a byte of
the array, so nothing that crosses the boundary is ever parsed as anything
but numbers (no pickle, no ``.npy`` header to evaluate). Both ends use this
module; it depends on the standard library and numpy only.

Wire format, all lengths unsigned big-endian::

    u32 header length | header (UTF-8 JSON, with "arrays": [[dtype, shape], ...])
    then, per array: its prod(shape) * itemsize bytes, C order
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, Callable, Protocol, Sequence

import numpy as np

MAX_HEADER_BYTES = 8 * 1024 * 1024  # a 1 MiB submission of control characters escapes to 6 MiB of JSON
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_SKIPPED_BYTES = 16 * MAX_MESSAGE_BYTES  # the most a refused message may declare; its bytes are read and dropped
MAX_ARRAYS = 4096
MAX_DIMENSIONS = 32
CHUNK_BYTES = 1024 * 1024  # read at most this much at a time (a pipe gives 64 KiB per read anyway)
# Plain numbers and booleans only, little-endian (or byte-sized): never objects, strings or records.
DTYPES = {name: np.dtype(name) for name in ("<f2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1")}


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message."""


class PeerClosed(ProtocolError):
    """The peer closed the channel (for a worker: it exited or crashed)."""


class Refused(ProtocolError):
    """A well-formed message whose arrays the reader's limit refused; their bytes were dropped unread into memory."""


Description = tuple[np.dtype, tuple[int, ...]]
# Judges a message from its header and array descriptions before any array is read: None, or why it is refused.
Limit = Callable[[dict[str, Any], list[Description]], str | None]


class Stream(Protocol):
    """What the messages are read from and written to: a binary file, or a pipe with a deadline."""

    def read(self, size: int, /) -> bytes: ...

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> None: ...


class Written(dict[str, Any]):
    """A header (or a part of one) sent again and again, with its JSON text written once (``allow_nan=False``).

    It must not change once made; :func:`write_message` takes the text through its ``encoded`` fields.
    """

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__(value)
        self.text = json.dumps(value, allow_nan=False)


def write_message(stream: Stream, header: dict[str, Any], arrays: Sequence[np.ndarray] = (), encoded: dict[str, str] | None = None) -> None:
    """Write one message: ``header`` as JSON, with each array's dtype and shape, then the arrays' bytes.

    ``encoded``: more fields of the header, each given as its value's JSON
    text (written with ``allow_nan=False``), for values the writer sends often.
    """
    plain = [np.asarray(array) for array in arrays]  # tobytes() writes C order from any layout
    described = []
    for array in plain:
        if array.dtype.str not in DTYPES:
            raise ValueError(f"array dtype must be one of {sorted(DTYPES)} (got {array.dtype.str})")
        described.append([array.dtype.str, list(array.shape)])
    text = json.dumps({**header, "arrays": described}, allow_nan=False)
    if encoded:  # the object's closing brace is its last character
        text = text[:-1] + "".join(f", {json.dumps(key)}: {value}" for key, value in encoded.items()) + "}"
    payload = text.encode()
    stream.write(b"".join([struct.pack(">I", len(payload)), payload, *(array.tobytes() for array in plain)]))
    stream.flush()


def read_message(
    stream: Stream, limit: Limit | None = None, clean: Callable[[dict[str, Any], bytes], dict[str, Any]] | None = None
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Read one message; raise ProtocolError on anything malformed or oversized.

    Every array description is checked before a byte of data is read. When
    ``limit`` is given, it sees the header and the descriptions first; if it
    returns a reason, the arrays' bytes are read and dropped (never held in
    memory) and :class:`Refused` says why, the channel still in step.
    ``clean``, if given, turns the header (and the JSON text it was decoded
    from) into the header returned, once the arrays are read.
    """
    (length,) = struct.unpack(">I", _read_exact(stream, 4))
    if length > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {length} bytes exceeds the limit of {MAX_HEADER_BYTES}")
    raw = _read_exact(stream, length)
    try:
        header = json.loads(raw)
    except PeerClosed:
        raise
    except Exception as exc:  # hostile input: bad JSON, or nesting deep enough to raise RecursionError
        raise ProtocolError(f"header is not valid JSON: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"header must be a JSON object (got {type(header).__name__})")
    described = header.pop("arrays", [])
    if not isinstance(described, list) or len(described) > MAX_ARRAYS:
        raise ProtocolError(f"'arrays' must be a list of at most {MAX_ARRAYS} descriptions (got {type(described).__name__})")
    descriptions = [_array_description(description) for description in described]
    sizes = [math.prod(shape) * dtype.itemsize for dtype, shape in descriptions]
    if sum(sizes) > MAX_SKIPPED_BYTES:
        raise ProtocolError(f"message of {sum(sizes)} bytes exceeds any limit ({MAX_SKIPPED_BYTES} bytes)")
    # The caller's limit comes first: a reply it refuses is dropped whatever its size, and the worker goes on.
    reason = None if limit is None else limit(header, descriptions)
    if reason is not None:
        _skip(stream, sum(sizes))
        raise Refused(reason)
    if sum(sizes) > MAX_MESSAGE_BYTES - length:
        raise ProtocolError(f"message exceeds the limit of {MAX_MESSAGE_BYTES} bytes")
    arrays = [np.frombuffer(_read_exact(stream, size), dtype=dtype).reshape(shape) for (dtype, shape), size in zip(descriptions, sizes)]
    return (header if clean is None else clean(header, bytes(raw))), arrays


def _array_description(description: Any) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape of one array description ``[dtype, shape]``; anything else is a ProtocolError."""
    if not (isinstance(description, list) and len(description) == 2 and isinstance(description[1], list)):
        raise ProtocolError(f"an array description must be [dtype, shape] (got {str(description)[:80]})")
    name, shape = description
    if not isinstance(name, str) or name not in DTYPES:
        raise ProtocolError(f"array dtype must be one of {sorted(DTYPES)} (got {str(name)[:40]!r})")
    if len(shape) > MAX_DIMENSIONS or not all(type(n) is int and 0 <= n <= MAX_MESSAGE_BYTES for n in shape):
        raise ProtocolError(f"array shape must be at most {MAX_DIMENSIONS} non-negative ints (got {str(shape)[:80]})")
    return DTYPES[name], tuple(shape)


def _read_exact(stream: Stream, size: int) -> bytearray:
    """Exactly ``size`` bytes, read into one buffer (an array made from it needs no copy)."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    done = 0
    while done < size:
        chunk = stream.read(min(size - done, CHUNK_BYTES))
        if not chunk:
            raise PeerClosed("the channel was closed")
        view[done : done + len(chunk)] = chunk
        done += len(chunk)
    return buffer


def _skip(stream: Stream, size: int) -> None:
    """Read ``size`` bytes and drop them, a chunk at a time."""
    while size:
        chunk = stream.read(min(size, CHUNK_BYTES))
        if not chunk:
            raise PeerClosed("the channel was closed")
        size -= len(chunk)
