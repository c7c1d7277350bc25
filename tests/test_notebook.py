"""Notebook submissions: conversion of nbformat 4 notebooks, and grading them end to end."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Graded, grade

from grader.core import notebook
from grader.core.notebook import LINE_STRIDE, NotebookError, convert
from grader.core.session import MAX_SUBMISSION_BYTES, read_submission

EINSUM = (ROOT / "tests" / "corpus" / "correct" / "einsum.py").read_text()


def notebook_bytes(*cells: tuple[str, Any], **top: Any) -> bytes:
    """An nbformat 4 notebook of (cell_type, source) cells, with ``top`` overriding top-level keys."""
    document = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [{"cell_type": kind, "metadata": {}, "source": source} for kind, source in cells],
    }
    document.update(top)
    return json.dumps(document).encode()


def lines_of(source: str) -> dict[int, str]:
    """The non-blank lines of converted source by line number."""
    return {n: line for n, line in enumerate(source.split("\n"), start=1) if line.strip()}


# ---- joining cells -------------------------------------------------------------


def test_code_cells_joined_in_order_at_their_cell_lines() -> None:
    """Code cells keep their order; cell k's line m is line 1000·k + m; Markdown and raw cells are left out."""
    data = notebook_bytes(("markdown", "# Task"), ("code", "import math\n"), ("raw", "x = 1"), ("code", "a = 1\nb = 2"))
    converted = convert(data, MAX_SUBMISSION_BYTES)
    assert lines_of(converted.source) == {2001: "import math", 4001: "a = 1", 4002: "b = 2"}
    assert converted.notes[0].startswith("Graded the code of the notebook's cells numbered 2, 4 (of 4 cells)")
    assert "line 2012 is line 12 of cell 2" in converted.notes[0]
    assert len(converted.notes) == 1


def test_source_may_be_a_list_of_strings() -> None:
    """A cell's source given as a list of lines is the same as one string."""
    as_list = convert(notebook_bytes(("code", ["x = 1\n", "y = 2\n"])), MAX_SUBMISSION_BYTES)
    as_text = convert(notebook_bytes(("code", "x = 1\ny = 2\n")), MAX_SUBMISSION_BYTES)
    assert as_list == as_text
    assert lines_of(as_list.source) == {1001: "x = 1", 1002: "y = 2"}


def test_windows_line_endings_count_as_one_line() -> None:
    """\\r\\n and \\r end a line as they do for Python."""
    converted = convert(notebook_bytes(("code", "a = 1\r\nb = 2\rc = 3")), MAX_SUBMISSION_BYTES)
    assert lines_of(converted.source) == {1001: "a = 1", 1002: "b = 2", 1003: "c = 3"}


def test_syntax_error_line_names_the_cell() -> None:
    """Python's line number of an error in cell 3 reads as cell 3's own line."""
    data = notebook_bytes(("code", "import torch"), ("markdown", "text"), ("code", "x = 1\ny = 2\ndef f(:\n"))
    with pytest.raises(SyntaxError) as raised:
        compile(convert(data, MAX_SUBMISSION_BYTES).source, "work.ipynb", "exec")
    assert raised.value.lineno == 3 * LINE_STRIDE + 3


def test_long_cell_falls_back_to_consecutive_lines() -> None:
    """A cell of 1000 lines or more cannot sit at 1000·k: cells follow one another and the note gives their ranges."""
    long_cell = "".join(f"v{i} = {i}\n" for i in range(LINE_STRIDE))
    converted = convert(notebook_bytes(("code", "a = 1\n"), ("code", long_cell)), MAX_SUBMISSION_BYTES)
    lines = lines_of(converted.source)
    assert lines[1] == "a = 1" and lines[2] == "v0 = 0" and lines[LINE_STRIDE + 1] == f"v{LINE_STRIDE - 1} = {LINE_STRIDE - 1}"
    assert converted.notes[0].endswith(f"In messages, cell 1 is line 1; cell 2 is lines 2-{LINE_STRIDE + 1}.")


def test_future_imports_of_a_later_cell_move_to_line_one() -> None:
    """A cell that opens with a docstring and from __future__ imports, after another cell, compiles: the imports lead the module."""
    data = notebook_bytes(("code", "import math"), ("code", '"""Stub."""\nfrom __future__ import annotations\nx: Later = 1\n'))
    converted = convert(data, MAX_SUBMISSION_BYTES)
    assert lines_of(converted.source) == {1: "from __future__ import annotations", 1001: "import math", 2001: '"""Stub."""',
                                          2002: "pass", 2003: "x: Later = 1"}  # fmt: skip
    assert converted.notes[1].startswith("Moved the from __future__ import(s) of cell 2 to the top of the module")
    namespace: dict[str, Any] = {}
    exec(compile(converted.source, "work.ipynb", "exec"), namespace)  # without the import, Later would be a NameError
    assert namespace["__annotations__"] == {"x": "Later"}


