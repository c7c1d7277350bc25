"""Jupyter notebooks as submissions: the code of an nbformat 4 notebook, graded like a .py file.

The code cells are joined in notebook order. Lines Python cannot run are
taken out, each replaced by ``pass`` at its indentation so that blocks and
line numbers survive: IPython line magics and shell escapes (``%`` or ``!``
first on a logical line, outside strings and brackets) and whole cells that
start with a cell magic (``%%``). Cell ``k`` (counted from the top, Markdown
cells included) starts at line ``1000·k + 1``, so line 4012 in a message is
line 12 of cell 4; when a cell is too long for that, or the padding too
large, the cells follow one another and a note gives their line ranges.
Every such decision is a note for the report (``submission.notes``).

Size is counted before any text is built: a notebook whose code cells hold
more than the limit is refused before they are scanned, and each layout's
size is computed from its lines' sizes, so that a notebook of many cells
(whose padded layout would be hundreds of millions of blank lines) costs
no more memory than its own JSON. Notes list a few cells and count the rest.
"""

from __future__ import annotations

import ast
import json
import re
import tokenize
from dataclasses import dataclass
from typing import Any

from grader.toolkit import safetext

SUFFIX = ".ipynb"
MAX_NOTEBOOK_BYTES = 16 * 1024 * 1024  # outputs (plots) count here; the code alone must fit the .py limit
LINE_STRIDE = 1000
ESCAPE = re.compile(r"[ \t]*(?:[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*)?[%!]")  # also "files = !ls", "t = %timeit f()"
CELL_MAGIC = re.compile(r"[ \t]*%%")
QUOTED_CHARS = 60
LISTED_LINES = 5
LISTED_CELLS = 20


class NotebookError(Exception):
    """The file is not a notebook whose code can be graded; the message says why."""


@dataclass(frozen=True)
class Converted:
    """The Python source taken from a notebook, and the notes that say how."""

    source: str
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Cell:
    """One code cell: its position among all cells (from 1) and its lines after clean-up."""

    number: int
    lines: list[str]


