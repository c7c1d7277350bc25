"""Chart geometry for the toy experiment in the HTML report.

This module only does arithmetic: it turns the series of the report's
``toy_experiment`` section into numbers and short number strings (viewbox
sizes, tick positions and labels, polyline ``points``). The template writes
the SVG elements itself, so every piece of text that reaches the page goes
through Jinja's escaping. Nothing here needs numpy, and the output depends on
the input only.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

WIDTH = 640
"""Width of every chart's viewbox, in user units."""
HEIGHT = 380
"""Height of every chart's viewbox, in user units."""
# Layout in viewbox units; legend widths are estimated from the label length
# at the template's 16-unit font, as no text can be measured here.
MARGIN_LEFT = 64
MARGIN_RIGHT = 20
MARGIN_BOTTOM = 60
LEGEND_TOP = 10
LEGEND_ROW = 20
LEGEND_CHAR_WIDTH = 8.8
LEGEND_SAMPLE = 28
LEGEND_GAP = 22
LABEL_MAX_CHARS = 40
VALUE_LIMIT = 1e150
"""Values beyond this magnitude are drawn at it, so that spans stay finite."""

EXPECTED_LABEL = "Expected (1 \u2212 \u03bb)"
SUBMISSION_LABEL = "Submission"
DRAW_ORDER = {"preview": 1, "expected": 2, "submission": 3}
"""Series drawn later sit on top; keys not listed go last."""

Box = tuple[float, float, float, float]
"""A plot area as (left, top, right, bottom) in viewbox units."""
Curve = tuple[str, str, list[float | None] | None, Any]
"""One curve to draw: (key, legend label, values or None, note if missing)."""


def finite_or_none(value: Any) -> float | None:
    """Return ``value`` as a float if it is a finite real number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def clean_series(values: Any, length: int) -> list[float | None]:
    """Return ``values`` as exactly ``length`` finite floats or Nones.

    Anything that is not a list of numbers counts as missing points; a short
    list is padded with None and a long one is cut.
    """
    items = list(values) if isinstance(values, (list, tuple)) else []
    cleaned = [finite_or_none(v) for v in items[:length]]
    return cleaned + [None] * (length - len(cleaned))


def format_number(value: float, decimals: int = 2) -> str:
    """Format a coordinate with at most ``decimals`` decimals, no trailing zeros."""
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_value(value: float | None) -> str:
    """Format a data value for a table cell; None becomes an em dash."""
    if value is None:
        return "\u2014"
    magnitude = abs(value)
    if value != 0 and (magnitude >= 1e4 or magnitude < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4f}"


def _nice_step(rough: float) -> float:
    """Round a positive step up or down to 1, 2 or 5 times a power of ten."""
    exponent = math.floor(math.log10(rough))
    fraction = rough / 10.0**exponent
    if fraction < 1.5:
        nice = 1.0
    elif fraction < 3.0:
        nice = 2.0
    elif fraction < 7.0:
        nice = 5.0
    else:
        nice = 10.0
    return nice * 10.0**exponent


def _step_decimals(step: float) -> int:
    """How many decimals print every multiple of ``step`` exactly."""
    return max(0, -math.floor(math.log10(step) + 1e-9))


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Return evenly spaced round tick values covering ``[lo, hi]``.

    The step is 1, 2 or 5 times a power of ten, chosen so that there are
    about ``target`` intervals; the first tick is at or below ``lo`` and the
    last at or above ``hi``. An empty range is widened around its value.
    Raises ValueError for non-finite bounds or a target below 1.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"tick bounds must be finite, got {lo!r} and {hi!r}")
    if target < 1:
        raise ValueError(f"target must be at least 1, got {target!r}")
    if lo > hi:
        lo, hi = hi, lo
    if lo == hi:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    span = hi - lo
    if not math.isfinite(span):
        raise ValueError("tick range is too wide to represent")
    step = _nice_step(span / target)
    start = math.floor(lo / step + 1e-9)
    stop = math.ceil(hi / step - 1e-9)
    decimals = _step_decimals(step)
    ticks = [round(i * step, decimals + 1) for i in range(start, stop + 1)]
    return [0.0 if t == 0 else t for t in ticks]


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """Label ``value`` with as many decimals as the spacing of ``ticks`` needs."""
    if len(ticks) >= 2:
        step = abs(ticks[1] - ticks[0])
    else:
        step = abs(value) or 1.0
    largest = max((abs(t) for t in ticks), default=abs(value))
    if largest >= 1e5 or (step < 1e-4):
        return f"{value:.2g}" if value != 0 else "0"
    text = f"{value:.{_step_decimals(step)}f}"
    return text.lstrip("-") if float(text) == 0 else text


def scale(value: float, domain: tuple[float, float], span: tuple[float, float]) -> float:
    """Map ``value`` linearly from ``domain`` onto ``span`` (pixels).

    ``span`` may run backwards (as a y axis does). A zero-width domain maps
    everything to the middle of ``span``.
    """
    d0, d1 = domain
    r0, r1 = span
    if d1 == d0:
        return (r0 + r1) / 2.0
    return r0 + (value - d0) * (r1 - r0) / (d1 - d0)


def segments(
    xs: Sequence[float | None],
    ys: Sequence[float | None],
    x_domain: tuple[float, float],
    y_domain: tuple[float, float],
    box: Box,
) -> list[list[tuple[float, float]]]:
    """Scale paired values into the plot box, splitting the line at gaps.

    A point whose x or y is None ends the current segment; each returned
    segment is a list of (x, y) pixel pairs with at least one pair.
    """
    left, top, right, bottom = box
    lo, hi = y_domain
    parts: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for x, y in zip(xs, ys):
        if x is None or y is None:
            if current:
                parts.append(current)
            current = []
            continue
        y = min(max(y, lo), hi)
        current.append((scale(x, x_domain, (left, right)), scale(y, y_domain, (bottom, top))))
    if current:
        parts.append(current)
    return parts


def points_attr(segment: Sequence[tuple[float, float]]) -> str:
    """Write a segment as the value of a polyline's ``points`` attribute."""
    return " ".join(f"{format_number(x)},{format_number(y)}" for x, y in segment)