def test_statements_sharing_a_line_with_a_moved_future_import_stay() -> None:
    """`from __future__ import annotations; import math` in a later cell: only the import becomes pass, math stays imported."""
    cell = "from __future__ import annotations; import math\nr = math.sqrt(4.0)\nfrom __future__ import (\n    division); s = 2\n"
    data = notebook_bytes(("code", "a = 1"), ("code", "from __future__ import (annotations,\n    division); t = 3\nu: Later = t\n"), ("code", cell))
    converted = convert(data, MAX_SUBMISSION_BYTES)
    lines = lines_of(converted.source)
    assert lines[2001] == "pass; t = 3" and lines[3001] == "pass; import math", lines
    namespace: dict[str, Any] = {}
    with pytest.raises(SyntaxError):  # a __future__ import after other statements stays an error, as in Python
        exec(compile(converted.source, "work.ipynb", "exec"), namespace)
    fine = convert(notebook_bytes(("code", "a = 1"), ("code", cell.split("from __future__ import (")[0])), MAX_SUBMISSION_BYTES)
    exec(compile(fine.source, "work.ipynb", "exec"), namespace)
    assert namespace["r"] == 2.0


def test_future_imports_lead_the_consecutive_layout_too() -> None:
    """When cells follow one another, the import takes line 1 and the ranges in the note start at line 2."""
    long_cell = "from __future__ import annotations\n" + "".join(f"v{i} = {i}\n" for i in range(LINE_STRIDE))
    converted = convert(notebook_bytes(("code", "a = 1\n"), ("code", long_cell)), MAX_SUBMISSION_BYTES)
    lines = lines_of(converted.source)
    assert lines[1] == "from __future__ import annotations" and lines[2] == "a = 1" and lines[3] == "pass"
    assert converted.notes[0].endswith(f"In messages, cell 1 is line 2; cell 2 is lines 3-{LINE_STRIDE + 3}.")
    compile(converted.source, "work.ipynb", "exec")


# ---- IPython escapes -------------------------------------------------------------


def test_line_magics_and_shell_escapes_become_pass() -> None:
    """% and ! lines become pass at their indentation, with a note quoting each."""
    cell = "%matplotlib inline\nimport torch\nfor i in range(2):\n    !echo {i}\nx = 1\n"
    converted = convert(notebook_bytes(("code", cell)), MAX_SUBMISSION_BYTES)
    assert lines_of(converted.source) == {1001: "pass", 1002: "import torch", 1003: "for i in range(2):", 1004: "    pass", 1005: "x = 1"}
    compile(converted.source, "nb.ipynb", "exec")
    assert converted.notes[1] == (
        "Removed 2 IPython line(s) that Python cannot run (magics and shell escapes), each replaced by pass: "
        "cell 1 line 1 (%matplotlib inline); cell 1 line 4 (!echo {i})."
    )


def test_percent_and_bang_inside_expressions_and_strings_are_kept() -> None:
    """A continuation line starting with % or != and a string line starting with ! are Python, not escapes."""
    cell = 'x = (7\n     % 4)\nok = (x\n      != 3)\ny = 1 + \\\n!= 2\ntext = """\n!not a command\n%not a magic\n"""\n'
    converted = convert(notebook_bytes(("code", cell)), MAX_SUBMISSION_BYTES)
    assert "\n".join(lines_of(converted.source).values()) == cell.rstrip("\n")
    assert len(converted.notes) == 1


def test_cell_magic_drops_the_whole_cell() -> None:
    """A cell whose first line starts with %% is skipped, and the note names it."""
    data = notebook_bytes(("code", "\n%%timeit\nx = [i for i in range(9)]"), ("code", "y = 2"))
    converted = convert(data, MAX_SUBMISSION_BYTES)
    assert lines_of(converted.source) == {2001: "y = 2"}
    assert converted.notes[1] == "Skipped 1 cell(s) that start with a cell magic (%%): cell 1 (%%timeit)."


