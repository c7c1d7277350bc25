"""Chart geometry for the experiment's panels in the HTML report.

This module only does arithmetic: it turns each panel of the report's
``experiment`` section (docs/report-schema.md) into numbers and short number
strings (viewbox sizes, tick positions and labels, polyline ``points``). It
knows a series by its role only (expected, context, preview, submission),
never by what it measures. The template writes the SVG elements itself, so
every piece of text that reaches the page goes through Jinja's escaping.
Nothing here needs numpy, and the output depends on the input only.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from grader.core.experiment import PANEL_ID, ROLES

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
LABEL_MAX_CHARS = 56
"""Legend labels are cut to this many characters, the most one legend row holds."""
VALUE_LIMIT = 1e150
"""Values beyond this magnitude are drawn at it, so that spans stay finite."""

DRAW_ORDER = {"context": 0, "preview": 1, "expected": 2, "submission": 3}
"""Series drawn later sit on top, by role: the expected line above the preview (which it often
hides exactly) and the submission above both."""

Box = tuple[float, float, float, float]
"""A plot area as (left, top, right, bottom) in viewbox units."""
Curve = tuple[str, str, list[float | None] | None, Any]
"""One curve to draw: (role, legend label, values or None, note)."""


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


def _count_finite(xs: Sequence[float | None], values: Sequence[float | None] | None) -> int:
    """How many points of a curve can be drawn (both x and value finite)."""
    if values is None:
        return 0
    return sum(1 for x, v in zip(xs, values) if x is not None and v is not None)


def _series(
    key: str,
    z: int,
    label: str,
    values: list[float | None] | None,
    note: Any,
    xs: list[float | None],
    x_domain: tuple[float, float],
    y_domain: tuple[float, float],
    box: Box,
) -> dict[str, Any]:
    """Geometry and bookkeeping of one series (``values`` None: no curve)."""
    present = values is not None
    values = values if values is not None else [None] * len(xs)
    clipped = [None if v is None else min(max(v, -VALUE_LIMIT), VALUE_LIMIT) for v in values]
    parts = segments(xs, clipped, x_domain, y_domain, box)
    finite = _count_finite(xs, values)
    available = finite > 0
    return {
        "key": key,
        "z": z,
        "label": label,
        "present": present,
        "available": available,
        "note": note if isinstance(note, str) and note.strip() else None,
        "total": len(xs),
        "missing": len(xs) - finite,
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
        label = item["label"] if len(item["label"]) <= LABEL_MAX_CHARS else item["label"][: LABEL_MAX_CHARS - 1] + "\u2026"
        text = label if item["available"] else f"{label} (not available)"
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
    axis_labels: tuple[str, str],
    xs: list[float | None],
    curves: list[Curve],
    y_include: Sequence[float],
) -> dict[str, Any]:
    """Lay out one chart of several curves against x.

    ``axis_labels`` are the x and y axes' labels. ``curves`` holds (role,
    label, values or None, note) per series in legend order, where values
    line up with ``xs``. Each series gets a ``z`` for drawing order
    (:data:`DRAW_ORDER`). ``y_include`` are values the y range always covers
    (such as 0 and 1), so that an empty chart still has axes.
    """
    left = MARGIN_LEFT
    right = WIDTH - MARGIN_RIGHT
    # The legend goes above the plot and may need several rows.
    legend = _legend(
        [
            {"key": key, "label": label, "available": _count_finite(xs, values) > 0}
            for key, label, values, _note in curves
        ],
        left,
        right,
    )
    rows = max(1, len({entry["y"] for entry in legend}))
    top = LEGEND_TOP + rows * LEGEND_ROW + 14
    bottom = HEIGHT - MARGIN_BOTTOM
    box: Box = (left, top, right, bottom)

    finite_xs = [x for x in xs if x is not None]
    x_ticks = nice_ticks(min(finite_xs, default=0.0), max(finite_xs, default=1.0))
    x_domain = (x_ticks[0], x_ticks[-1])

    ys = list(y_include)
    for _key, _label, values, _note in curves:
        if values is not None:
            ys.extend(
                min(max(v, -VALUE_LIMIT), VALUE_LIMIT)
                for x, v in zip(xs, values)
                if x is not None and v is not None
            )
    y_ticks = nice_ticks(min(ys, default=0.0), max(ys, default=1.0))
    y_domain = (y_ticks[0], y_ticks[-1])

    series = [
        _series(key, DRAW_ORDER.get(key, 9), label, values, note, xs, x_domain, y_domain, box)
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
        "x_label": axis_labels[0],
        "y_label": axis_labels[1],
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
    x_label: str, xs: list[float | None], columns: list[tuple[str, list[float | None] | None]]
) -> dict[str, Any]:
    """The values behind a chart, formatted for an HTML table.

    ``columns`` holds (heading, values or None); a missing curve gives a
    column of dashes. The first column is always x, headed ``x_label``.
    """
    headings = [x_label] + [heading for heading, _values in columns]
    rows = []
    for i, x in enumerate(xs):
        cells = ["\u2014" if x is None else format_number(x, 4)]
        for _heading, values in columns:
            cells.append(format_value(values[i] if values is not None else None))
        rows.append(cells)
    return {"headings": headings, "rows": rows}


def _text(value: Any, default: str) -> str:
    """``value`` if it is a non-blank string, else ``default``."""
    return value if isinstance(value, str) and value.strip() else default


def _numbers(values: Any) -> list[float | None]:
    """A list of values as finite floats or None, each within ±VALUE_LIMIT; anything else is empty."""
    if not isinstance(values, (list, tuple)):
        return []
    return [None if v is None else min(max(v, -VALUE_LIMIT), VALUE_LIMIT) for v in clean_series(values, len(values))]


def panel_chart(panel: Any, number: int = 1) -> dict[str, Any]:
    """Turn one panel of the report's ``experiment`` section into chart geometry.

    The chart is a dict with ``id`` (``chart-`` and the panel's id, or
    ``chart-panel-NUMBER`` when that is not an identifier), ``title``,
    ``caption``, ``description``, ``width``, ``height``, ``viewbox``, ``plot``
    (left/top/right/bottom/cx/cy), ``x_label``/``y_label`` and their
    positions, ``x_ticks``/``y_ticks`` (lists of ``{"pos", "label"}``),
    ``zero_line`` (y of the value 0 or None), ``series`` (per series, in
    legend order: ``key`` (its role), ``label``, ``present``, ``available``,
    ``note``, ``total``, ``missing``, ``segments`` as polyline ``points``
    strings, ``markers`` as ``{"x", "y"}``), ``legend`` (placed entries),
    ``has_data`` and ``table`` (``headings`` and ``rows`` of formatted
    strings). Coordinates are strings of numbers only. A series of an unknown
    role is drawn as context. Malformed or missing input gives a chart with
    no data rather than an error.
    """
    panel = panel if isinstance(panel, dict) else {}
    axis = panel.get("x") if isinstance(panel.get("x"), dict) else {}
    xs = _numbers(axis.get("values"))
    x_label = _text(axis.get("label"), "x")
    y_label = _text(panel.get("y_label"), "value")
    curves: list[Curve] = []
    for item in panel.get("series") if isinstance(panel.get("series"), list) else []:
        if isinstance(item, dict):
            role = item["role"] if item.get("role") in ROLES else "context"
            label = _text(item.get("label"), role.capitalize())
            values = clean_series(item["values"], len(xs)) if isinstance(item.get("values"), (list, tuple)) else None
            curves.append((role, label, values, item.get("note")))
    finite = [x for x in xs if x is not None]
    title = _text(panel.get("title"), f"Panel {number}")
    caption = _text(panel.get("caption"), "")
    description = (
        f"Line chart of {y_label} against {x_label}, for {x_label} from "
        f"{format_number(min(finite, default=0.0), 3)} to {format_number(max(finite, default=1.0), 3)}. "
        f"{caption + ' ' if caption else ''}Series: {', '.join(label for _role, label, _values, _note in curves) or 'none'}."
    )
    identifier = panel.get("id")
    chart_id = f"chart-{identifier}" if isinstance(identifier, str) and PANEL_ID.fullmatch(identifier) else f"chart-panel-{number}"
    y_include = [v for v in _numbers(panel.get("y_includes")) if v is not None]
    chart = line_chart(chart_id, title, description, (x_label, y_label), xs, curves, y_include)
    chart["caption"] = caption
    chart["table"] = data_table(x_label, xs, [(label, values) for _role, label, values, _note in curves])
    return chart


def experiment_charts(experiment: Any) -> list[dict[str, Any]]:
    """One chart per panel of the report's ``experiment`` section (see :func:`panel_chart`); none without one.

    Chart ids are made unique (a repeated id gets the panel's number), since
    they become ids in the page.
    """
    panels = experiment.get("panels") if isinstance(experiment, dict) else None
    charts = []
    used: set[str] = set()
    for number, panel in enumerate(panels if isinstance(panels, list) else [], start=1):
        chart = panel_chart(panel, number)
        if chart["id"] in used:
            chart["id"] = f"{chart['id']}-{number}"
        used.add(chart["id"])
        charts.append(chart)
    return charts
