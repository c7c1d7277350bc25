"""Framing of the messages exchanged with a worker process.

A message is a JSON header followed by zero or more raw arrays in ``.npy``
format. Arrays are loaded with ``allow_pickle=False``, so nothing that crosses
the boundary can execute code in the reader. Both ends use this module; it
depends on the standard library and numpy only.

Wire format, all lengths unsigned big-endian::

    u32 header length | header (UTF-8 JSON, with "n_arrays": k)
    k times: u64 array length | array in .npy format
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any, BinaryIO

import numpy as np

MAX_HEADER_BYTES = 4 * 1024 * 1024
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
MAX_ARRAYS = 4096


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message."""


class PeerClosed(ProtocolError):
    """The peer closed the channel (for a worker: it exited or crashed)."""


def write_message(stream: BinaryIO, header: dict[str, Any], arrays: list[np.ndarray] = ()) -> None:
    """Write one message: ``header`` as JSON and each array as ``.npy`` bytes."""
    payload = json.dumps({**header, "n_arrays": len(arrays)}, allow_nan=False).encode()
    parts = [struct.pack(">I", len(payload)), payload]
    for array in arrays:
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(array, order="C"), allow_pickle=False)  # keeps 0-dim arrays 0-dim
        data = buffer.getvalue()
        parts.append(struct.pack(">Q", len(data)))
        parts.append(data)
    stream.write(b"".join(parts))
    stream.flush()


def read_message(stream: BinaryIO) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Read one message; raise ProtocolError on anything malformed or oversized."""
    (length,) = struct.unpack(">I", _read_exact(stream, 4))
    if length > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {length} bytes exceeds the limit of {MAX_HEADER_BYTES}")
    try:
        header = json.loads(_read_exact(stream, length))
    except ValueError as exc:
        raise ProtocolError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"header must be a JSON object (got {type(header).__name__})")
    count = header.pop("n_arrays", 0)
    if not isinstance(count, int) or not 0 <= count <= MAX_ARRAYS:
        raise ProtocolError(f"'n_arrays' must be an int in [0, {MAX_ARRAYS}] (got {count!r})")
    arrays = []
    budget = MAX_MESSAGE_BYTES - length
    for _ in range(count):
        (size,) = struct.unpack(">Q", _read_exact(stream, 8))
        budget -= size
        if budget < 0:
            raise ProtocolError(f"message exceeds the limit of {MAX_MESSAGE_BYTES} bytes")
        try:
            arrays.append(np.load(io.BytesIO(_read_exact(stream, size)), allow_pickle=False))
        except ValueError as exc:
            raise ProtocolError(f"array is not a plain .npy array: {exc}") from None
    return header, arrays


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise PeerClosed("the channel was closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