def test_many_escapes_are_listed_up_to_five() -> None:
    """The note quotes the first five removed lines and counts the rest."""
    cell = "".join(f"!pip install package{i}\n" for i in range(8))
    note = convert(notebook_bytes(("code", cell)), MAX_SUBMISSION_BYTES).notes[1]
    assert note.startswith("Removed 8 IPython line(s)")
    assert note.endswith("cell 1 line 5 (!pip install package4); and 3 more.")


def test_long_escape_lines_are_cut_in_the_note() -> None:
    """A removed line is quoted up to QUOTED_CHARS characters."""
    note = convert(notebook_bytes(("code", "%" + "y" * 100)), MAX_SUBMISSION_BYTES).notes[1]
    assert note.endswith(f"(%{'y' * (notebook.QUOTED_CHARS - 2)}…).")


# ---- notebooks that cannot be graded -------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"{not json", "the file is not a readable notebook: it is not valid JSON (Expecting property name"),
        (b"\xff\xfe\x00garbage", "it is not valid JSON"),
        (b"[1, 2]", 'expected a JSON object with "cells", got a JSON array'),
        (notebook_bytes(("code", "x = 1"), nbformat=3), "only nbformat 4 notebooks can be graded (got nbformat 3)"),
        (notebook_bytes(("code", "x = 1"), nbformat="4"), "(got nbformat '4')"),
        (notebook_bytes(), 'the notebook has no cells (expected a non-empty array "cells", got an empty array)'),
        (json.dumps({"nbformat": 4}).encode(), 'got no "cells" key'),
        (notebook_bytes(("code", 7)), 'cell 1 of the notebook is malformed: expected "source" to be a string or a list of strings, got number'),
        (notebook_bytes(("code", ["x", 1])), "cell 1 of the notebook is malformed"),
        (notebook_bytes(("markdown", "# only text"), ("code", "  \n")), "the notebook has no code to grade (2 cells, none with Python code)"),
        (notebook_bytes(("code", "%%bash\necho hi")), "the notebook has no code to grade"),
        (notebook_bytes(("code", "x = '\ud800'")), "the notebook's code is not valid Unicode text"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_unreadable_notebooks_say_why(data: bytes, fragment: str) -> None:
    """Each way a notebook can be broken raises NotebookError with a message that says what was expected."""
    with pytest.raises(NotebookError) as raised:
        convert(data, MAX_SUBMISSION_BYTES)
    assert fragment in str(raised.value)


def test_code_over_the_submission_limit_is_refused() -> None:
    """The code taken from a notebook must fit the .py limit even when the file does."""
    data = notebook_bytes(("code", "x = 1  # " + "y" * 2000))
    with pytest.raises(NotebookError, match=r"the notebook's code is \d+ bytes, over the limit of 1000 bytes"):
        convert(data, 1000)


def test_read_submission_converts_and_keeps_the_file_hash(tmp_path: Path) -> None:
    """read_submission grades a .ipynb's code, keeps the file's sha256 and size, and carries the notes."""
    data = notebook_bytes(("code", "%pip install torch\nimport torch"))
    path = tmp_path / "work.IPYNB"
    path.write_bytes(data)
    submission = read_submission(path)
    assert submission.problem is None
    assert submission.sha256 == hashlib.sha256(data).hexdigest() and submission.size == len(data)
    assert lines_of(submission.source) == {1001: "pass", 1002: "import torch"}
    assert len(submission.notes) == 2


def test_read_submission_turns_a_broken_notebook_into_a_load_error(tmp_path: Path) -> None:
    """A notebook that cannot be read is a load problem (graded 0), not a usage error."""
    path = tmp_path / "broken.ipynb"
    path.write_text("print('I am not JSON')")
    submission = read_submission(path)
    assert submission.source is None and submission.notes == ()
    assert submission.problem.startswith("the file is not a readable notebook: it is not valid JSON")


# ---- grading notebooks end to end -------------------------------------------------


@pytest.fixture(scope="module")
def graded_notebooks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Graded]]:
    """A correct solution split over notebook cells with magics, and a notebook that is not JSON, graded once each."""
    root = tmp_path_factory.mktemp("notebooks")
    head, _, tail = EINSUM.partition("def differential_attention")
    good = notebook_bytes(
        ("markdown", "# My solution"),
        ("code", "%matplotlib inline\n!pip install torch\n" + head),
        ("code", "%%timeit\ndifferential_lambda(*[torch.ones(3)] * 4)"),
        ("code", "def differential_attention" + tail),
    )
    paths = {"good": root / "solution.ipynb", "broken": root / "broken.ipynb"}
    paths["good"].write_bytes(good)
    paths["broken"].write_bytes(good[:-40])
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {name: pool.submit(grade, path, root / name, 31) for name, path in paths.items()}
        return {name: (paths[name], run.result()) for name, run in runs.items()}


