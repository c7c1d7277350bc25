"""The docs stay true: the example report validates, every check is listed with its points."""

from __future__ import annotations

import ast
import json
import re

from conftest import ROOT

from grader.reports.schema import validate

CHECKS_DIR = ROOT / "grader" / "exercises" / "diffattn" / "checks"


def _declared_checks() -> dict[str, tuple[str, float]]:
    """check id -> (tier, points), read from the @check decorators."""
    found = {}
    for module in sorted(CHECKS_DIR.glob("test_*.py")):
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", "") == "check":
                        tier, points = (ast.literal_eval(a) for a in decorator.args[:2])
                        found[node.name.removeprefix("test_")] = (tier, float(points))
    return found


def test_example_report_in_the_docs_validates() -> None:
    """The first JSON example of docs/report-schema.md is a valid report."""
    text = (ROOT / "docs" / "report-schema.md").read_text()
    example = json.loads(re.search(r"```json\n(.*?)\n```", text, re.S).group(1))
    assert validate(example) == []


def test_points_add_up_to_one_hundred() -> None:
    """T1 20, T2 40, T3 40: 100 points in all, 28 checks."""
    checks = _declared_checks()
    totals = {tier: sum(p for t, p in checks.values() if t == tier) for tier in ("T1", "T2", "T3")}
    assert totals == {"T1": 20.0, "T2": 40.0, "T3": 40.0}
    assert len(checks) == 28


def test_scoring_doc_lists_every_check_with_its_points() -> None:
    """docs/scoring.md lists each check id under its tier's heading, with its points."""
    listed: dict[str, tuple[str, float]] = {}
    tier = ""
    for line in (ROOT / "docs" / "scoring.md").read_text().splitlines():
        if heading := re.match(r"### (T\d) ", line):
            tier = heading.group(1)
        elif row := re.match(r"\| `(\w+)` \| ([\d.]+) \|", line):
            listed[row.group(1)] = (tier, float(row.group(2)))
    assert listed == _declared_checks()