def _count_finite(lambdas: Sequence[float | None], values: Sequence[float | None] | None) -> int:
    """How many points of a curve can be drawn (both λ and value finite)."""
    if values is None:
        return 0
    return sum(1 for x, v in zip(lambdas, values) if x is not None and v is not None)


def _series(
    key: str,
    z: int,
    label: str,
    values: list[float | None] | None,
    note: Any,
    lambdas: list[float | None],
    x_domain: tuple[float, float],
    y_domain: tuple[float, float],
    box: Box,
) -> dict[str, Any]:
    """Geometry and bookkeeping of one series (``values`` None: no curve)."""
    present = values is not None
    values = values if values is not None else [None] * len(lambdas)
    clipped = [None if v is None else min(max(v, -VALUE_LIMIT), VALUE_LIMIT) for v in values]
    parts = segments(lambdas, clipped, x_domain, y_domain, box)
    finite = _count_finite(lambdas, values)
    available = finite > 0
    return {
        "key": key,
        "z": z,
        "label": label,
        "present": present,
        "available": available,
        "note": note if isinstance(note, str) and note.strip() else None,
        "total": len(lambdas),
        "missing": len(lambdas) - finite,
        "segments": [points_attr(part) for part in parts],
        "markers": [
            {"x": format_number(x), "y": format_number(y)} for part in parts for x, y in part
        ],
    }


def _legend(series: list[dict[str, Any]], left: float, right: float) -> list[dict[str, Any]]:
    """Place legend entries in rows above the plot, left to right."""
    entries: list[dict[str, Any]] = []
    x, row = left, 0
    for item in series:
        text = item["label"] if item["available"] else f"{item['label']} (not available)"
        width = LEGEND_SAMPLE + 6 + len(text) * LEGEND_CHAR_WIDTH
        if x > left and x + width > right:
            x, row = left, row + 1
        y = LEGEND_TOP + row * LEGEND_ROW + LEGEND_ROW / 2
        entries.append(
            {
                "key": item["key"],
                "text": text,
                "available": item["available"],
                "x1": format_number(x),
                "x2": format_number(x + LEGEND_SAMPLE),
                "xm": format_number(x + LEGEND_SAMPLE / 2),
                "tx": format_number(x + LEGEND_SAMPLE + 6),
                "y": format_number(y),
            }
        )
        x += width + LEGEND_GAP
    return entries


