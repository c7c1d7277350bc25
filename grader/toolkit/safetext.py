"""Text that comes from a submission, made safe for every report, log line and CSV cell.

A submission controls many strings the grader shows: exception messages,
type, module and qualified names, reprs, tracebacks, what it printed, and
(in a batch) its file and student names. Any of them may be megabytes long
or hold terminal escape sequences, carriage returns, newlines that forge a
log line (``\\n::error ...`` in a CI log), bidirectional overrides or lone
surrogates that no UTF-8 writer accepts. :func:`text` cleans multi-line text
(a message, a traceback, captured output): it keeps newlines and tabs and
drops the rest. :func:`line` cleans what must stay on one line (a name): it
shows every control character as a visible escape such as ``\\n``, so that
the name stays recognisable and can never start a new line. Both clip.
"""

from __future__ import annotations

import re
from typing import Any

MAX_TEXT = 4000  # a message or a repr (the worker cuts messages at 4000 characters too)
MAX_LONG_TEXT = 16_000  # a traceback, captured output
MAX_NAME = 200  # a type, module, function, file or student name

# ANSI escape sequences: CSI (ESC [ ... final byte), OSC (ESC ] ... BEL or ESC \), and two-character escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
# C0 and C1 controls, DEL, line and paragraph separators, bidirectional overrides and isolates, lone surrogates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def text(value: str, limit: int = MAX_TEXT) -> str:
    """Multi-line text without escape sequences or control characters (newlines and tabs kept), clipped to ``limit``.

    A carriage return ending a line is dropped; any other becomes a newline,
    so that no line can overwrite another on a terminal. A lone surrogate
    becomes U+FFFD.
    """
    if _plain(value, limit):
        return value
    dropped = max(0, len(value) - 4 * limit)  # bound the work before the expressions run
    value = _ANSI.sub("", value[: 4 * limit]).replace("\r\n", "\n").replace("\r", "\n")
    return _clip(_UNSAFE.sub(_multi_line, value), limit, dropped)


def line(value: str, limit: int = MAX_NAME) -> str:
    """One line: every control character shown as an escape (``\\n``, ``\\x1b``, ``\\u202e``), clipped to ``limit``."""
    if _plain(value, limit):
        return value
    dropped = max(0, len(value) - 4 * limit)  # bound the work before the expression runs
    return _clip(_UNSAFE.sub(_escaped, value[: 4 * limit]), limit, dropped)


def _plain(value: str, limit: int) -> bool:
    """Short printable ASCII, which both cleanings leave as it is (most of a reply's strings): skip the expressions."""
    return len(value) <= limit and value.isascii() and value.isprintable()


def _multi_line(match: re.Match[str]) -> str:
    char = match.group()
    if char in "\n\t":
        return char
    return "\ufffd" if "\ud800" <= char <= "\udfff" else ""


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def _clip(value: str, limit: int, dropped: int = 0) -> str:
    """``value`` cut to ``limit`` characters, with a note that counts what was cut (``dropped`` already was)."""
    if len(value) <= limit and not dropped:
        return value
    note = f" [... {len(value) - limit + dropped:,} more characters cut]"
    kept = max(0, limit - len(note))
    return value[:kept] + f" [... {len(value) - kept + dropped:,} more characters cut]"


# Fields of a worker's reply that are names (one line) and that may be long (tracebacks).
NAME_FIELDS = frozenset({"type", "module", "qualname", "name", "fn", "kind", "dtype", "device", "layout", "status", "filename", "torch", "numpy"})
LONG_FIELDS = frozenset({"traceback", "stdout", "stderr"})


def reply(value: Any, key: str = "") -> Any:
    """A decoded JSON reply with every string (and every key) cleaned: names with :func:`line`, the rest with :func:`text`.

    ``key`` is the name of the field ``value`` was found under, which decides
    how a string is cleaned (:data:`NAME_FIELDS`, :data:`LONG_FIELDS`).
    """
    if isinstance(value, str):
        if key in NAME_FIELDS:
            return line(value)
        return text(value, MAX_LONG_TEXT if key in LONG_FIELDS else MAX_TEXT)
    if isinstance(value, dict):
        return {line(str(k)): reply(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [reply(v, key) for v in value]
    return value


# A byte that is not printable ASCII, a backslash (an escape), or a run between quotes longer than a name
# may be: when a JSON text holds none of them, every string it decodes to is already clean.
_NOT_PLAIN_JSON = re.compile(rb'[^\x20-\x7e]|\\|"[^"]{%d,}"' % (MAX_NAME + 1))


def reply_of(value: Any, raw: bytes) -> Any:
    """:func:`reply` of ``value``, decoded from the JSON text ``raw``, without the walk when the text shows it unneeded.

    A JSON text of printable ASCII without backslashes decodes to strings of
    printable ASCII, and one without more than :data:`MAX_NAME` characters
    between two quotes to strings no longer than that: :func:`reply` would
    leave every one of them (and so ``value``) as it is.
    """
    return value if _NOT_PLAIN_JSON.search(raw) is None else reply(value)
