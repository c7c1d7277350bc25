"""What the HTML report shows of a check's counterexample (docs/report-schema.md).

:func:`view` turns the JSON record into display pieces: a heading, the call
as Python code that rebuilds the inputs, tables of the expected values, the
values got and their difference (with the elements outside the tolerance
marked by a sign, not only a colour), and the heat map of the difference
from :mod:`grader.reports.heatmap`. Only the heat map is markup, and it is escaped
as it is built; everything else is plain text for the template to escape.
"""

from __future__ import annotations

from typing import Any

import markupsafe
import numpy as np

from grader.reports import heatmap

OUTSIDE = "\u2717"
"""Appended to a difference outside the tolerance."""


def as_matrix(values: Any) -> np.ndarray:
    """Nested lists (None for a missing number) as a 2-D float array: the last axis across, the rest down."""
    array = np.array(values, dtype=np.float64)
    return array.reshape(1, 1) if array.ndim == 0 else array.reshape(-1, array.shape[-1])


def where(result: str, shape: list[int]) -> str:
    """Which element of ``result`` a table cell is: e.g. ``[0, 0, i, j]`` for a [1, 1, T, C] tensor."""
    if not shape:
        return f"{result.capitalize()} is a single number (a 0-dim tensor)."
    pattern = ", ".join([*["0"] * max(len(shape) - 2, 0), "i", "j"][-len(shape):])
    return f"Cell (i, j) of each table is element [{pattern}] of {result} (shape {shape})."


def _number(value: float) -> str:
    """A table cell: six significant digits, a dash for a missing value."""
    return "\u2014" if not np.isfinite(value) else f"{value:.6g}"


def _table(caption: str, matrix: np.ndarray, cells: list[list[str]]) -> dict[str, Any]:
    """A table: caption, column headings and rows of (row heading, cells)."""
    return {
        "caption": caption,
        "columns": [f"j = {j}" for j in range(matrix.shape[1])],
        "rows": [(f"i = {i}", row) for i, row in enumerate(cells)],
    }


def code(counterexample: dict[str, Any]) -> str:
    """Python that rebuilds the inputs and makes the call (and the backward pass of a gradient)."""
    lines = ["import torch", ""]
    for tensor in counterexample["inputs"]:
        grad = ", requires_grad=True" if tensor["requires_grad"] else ""
        note = "" if tensor["layout"] == "contiguous" else f"  # the grader passed a {tensor['layout'].replace('_', ' ')} view"
        lines.append(f"{tensor['name']} = torch.tensor({tensor['values']!r}, dtype=torch.{tensor['dtype']}{grad}){note}")
    lines.append(f"out = {counterexample['call']}")
    wrt = counterexample["with_respect_to"]
    if wrt is not None:
        lines.append(f"cotangent = torch.tensor({counterexample['cotangent']!r}, dtype=out.dtype)")
        lines.append(f"(grad_{wrt},) = torch.autograd.grad(out, {wrt}, cotangent)")
    return "\n".join(lines)


def view(counterexample: dict[str, Any], ident: str) -> dict[str, Any]:
    """The display pieces of a counterexample record; ``ident`` makes the heat map's ids unique."""
    if not counterexample["found"]:
        return {"found": False, "heading": "No small failing input", "note": counterexample["note"]}
    wrt = counterexample["with_respect_to"]
    result = "the output" if wrt is None else f"the gradient with respect to {wrt}"
    shape = list(np.shape(np.array(counterexample["expected"], dtype=np.float64)))
    expected, got = as_matrix(counterexample["expected"]), as_matrix(counterexample["got"])
    difference, allowed = as_matrix(counterexample["difference"]), as_matrix(counterexample["allowed"])
    outside = ~(np.abs(difference) <= allowed)  # NaN (a missing value) counts as outside
    dims = ", ".join(f"{k}={v}" for k, v in counterexample["size"].items())
    bound = f"{allowed.max():.2g}" if allowed.min() == allowed.max() else f"from {allowed.min():.2g} to {allowed.max():.2g}"
    summary = (
        f"Elements of {result} outside the tolerance: {counterexample['mismatched']} of {counterexample['elements']} "
        f"(allowed |got \u2212 expected|: {bound})."
    )
    differences = [[_number(d) + (f" {OUTSIDE}" if o else "") for d, o in zip(*row)] for row in zip(difference, outside)]
    figure = heatmap.svg(
        difference.tolist(),
        f"Heat map of got \u2212 expected for {result}",
        f"{summary} Red cells are above the expected value, blue ones below; outlined cells are outside the tolerance.",
        ident,
        flagged=outside.tolist(),
    )
    return {
        "found": True,
        "heading": f"Smallest failing input: {dims}",
        "note": counterexample["note"],
        "result": result,
        "summary": summary,
        "where": where(result, shape),
        "code": code(counterexample),
        "tables": [
            _table("Expected", expected, [[_number(v) for v in row] for row in expected]),
            _table("Got", got, [[_number(v) for v in row] for row in got]),
            _table(f"Got \u2212 expected ({OUTSIDE}: outside the tolerance)", difference, differences),
        ],
        "svg": markupsafe.Markup(figure),
    }