def line_chart(
    chart_id: str,
    title: str,
    description: str,
    y_label: str,
    lambdas: list[float | None],
    curves: list[Curve],
    y_include: Sequence[float],
) -> dict[str, Any]:
    """Lay out one chart of several curves against λ.

    ``curves`` holds (key, label, values or None, note) per series in legend
    order, where values line up with ``lambdas``. Each series gets a ``z``
    for drawing order: the expected curve is drawn above the preview (which
    it often hides exactly) and the submission above both. ``y_include`` are
    values the y range always covers (such as 0 and 1), so that an empty
    chart still has axes.
    """
    left = MARGIN_LEFT
    right = WIDTH - MARGIN_RIGHT
    # The legend goes above the plot and may need several rows.
    legend = _legend(
        [
            {"key": key, "label": label, "available": _count_finite(lambdas, values) > 0}
            for key, label, values, _note in curves
        ],
        left,
        right,
    )
    rows = max(1, len({entry["y"] for entry in legend}))
    top = LEGEND_TOP + rows * LEGEND_ROW + 14
    bottom = HEIGHT - MARGIN_BOTTOM
    box: Box = (left, top, right, bottom)

    xs = [x for x in lambdas if x is not None]
    x_ticks = nice_ticks(min(xs, default=0.0), max(xs, default=1.0))
    x_domain = (x_ticks[0], x_ticks[-1])

    ys = list(y_include)
    for _key, _label, values, _note in curves:
        if values is not None:
            ys.extend(
                min(max(v, -VALUE_LIMIT), VALUE_LIMIT)
                for x, v in zip(lambdas, values)
                if x is not None and v is not None
            )
    y_ticks = nice_ticks(min(ys, default=0.0), max(ys, default=1.0))
    y_domain = (y_ticks[0], y_ticks[-1])

    series = [
        _series(key, DRAW_ORDER.get(key, 9), label, values, note, lambdas, x_domain, y_domain, box)
        for key, label, values, note in curves
    ]
    zero = scale(0.0, y_domain, (bottom, top)) if y_domain[0] < 0 < y_domain[1] else None
    return {
        "id": chart_id,
        "title": title,
        "description": description,
        "width": WIDTH,
        "height": HEIGHT,
        "viewbox": f"0 0 {WIDTH} {HEIGHT}",
        "plot": {
            "left": format_number(left),
            "top": format_number(top),
            "right": format_number(right),
            "bottom": format_number(bottom),
            "cx": format_number((left + right) / 2),
            "cy": format_number((top + bottom) / 2),
        },
        "x_label": "\u03bb",
        "y_label": y_label,
        "x_label_pos": {"x": format_number((left + right) / 2), "y": format_number(HEIGHT - 14)},
        "y_label_pos": {"x": format_number(18), "y": format_number((top + bottom) / 2)},
        "x_ticks": _ticks(x_ticks, x_domain, (left, right)),
        "y_ticks": _ticks(y_ticks, y_domain, (bottom, top)),
        "zero_line": None if zero is None else format_number(zero),
        "series": series,
        "legend": legend,
        "has_data": any(item["available"] for item in series),
    }


def _ticks(
    values: list[float], domain: tuple[float, float], span: tuple[float, float]
) -> list[dict[str, str]]:
    """Tick positions along an axis with their labels."""
    return [
        {"pos": format_number(scale(t, domain, span)), "label": tick_label(t, values)}
        for t in values
    ]


def data_table(
    lambdas: list[float | None], columns: list[tuple[str, list[float | None] | None]]
) -> dict[str, Any]:
    """The values behind a chart, formatted for an HTML table.

    ``columns`` holds (heading, values or None); a missing curve gives a
    column of dashes. The first column is always λ.
    """
    headings = ["\u03bb"] + [heading for heading, _values in columns]
    rows = []
    for i, lam in enumerate(lambdas):
        cells = ["\u2014" if lam is None else format_number(lam, 4)]
        for _heading, values in columns:
            cells.append(format_value(values[i] if values is not None else None))
        rows.append(cells)
    return {"headings": headings, "rows": rows}


def _curve(block: Any, field: str, length: int) -> list[float | None] | None:
    """The ``field`` curve of a preview/submission block, or None if absent."""
    if not isinstance(block, dict) or not isinstance(block.get(field), (list, tuple)):
        return None
    return clean_series(block[field], length)


