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

MAX_HEADER_BYTES = 8 * 1024 * 1024  # a 1 MiB submission of control characters escapes to 6 MiB of JSON
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_ARRAYS = 4096
ARRAY_KINDS = "fiub"  # plain numbers and booleans only: never objects, strings or records


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
    except PeerClosed:
        raise
    except Exception as exc:  # hostile input: bad JSON, or nesting deep enough to raise RecursionError
        raise ProtocolError(f"header is not valid JSON: {type(exc).__name__}") from None
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
        arrays.append(_decode_array(_read_exact(stream, size)))
    return header, arrays


def _decode_array(data: bytes) -> np.ndarray:
    """A .npy array of plain numbers whose header agrees with its size; anything else is a ProtocolError."""
    buffer = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(buffer)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}[version]
        shape, fortran, dtype = read_header(buffer)
    except Exception as exc:
        raise ProtocolError(f"array is not a plain .npy array ({type(exc).__name__})") from None
    count = 1
    for size in shape:
        count *= size
    if dtype.hasobject or dtype.kind not in ARRAY_KINDS or count * dtype.itemsize != len(data) - buffer.tell():
        raise ProtocolError(f"array is not a plain .npy array (dtype {dtype}, shape {shape}, {len(data)} bytes)")
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=buffer.tell())
    return flat.reshape(shape, order="F" if fortran else "C").copy()


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