def convert(data: bytes, max_source_bytes: int) -> Converted:
    """The code of the nbformat 4 notebook ``data``, at most ``max_source_bytes`` of UTF-8; raise NotebookError."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotebookError(
            f"the notebook is {len(data)} bytes, over the limit of {MAX_NOTEBOOK_BYTES} bytes; clear its outputs and save it again"
        )
    all_cells = _cells(data)
    code = sum(len("".join(cell["source"]).encode("utf-8", "surrogatepass")) for cell in all_cells if cell["cell_type"] == "code")
    if code > max_source_bytes:
        raise NotebookError(f"the notebook's code is {code} bytes, over the limit of {max_source_bytes} bytes for a submission")
    kept: list[_Cell] = []
    escapes: list[str] = []
    magic_cells: list[str] = []
    for number, cell in enumerate(all_cells, start=1):
        if cell["cell_type"] != "code":
            continue
        lines = _lines(cell["source"])
        first = next((line for line in lines if line.strip()), "")
        if CELL_MAGIC.match(first):
            magic_cells.append(f"cell {number} ({_quote(first)})")
            continue
        for index in _escape_lines(lines):
            escapes.append(f"cell {number} line {index + 1} ({_quote(lines[index])})")
            lines[index] = lines[index][: len(lines[index]) - len(lines[index].lstrip())] + "pass"
        if lines:
            kept.append(_Cell(number, lines))
    if not any(line.strip() for cell in kept for line in cell.lines):
        raise NotebookError(
            f"the notebook has no code to grade ({len(all_cells)} cells, none with Python code): write both functions in a code cell"
        )
    features, hoisted = _hoist_future_imports(kept)
    source, layout = _layout(kept, len(all_cells), max_source_bytes, features)
    notes = [layout]
    if hoisted:
        notes.append(f"Moved the from __future__ import(s) of {_listing(hoisted)} to the top of the module, each replaced by pass "
                     "(Jupyter allows them first in any cell; Python, first in the file).")  # fmt: skip
    if escapes:
        notes.append(f"Removed {len(escapes)} IPython line(s) that Python cannot run (magics and shell escapes), "
                     f"each replaced by pass: {_listing(escapes)}.")
    if magic_cells:
        notes.append(f"Skipped {len(magic_cells)} cell(s) that start with a cell magic (%%): {_listing(magic_cells)}.")
    return Converted(source, tuple(notes))


def _cells(data: bytes) -> list[dict[str, Any]]:
    """The cells of an nbformat 4 notebook, each checked to have a cell type and a source."""
    try:
        notebook = json.loads(data)
    except RecursionError:
        raise NotebookError("the file is not a readable notebook: its JSON is nested too deeply") from None
    except ValueError as exc:  # also a file that is not UTF-8 text
        raise NotebookError(f"the file is not a readable notebook: it is not valid JSON ({exc})") from None
    if not isinstance(notebook, dict):
        raise NotebookError(f"the file is not a notebook: expected a JSON object with \"cells\", got a JSON {_json_type(notebook)}")
    version = notebook.get("nbformat")
    if type(version) is not int or version != 4:
        raise NotebookError(f"only nbformat 4 notebooks can be graded (got nbformat {version!r}); open and save it with a current Jupyter")
    cells = notebook.get("cells")
    if not isinstance(cells, list) or not cells:
        got = "no \"cells\" key" if "cells" not in notebook else f"a JSON {_json_type(cells)}" if cells else "an empty array"
        raise NotebookError(f"the notebook has no cells (expected a non-empty array \"cells\", got {got})")
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise NotebookError(f"cell {number} of the notebook is malformed: expected an object with a \"cell_type\" string")
        source = cell.get("source")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(s, str) for s in source)):
            raise NotebookError(
                f"cell {number} of the notebook is malformed: expected \"source\" to be a string or a list of strings, "
                f"got {_json_type(source)}"
            )
    return cells


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _lines(source: str | list[str]) -> list[str]:
    """A cell's source as lines, split where Python splits source lines (\\n, \\r\\n, \\r)."""
    text = source if isinstance(source, str) else "".join(source)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _escape_lines(lines: list[str]) -> list[int]:
    """Indices of the lines that start with ``%`` or ``!`` at the start of a logical line.

    The tokenizer follows the cell, seeing each escape as a blank line; a line
    is the start of a logical line when the previous one ended a statement
    (NEWLINE) or was blank or a comment outside brackets (NL at depth 0). A
    line inside a string, brackets or after a backslash is never an escape.
    Where the cell stops tokenizing (it is not valid Python), the remaining
    lines are left as they are: Python will report the error.
    """
    found: list[int] = []
    state = {"start": True}
    numbered = enumerate(lines)

    def readline() -> str:
        for index, line in numbered:
            if state["start"] and ESCAPE.match(line):
                found.append(index)
                return "\n"
            state["start"] = False
            return line + "\n"
        return ""

    depth = 0
    try:
        for token in tokenize.generate_tokens(readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth = max(depth - 1, 0)
            if token.type not in (tokenize.INDENT, tokenize.DEDENT):
                state["start"] = token.type == tokenize.NEWLINE or token.type == tokenize.NL and depth == 0
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def _hoist_future_imports(cells: list[_Cell]) -> tuple[list[str], list[str]]:
    """Take the ``from __future__`` imports that open a cell after the first out of it (each becomes ``pass``).

    Returns the features imported, in order, and the cells they came from. A
    cell that is not valid Python is left alone: Python reports its error.
    """
    features: list[str] = []
    hoisted: list[str] = []
    for cell in cells[1:]:  # the first cell's own are first in the file already
        try:
            body = ast.parse("\n".join(cell.lines)).body
        except (SyntaxError, ValueError):
            continue
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body = body[1:]  # a docstring may come first
        opening = body[: next((i for i, n in enumerate(body) if not _is_future(n)), len(body))]
        for node in opening:
            assert isinstance(node, ast.ImportFrom)
            features += [alias.name for alias in node.names if alias.name not in features]
            first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
            # Only the import's own span becomes pass: statements sharing its lines (`...; import math`) stay (offsets are in UTF-8 bytes).
            head = cell.lines[first].encode()[: node.col_offset].decode()
            tail = cell.lines[last].encode()[node.end_col_offset or 0 :].decode() if node.end_col_offset is not None else ""
            cell.lines[first : last + 1] = [head + "pass" + tail] + [""] * (last - first)
        if opening:
            hoisted.append(f"cell {cell.number}")
    return features, hoisted


def _is_future(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


def _layout(cells: list[_Cell], total: int, max_bytes: int, features: list[str]) -> tuple[str, str]:
    """The joined source and the note that says where each cell's lines are.

    ``features`` become one ``from __future__`` import on line 1 (the blank
    padding before cell 1, or a line of its own before the cells that follow
    one another). Each layout's size is computed before its text is built (a
    newline ends every line, blank ones included).
    """
    shown = ", ".join(str(cell.number) for cell in cells[:LISTED_CELLS])
    numbers = shown if len(cells) <= LISTED_CELLS else f"{shown} and {len(cells) - LISTED_CELLS} more"
    joined = f"Graded the code of the notebook's cells numbered {numbers} (of {total} cells), joined in order"
    future = [f"from __future__ import {', '.join(features)}"] if features else []
    code = sum(_size(line) for cell in cells for line in cell.lines) + sum(_size(line) for line in future)
    if all(len(cell.lines) < LINE_STRIDE for cell in cells):
        last = cells[-1]
        if code + last.number * LINE_STRIDE + len(last.lines) <= max_bytes:
            source = _joined([(1, future)] + [(cell.number * LINE_STRIDE + 1, cell.lines) for cell in cells])
            example = cells[0].number
            return source, (
                f"{joined}. Line numbers in messages are {LINE_STRIDE} × cell + line in the cell: line "
                f"{example * LINE_STRIDE + 12} is line 12 of cell {example} (cells are counted from the top, Markdown cells included)."
            )
    placed, start = [(1, future)], 1 + len(future)
    for cell in cells:
        placed.append((start, cell.lines))
        start += len(cell.lines)
    size = code + start - 1
    if size > max_bytes:
        raise NotebookError(f"the notebook's code is {size} bytes, over the limit of {max_bytes} bytes for a submission")
    ranges = [
        f"cell {cell.number} is line {s}" if len(cell.lines) == 1 else f"cell {cell.number} is lines {s}-{s + len(cell.lines) - 1}"
        for (s, _), cell in zip(placed[1:], cells)
    ]
    return _joined(placed), f"{joined}. In messages, {_listing(ranges)}."


def _size(source: str) -> int:
    """Bytes of ``source`` in UTF-8; text that has none (a lone surrogate from a JSON escape) is an error."""
    try:
        return len(source.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise NotebookError(f"the notebook's code is not valid Unicode text ({exc.reason} at character {exc.start})") from None


def _joined(placed: list[tuple[int, list[str]]]) -> str:
    """Lines placed at their starting line numbers (from 1), blank lines between."""
    out: list[str] = []
    for start, lines in placed:
        out.extend([""] * (start - 1 - len(out)))
        out.extend(lines)
    return "\n".join(out) + "\n"


def _quote(line: str) -> str:
    """A removed line as a note shows it: stripped, cut, control characters shown as escapes."""
    text = line.strip()
    return safetext.line(text if len(text) <= QUOTED_CHARS else text[: QUOTED_CHARS - 1] + "…")


def _listing(items: list[str]) -> str:
    """The first few items, and how many more."""
    shown = "; ".join(items[:LISTED_LINES])
    return shown if len(items) <= LISTED_LINES else f"{shown}; and {len(items) - LISTED_LINES} more"
