"""Inline SVG heat maps of small signed matrices (the differences of counterexamples).

:func:`svg` draws one square per element on a diverging scale that is
symmetric about zero: white at 0, shades of red above and of blue below, the
full colour at the largest magnitude. Elements flagged as outside their
tolerance get a thick outline and non-finite ones a grey square with a cross,
so neither depends on colour; a legend gives the scale. The figure has a
``<title>`` and a ``<desc>``, every square a ``<title>`` with its value, and
the report prints the same numbers in tables next to it.

The markup is built with :mod:`xml.etree.ElementTree`, which escapes every
text node and attribute, and depends only on the arguments.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Sequence

CELL = 28
ROW_LABELS = 44
COLUMN_LABELS = 20
LEGEND_GAP = 18
LEGEND_STEPS = 9
LEGEND_STEP = 10
LEGEND_BAR = 14
LEGEND_WIDTH = 130
FONT = "font-family: system-ui, sans-serif; font-size: 12px"
NEGATIVE = (33, 102, 172)
ZERO = (247, 247, 247)
POSITIVE = (178, 24, 43)
MISSING = "#8c8c8c"
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def colour(value: float, limit: float) -> str:
    """The fill of ``value`` on the scale from -``limit`` (blue) through 0 (white) to ``limit`` (red)."""
    share = 0.0 if limit <= 0 else max(-1.0, min(1.0, value / limit))
    end = POSITIVE if share > 0 else NEGATIVE
    mixed = (round(z + abs(share) * (e - z)) for z, e in zip(ZERO, end))
    return "#" + "".join(f"{c:02x}" for c in mixed)


def short(value: float) -> str:
    """A number in at most three significant digits, with a true minus sign."""
    return f"{value:.3g}".replace("-", "\u2212")


def svg(
    matrix: Sequence[Sequence[float]],
    title: str,
    description: str,
    ident: str,
    flagged: Sequence[Sequence[bool]] | None = None,
) -> str:
    """The SVG markup of a heat map of ``matrix`` (rows of equal length; NaN or infinity for missing values).

    Rows are numbered i and columns j from 0, as in the report's tables.
    ``flagged`` marks the elements to outline (outside the tolerance).
    ``ident`` makes the ids of the title and description unique in a page.
    """
    rows, columns = len(matrix), max((len(row) for row in matrix), default=0)
    finite = [abs(v) for row in matrix for v in row if math.isfinite(v)]
    limit = max(finite, default=0.0)
    missing = len(finite) < rows * columns
    outlined = flagged is not None and any(any(row) for row in flagged)
    left, top = ROW_LABELS, COLUMN_LABELS
    legend_x = left + columns * CELL + LEGEND_GAP
    legend_height = LEGEND_STEPS * LEGEND_STEP + 24 * (1 + outlined + missing)
    width = legend_x + LEGEND_WIDTH
    height = top + max(rows * CELL, legend_height) + 4
    root = ET.Element(
        "svg",
        {
            "xmlns": SVG_NAMESPACE,
            "viewBox": f"0 0 {width} {height}",
            "width": str(width),
            "height": str(height),
            "role": "img",
            "aria-labelledby": f"{ident}-title {ident}-desc",
            "style": FONT,
        },
    )
    ET.SubElement(root, "title", {"id": f"{ident}-title"}).text = title
    ET.SubElement(root, "desc", {"id": f"{ident}-desc"}).text = description
    labels = ET.SubElement(root, "g", {"class": "labels", "fill": "currentColor"})
    _text(labels, left - 6, top - 6, "i \\ j", "end")
    for j in range(columns):
        _text(labels, left + j * CELL + CELL / 2, top - 6, str(j), "middle")
    for i in range(rows):
        _text(labels, left - 6, top + i * CELL + CELL / 2 + 4, str(i), "end")
    cells = ET.SubElement(root, "g", {"class": "cells"})
    marks = ET.SubElement(root, "g", {"class": "marks", "fill": "none"})
    for i, row in enumerate(matrix):
        for j, value in enumerate(row):
            x, y = left + j * CELL, top + i * CELL
            known = math.isfinite(value)
            rect = ET.SubElement(cells, "rect", _rect(x, y, CELL, CELL, colour(value, limit) if known else MISSING, "#ffffff", 1))
            ET.SubElement(rect, "title").text = f"i = {i}, j = {j}: {short(value) if known else 'not finite'}"
            if not known:
                near, far = 6, CELL - 6
                cross = f"M{x + near} {y + near}L{x + far} {y + far}M{x + far} {y + near}L{x + near} {y + far}"
                ET.SubElement(marks, "path", {"d": cross, "stroke": "#ffffff", "stroke-width": "2"})
            if flagged is not None and flagged[i][j]:
                ET.SubElement(marks, "rect", _rect(x + 2, y + 2, CELL - 4, CELL - 4, "none", "#000000", 3))
    _legend(root, legend_x, top, limit, outlined, missing)
    return ET.tostring(root, encoding="unicode")


def _rect(x: float, y: float, width: float, height: float, fill: str, stroke: str = "none", stroke_width: float = 0) -> dict[str, str]:
    """Attributes of a rectangle."""
    return {
        "x": f"{x:g}", "y": f"{y:g}", "width": f"{width:g}", "height": f"{height:g}",
        "fill": fill, "stroke": stroke, "stroke-width": f"{stroke_width:g}",
    }  # fmt: skip


def _text(parent: ET.Element, x: float, y: float, text: str, anchor: str) -> None:
    """A text node at (x, y)."""
    ET.SubElement(parent, "text", {"x": f"{x:g}", "y": f"{y:g}", "text-anchor": anchor}).text = text


def _legend(root: ET.Element, x: float, y: float, limit: float, outlined: bool, missing: bool) -> None:
    """The colour scale from +limit (top) to -limit (bottom), and the keys of outlines and crosses."""
    legend = ET.SubElement(root, "g", {"class": "legend", "fill": "currentColor"})
    middle = (LEGEND_STEPS - 1) / 2
    for k in range(LEGEND_STEPS):
        value = limit * (middle - k) / middle
        ET.SubElement(legend, "rect", _rect(x, y + k * LEGEND_STEP, LEGEND_BAR, LEGEND_STEP, colour(value, limit)))
    for row, value in ((0.0, limit), (middle, 0.0), (LEGEND_STEPS - 1.0, -limit)):
        _text(legend, x + LEGEND_BAR + 6, y + row * LEGEND_STEP + LEGEND_STEP / 2 + 4, short(value), "start")
    below = y + LEGEND_STEPS * LEGEND_STEP + 8
    if outlined:
        ET.SubElement(legend, "rect", _rect(x, below, LEGEND_BAR, LEGEND_BAR, "none", "#000000", 3))
        _text(legend, x + LEGEND_BAR + 6, below + LEGEND_BAR - 2, "outside tolerance", "start")
        below += 24
    if missing:
        ET.SubElement(legend, "rect", _rect(x, below, LEGEND_BAR, LEGEND_BAR, MISSING))
        _text(legend, x + LEGEND_BAR + 6, below + LEGEND_BAR - 2, "not finite", "start")

