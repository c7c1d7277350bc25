"""An exercise's experiment, in a form every exercise shares and the harness draws.

An experiment runs an implementation on chosen inputs and measures curves
that show what the exercise's maths does, on the reference (the preview)
and on the submission. The exercise describes it once per seed with a
:class:`Frame`: a title, a few sentences, inputs worth showing, and
:class:`Panel`\\ s, each a line chart over its own x axis holding the series
that do not depend on who ran the experiment (the expected truth, a line
drawn for comparison). One run on one worker gives a :class:`Measured`: a
curve per panel and, where useful, a sentence about it. :func:`section`
puts the frame and the two runs together into the report's ``experiment``
section (docs/report-schema.md), adding to every panel a ``preview`` and a
``submission`` series; :func:`problems` states the rules of that section
that its JSON schema cannot (grader.reports.schema applies them), and
grader.reports.svgchart draws every panel the same way. Nothing in the
harness knows what a panel means.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# What a series is, which decides how it is drawn (docs/report-schema.md): the truth a correct
# implementation follows, a line drawn for comparison only, the reference's measurement, the submission's.
ROLES = ("expected", "context", "preview", "submission")
FRAME_ROLES = ("expected", "context")
MEASURED_LABELS = {"preview": "Reference preview", "submission": "Submission"}
PANEL_ID = re.compile(r"[a-z][a-z0-9_]*")

Curve = Sequence[float | None]


class ExperimentError(ValueError):
    """A frame or a measurement that does not fit the experiment section's format (an exercise's bug)."""


@dataclass(frozen=True)
class Axis:
    """The x axis of a panel: its label and the values the experiment was run at."""

    label: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class Series:
    """One line of a panel, with one value per x value (None where there is none)."""

    label: str  # the legend's text
    role: str  # one of ROLES; a frame holds only FRAME_ROLES
    values: Curve | None  # None: no curve at all (the note says why)
    note: str | None = None  # one sentence shown with the chart: why there are no values, or a remark on them


@dataclass(frozen=True)
class Panel:
    """One line chart: what is measured against what, and the series fixed by the seed."""

    id: str  # lowercase letters, digits and underscores, unique within the experiment
    title: str  # e.g. "Offset response against λ"
    caption: str  # one or two sentences: what is measured and what a correct implementation gives
    x: Axis
    y_label: str
    series: tuple[Series, ...] = ()  # expected and context lines; the harness adds preview and submission
    y_includes: tuple[float, ...] = ()  # values the y axis always covers (such as 0 and 1)


@dataclass(frozen=True)
class Shown:
    """A fixed input of the experiment worth showing beside its panels (a shared offset, say)."""

    label: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class Frame:
    """Everything about an experiment that one seed fixes, whoever runs it."""

    name: str  # an identifier, e.g. "toy_offset"
    title: str  # the heading of the report's section
    summary: tuple[str, ...]  # paragraphs shown before the panels: what is done and why
    panels: tuple[Panel, ...]
    inputs: tuple[Shown, ...] = ()
    notes: tuple[str, ...] = ()  # sentences shown after the panels: what the experiment does not show


@dataclass(frozen=True)
class Measured:
    """What one implementation's run measured: a curve per panel id, and a sentence about some of them."""

    curves: Mapping[str, Curve]
    notes: Mapping[str, str] = field(default_factory=dict)


def section(
    frame: Frame,
    preview: Measured | None,
    preview_note: str | None,
    submission: Measured | None,
    submission_note: str | None,
) -> dict[str, Any]:
    """The report's ``experiment`` section: ``frame`` with the reference's and the submission's curves.

    A run that is missing (``None``) leaves every panel's curve of it null
    with ``*_note`` as the reason. Raises :class:`ExperimentError` when the
    frame or a run does not fit the format.
    """
    if misplaced := [f"{panel.id}: {item.label!r}" for panel in frame.panels for item in panel.series if item.role not in FRAME_ROLES]:
        raise ExperimentError(f"a frame holds only {' and '.join(FRAME_ROLES)} series (not {', '.join(misplaced)})")
    runs = {"preview": (preview, preview_note), "submission": (submission, submission_note)}
    found = {
        "name": frame.name,
        "title": frame.title,
        "summary": list(frame.summary),
        "inputs": [{"label": shown.label, "values": [float(v) for v in shown.values]} for shown in frame.inputs],
        "panels": [
            {
                "id": panel.id,
                "title": panel.title,
                "caption": panel.caption,
                "x": {"label": panel.x.label, "values": [float(v) for v in panel.x.values]},
                "y_label": panel.y_label,
                "y_includes": [float(v) for v in panel.y_includes],
                "series": [_series(item) for item in panel.series]
                + [_series(_run_series(panel.id, role, *run)) for role, run in runs.items()],
            }
            for panel in frame.panels
        ],
        "notes": list(frame.notes),
    }
    wrong = problems(found)
    if wrong:
        raise ExperimentError("; ".join(wrong))
    return found


def _run_series(panel: str, role: str, run: Measured | None, note: str | None) -> Series:
    """The ``role`` series of ``panel`` from one run, or a series without values that says why."""
    label = MEASURED_LABELS[role]
    if run is None:
        return Series(label, role, None, note)
    return Series(label, role, run.curves.get(panel), run.notes.get(panel) or (None if panel in run.curves else "not measured"))


def _series(item: Series) -> dict[str, Any]:
    """A series as JSON: non-finite values become null."""
    values = None if item.values is None else [None if v is None or not math.isfinite(v) else float(v) for v in item.values]
    return {"label": item.label, "role": item.role, "values": values, "note": item.note}


def problems(found: Any, path: str = "$") -> list[str]:
    """What breaks the rules of an experiment section that its JSON schema cannot state, as "path: problem" lines.

    Panel ids are identifiers and unique; a panel holds at most one series of
    each role; every series has one value per x value. Parts of the wrong
    type are left to the schema.
    """
    panels = found.get("panels") if isinstance(found, dict) else None
    if not isinstance(panels, list):
        return []
    wrong = []
    seen: set[Any] = set()
    for index, panel in enumerate(panels):
        where = f"{path}.panels[{index}]"
        if not isinstance(panel, dict):
            continue
        identifier = panel.get("id")
        if not isinstance(identifier, str) or not PANEL_ID.fullmatch(identifier):
            wrong.append(f"{where}.id: must be lowercase letters, digits and underscores (got {identifier!r})")
        elif identifier in seen:
            wrong.append(f"{where}.id: {identifier!r} names an earlier panel too")
        seen.add(identifier)
        x = panel.get("x")
        length = len(x["values"]) if isinstance(x, dict) and isinstance(x.get("values"), list) else None
        roles: list[Any] = []
        for number, item in enumerate(panel.get("series") or []):
            if not isinstance(item, dict):
                continue
            if item.get("role") in roles:
                wrong.append(f"{where}.series[{number}].role: a panel holds one {item['role']!r} series at most")
            roles.append(item.get("role"))
            values = item.get("values")
            if isinstance(values, list) and length is not None and len(values) != length:
                wrong.append(f"{where}.series[{number}].values: {len(values)} values for {length} x values")
    return wrong