def test_correct_notebook_gets_full_marks_with_notes(graded_notebooks: dict[str, tuple[Path, Graded]]) -> None:
    """A correct solution in a notebook scores 100; the report keeps the file's hash and shows the notes."""
    path, run = graded_notebooks["good"]
    assert run.code == 0 and run.report["score"] == 100.0, run.stdout
    submission = run.report["submission"]
    assert submission["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert submission["load_error"] is None
    notes = submission["notes"]
    assert [n.split(" ", 1)[0] for n in notes] == ["Graded", "Removed", "Skipped"]
    assert "cells numbered 2, 4 (of 4 cells)" in notes[0]
    assert "cell 2 line 1 (%matplotlib inline); cell 2 line 2 (!pip install torch)" in notes[1]
    assert "<dt>Notes</dt>" in run.html and "cell 3 (%%timeit)" in run.html
    assert "note: Graded the code of the notebook" in run.stdout


def test_broken_notebook_is_graded_zero_with_the_reason(graded_notebooks: dict[str, tuple[Path, Graded]]) -> None:
    """A truncated notebook is graded 0 (exit 1) with a load error that says it is not valid JSON."""
    _, run = graded_notebooks["broken"]
    assert run.code == 1 and run.report["score"] == 0.0
    error = run.report["submission"]["load_error"]
    assert error.startswith("the file is not a readable notebook: it is not valid JSON")
    assert run.report["submission"]["notes"] == []
    assert all(c["message"] == error for t in run.report["tiers"] for c in t["checks"])


def test_a_diff_v2_notebook_is_detected_and_graded_like_a_file(tmp_path: Path) -> None:
    """A correct DIFF V2 solution split over cells, with a magic, is graded by DIFF V2 (found from its functions) at 100."""
    source = (ROOT / "tests" / "corpus" / "v2" / "correct" / "einsum_grouped.py").read_text()
    head, _, tail = source.partition("def diff_v2_attention")
    path = tmp_path / "diff_v2.ipynb"
    path.write_bytes(notebook_bytes(("code", "%load_ext autoreload\n" + head), ("code", "def diff_v2_attention" + tail)))
    run = grade(path, tmp_path / "graded", 5)
    assert run.code == 0 and run.report["score"] == 100.0, run.stdout
    assert run.report["exercise"] == "diff_v2"
    assert [n.split(" ", 1)[0] for n in run.report["submission"]["notes"]] == ["Graded", "Removed"]


# ---- size is counted before any text is built (issue 10, item 5) -----------------------------


def _traced_peak(data: bytes) -> tuple[Any, int]:
    """convert(data) (or the NotebookError it raises) and the peak of memory it allocated, in bytes."""
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            found: Any = convert(data, MAX_SUBMISSION_BYTES)
        except NotebookError as exc:
            found = exc
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_many_cells_over_the_code_limit_are_refused_before_any_text_is_built() -> None:
    """200,000 cells holding 4.8 MB of code: refused with the size, under 150 MB allocated (was 3.2 GB)."""
    data = notebook_bytes(*[("code", "x = 1  # padding padding")] * 200_000)
    refused, peak = _traced_peak(data)
    assert isinstance(refused, NotebookError)
    assert str(refused) == f"the notebook's code is 4800000 bytes, over the limit of {MAX_SUBMISSION_BYTES} bytes for a submission"
    assert peak < 150_000_000, peak


def test_many_small_cells_are_laid_out_compactly_with_a_short_note() -> None:
    """20,000 one-line cells: the padded layout (20 million lines) is never built; the note lists 20 cells and counts the rest."""
    converted, peak = _traced_peak(notebook_bytes(*[("code", "x=1")] * 20_000))
    assert converted.source == "x=1\n" * 20_000
    assert peak < 40_000_000, peak
    assert "cells numbered 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 and 19980 more (of 20000 cells)" in converted.notes[0]
    assert converted.notes[0].endswith("cell 5 is line 5; and 19995 more.")
    assert len(converted.notes[0]) < 600


def test_removed_lines_are_quoted_without_control_characters() -> None:
    """A magic line holding an escape sequence and a bidi override is quoted on one line, its controls shown as escapes."""
    converted = convert(notebook_bytes(("code", "%time \x1b[2J\u202ex\nx = 1")), MAX_SUBMISSION_BYTES)
    assert "cell 1 line 1 (%time \\x1b[2J\\u202ex)" in converted.notes[1]
