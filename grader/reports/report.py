"""The report of a run: a JSON document, an HTML page and a terminal summary.

The JSON document follows :mod:`grader.reports.schema`; it is written with the json
module (``allow_nan=False``: non-finite numbers were turned into null before).
HTML and text come from the Jinja templates shipped as ``grader.templates``
(the repository's ``templates/`` folder); HTML autoescapes everything, so text
from a submission can never become markup. Files are written atomically.

A document is bounded: text from the submission arrives clipped and cleaned
(:mod:`grader.toolkit.safetext`), and a document whose JSON would still exceed
:data:`MAX_REPORT_BYTES` has its longest strings cut, each with a note, so
that every writer of it (HTML, Gradescope, JUnit, Markdown) stays bounded too.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import jinja2

from grader import CHECKOUT_DIR, __version__
from grader.core.exercise import Exercise
from grader.core.scoring import check_record, overall_status, tally
from grader.core.session import Run
from grader.reports import counterexample_view, diagnosis_view, svgchart
from grader.reports.schema import SCHEMA_VERSION
from grader.toolkit import safetext

MAX_REPORT_BYTES = 8 * 1024 * 1024
CUT_NOTE = " [... {cut:,} more characters cut: a report is limited to {limit:,} bytes]"


def build(exercise: Exercise, run: Run) -> dict[str, Any]:
    """The JSON report of ``run``."""
    checks = [check_record(test) for test in run.checks]
    for check in checks:  # a check failed only because of an earlier root cause says so instead of its own message
        check["message"] = run.diagnosis.notes.get(check["id"], check["message"])
    tiers, score, max_score = tally(checks, exercise.tiers)
    document = _json_safe(
        {
            "schema_version": SCHEMA_VERSION,
            "grader_version": __version__,
            "exercise": exercise.name,
            "exercise_title": exercise.title,
            "exercise_version": exercise.version,
            "audience": "instructor",  # the whole report; grader.reports.audience redacts it for students
            "submission": {
                "path": printable_path(run.submission.path),
                "sha256": run.submission.sha256,
                "size_bytes": run.submission.size,
                "load_error": run.load_failure,
                "notes": list(run.submission.notes),
            },
            "seed": run.options.seed,
            "tiers_selected": list(run.options.tiers),
            "score": score,
            "max_score": max_score,
            "status": overall_status(checks),
            "diagnosis": run.diagnosis.section,
            "tiers": tiers,
            "experiment": run.experiment,
            "worker": run.worker,
            "environment": run.environment,
            "started_at": run.started_at,
            "duration_s": run.duration_s,
        }
    )
    return bounded(document)


def bounded(document: dict[str, Any], limit: int = MAX_REPORT_BYTES) -> dict[str, Any]:
    """``document`` if its JSON fits in ``limit`` bytes; else a copy whose longest strings are cut, each with a note.

    Every string longer than one common length is cut to it, the length
    chosen so that what is cut (at least one byte per character) makes room
    for the excess and the notes.
    """
    excess = len(to_json(document).encode("utf-8")) - limit
    if excess <= 0:
        return document
    lengths = sorted((len(s) for s in _strings(document)), reverse=True)
    note = len(CUT_NOTE.format(cut=10**12, limit=limit))
    keep = lengths[0] if lengths else 0
    while keep > 0:
        keep //= 2
        if sum(n - keep - note for n in lengths if n > keep + note) >= excess:
            break
    return _cut(document, keep, limit)


def _strings(value: Any) -> list[str]:
    """Every string value (not key) in a JSON document."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _cut(value: Any, keep: int, limit: int) -> Any:
    """``value`` with every string longer than ``keep`` characters (plus its note) cut to ``keep`` and the note."""
    if isinstance(value, str):
        if len(value) <= keep + len(CUT_NOTE.format(cut=len(value), limit=limit)):
            return value
        return value[:keep] + CUT_NOTE.format(cut=len(value) - keep, limit=limit)
    if isinstance(value, dict):
        return {k: _cut(v, keep, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, keep, limit) for v in value]
    return value


def printable_path(path: Path) -> str:
    """A path as one line of text: bytes that are not UTF-8 shown as U+FFFD, control characters as escapes (``\\n``).

    The path may be a student's file name; clipped generously (4000 characters).
    """
    return safetext.line(os.fsencode(path).decode("utf-8", errors="replace"), safetext.MAX_TEXT)


def _json_safe(value: Any) -> Any:
    """Plain JSON types only: non-finite floats become None, numpy scalars become Python ones, text valid UTF-8."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and not value.isascii():  # a lone surrogate (from a submission's message) cannot be written
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


def template_dir() -> Path:
    """Where the templates are: the installed ``grader.templates`` package data, or
    ``templates/`` beside the package when it runs from a source checkout
    (``python -m grader`` in the repository's root)."""
    spec = importlib.util.find_spec("grader.templates")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    checkout = CHECKOUT_DIR / "templates"
    if (checkout / "report.html.j2").is_file():
        return checkout
    raise FileNotFoundError("the report templates (package grader.templates) are not installed")


@functools.lru_cache(maxsize=2)  # compiled templates are cached by the environment: a batch compiles them once
def environment(html: bool) -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(template_dir()))
    if html:
        page = jinja2.Environment(loader=loader, autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)
        page.globals["counterexample_view"] = counterexample_view.view
        page.globals["map_view"] = diagnosis_view.map_view
        return page
    return jinja2.Environment(
        loader=loader, autoescape=False, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
    )  # fmt: skip


def preload() -> None:
    """Compile the templates now, so that processes forked later share them."""
    environment(html=True).get_template("report.html.j2")
    environment(html=False).get_template("summary.txt.j2")


def render_html(report: dict[str, Any]) -> str:
    """The self-contained HTML page of a report."""
    charts = svgchart.experiment_charts(report["experiment"])
    return environment(html=True).get_template("report.html.j2").render(report=report, charts=charts)


def render_text(report: dict[str, Any], report_paths: list[str], color: bool = False) -> str:
    """The terminal summary of a report."""
    return environment(html=False).get_template("summary.txt.j2").render(report=report, report_paths=report_paths, color=color)


def to_json(report: dict[str, Any]) -> str:
    """The report as JSON text (no NaN or Infinity tokens)."""
    return json.dumps(report, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` (str as UTF-8, or bytes) to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(text.encode("utf-8") if isinstance(text, str) else text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