def toy_charts(toy: dict[str, Any] | None) -> dict[str, Any]:
    """Turn the report's ``toy_experiment`` section into chart geometry.

    Returns ``{"offset_response": chart, "signal_retained": chart}``. Each
    chart is a dict with ``id``, ``title``, ``description``, ``width``,
    ``height``, ``viewbox``, ``plot`` (left/top/right/bottom/cx/cy),
    ``x_label``/``y_label`` and their positions, ``x_ticks``/``y_ticks``
    (lists of ``{"pos", "label"}``), ``zero_line`` (y of the value 0 or
    None), ``series`` (per series: ``key``, ``label``, ``present``,
    ``available``, ``note``, ``total``, ``missing``, ``segments`` as polyline
    ``points`` strings, ``markers`` as ``{"x", "y"}``), ``legend`` (placed
    entries), ``has_data`` and ``table`` (``headings`` and ``rows`` of
    formatted strings). Coordinates are strings of numbers only. Malformed or
    missing input gives charts with no data rather than an error.
    """
    toy = toy if isinstance(toy, dict) else {}
    raw_lambdas = toy.get("lambdas")
    if isinstance(raw_lambdas, (list, tuple)):
        lambdas = [
            None if x is None else min(max(x, -VALUE_LIMIT), VALUE_LIMIT)
            for x in clean_series(raw_lambdas, len(raw_lambdas))
        ]
    else:
        lambdas = []
    n = len(lambdas)
    finite_lambdas = [x for x in lambdas if x is not None]
    lam_lo = format_number(min(finite_lambdas, default=0.0), 3)
    lam_hi = format_number(max(finite_lambdas, default=1.0), 3)

    if isinstance(toy.get("expected_offset_response"), (list, tuple)):
        expected = clean_series(toy["expected_offset_response"], n)
    else:
        expected = [None if lam is None else 1.0 - lam for lam in lambdas]

    preview = toy.get("preview")
    submission = toy.get("submission")
    source = preview.get("source") if isinstance(preview, dict) else None
    if not isinstance(source, str) or source in ("", "reference"):
        preview_label = "Reference preview"
    else:
        preview_label = f"Preview ({source})"
    if len(preview_label) > LABEL_MAX_CHARS:
        preview_label = preview_label[: LABEL_MAX_CHARS - 1] + "\u2026"
    preview_note = toy.get("preview_note")
    submission_note = toy.get("submission_note")

    pre_offset = _curve(preview, "offset_response", n)
    sub_offset = _curve(submission, "offset_response", n)
    pre_signal = _curve(preview, "signal_retained", n)
    sub_signal = _curve(submission, "signal_retained", n)

    offset_chart = line_chart(
        "chart-offset-response",
        "Offset response against \u03bb",
        "Line chart: factor by which a value offset shared by both attention maps "
        f"reaches the output, for \u03bb from {lam_lo} to {lam_hi}. "
        f"Series: expected (1 \u2212 \u03bb), {preview_label.lower()}, submission.",
        "offset response",
        lambdas,
        [
            ("expected", EXPECTED_LABEL, expected, None),
            ("preview", preview_label, pre_offset, preview_note),
            ("submission", SUBMISSION_LABEL, sub_offset, submission_note),
        ],
        (0.0, 1.0),
    )
    offset_chart["table"] = data_table(
        lambdas,
        [(EXPECTED_LABEL, expected), (preview_label, pre_offset), (SUBMISSION_LABEL, sub_offset)],
    )

    signal_chart = line_chart(
        "chart-signal-retained",
        "Signal retained against \u03bb",
        "Line chart: norm of the output's signal part relative to its value at "
        f"\u03bb = 0. Series: {preview_label.lower()}, submission.",
        "signal retained",
        lambdas,
        [
            ("preview", preview_label, pre_signal, preview_note),
            ("submission", SUBMISSION_LABEL, sub_signal, submission_note),
        ],
        (0.0, 1.0),
    )
    signal_chart["table"] = data_table(
        lambdas, [(preview_label, pre_signal), (SUBMISSION_LABEL, sub_signal)]
    )
    return {"offset_response": offset_chart, "signal_retained": signal_chart}
