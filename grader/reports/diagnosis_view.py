"""What the HTML report shows of the diagnosis's maps: the submission's attention map next to the expected one.

:func:`map_view` turns one entry of the report's ``diagnosis.maps``
(docs/report-schema.md) into two heat maps from :mod:`grader.reports.heatmap`
on one colour scale each, as markup escaped while it is built.
"""

from __future__ import annotations

from typing import Any

import markupsafe

from grader.reports import heatmap
from grader.reports.counterexample_view import as_matrix


def map_view(entry: dict[str, Any], ident: str) -> dict[str, Any]:
    """The title and the expected and submitted heat maps of one map read out by the probes."""
    figures = {}
    for key, whose in (("expected", "The expected map"), ("got", "Your map")):
        matrix = as_matrix(entry[key])
        description = f"{whose}, {matrix.shape[0]} queries (rows i) by {matrix.shape[1]} keys (columns j): darker red is more weight."
        figures[key] = markupsafe.Markup(heatmap.svg(matrix.tolist(), f"{whose}: {entry['title']}", description, f"{ident}-{key}"))
    return {"title": entry["title"], **figures}
