"""The report as JUnit XML, for CI systems that show test results.

``<testsuites>`` holds one ``<testsuite>`` per tier and one ``<testcase>`` per
check (classname ``<exercise>.<tier>``, name the check id, time in seconds),
after a first suite "Root causes" without test cases whose ``<system-out>``
lists them, when there are any. A failed check has a ``<failure>``, an
errored one an ``<error>``, a skipped one ``<skipped>``; their ``message``
attribute is the check's full message and their text starts with the root
cause that explains the check and adds the hint and counterexample. Each suite's ``<properties>``
record the points, the seed and the submission. Text from a submission is
stripped of characters XML 1.0 cannot hold.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from grader.reports import digest

# check status -> (child element of its testcase, counting attribute of the suites)
OUTCOMES = {"failed": ("failure", "failures"), "error": ("error", "errors"), "skipped": ("skipped", "skipped")}


def to_xml(report: dict[str, Any]) -> str:
    """The JUnit XML text of a report document."""
    root = ET.Element("testsuites", name=f"diffgrade {report['exercise']}")
    _count(root, [check for tier in report["tiers"] for check in tier["checks"]], report["duration_s"])
    causes = digest.root_causes(report)
    if causes:  # first, as a suite without test cases whose output lists them
        first = ET.SubElement(root, "testsuite", name="Root causes")
        _count(first, [], 0.0)
        ET.SubElement(first, "system-out").text = "\n\n".join(causes)
    root.extend(_suite(report, tier) for tier in report["tiers"])
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _suite(report: dict[str, Any], tier: dict[str, Any]) -> ET.Element:
    suite = ET.Element("testsuite", name=f"{tier['name']} {tier['title']}")
    _count(suite, tier["checks"], sum(check["duration_s"] for check in tier["checks"]))
    properties = ET.SubElement(suite, "properties")
    facts = {
        "score": digest.points(tier["score"]),
        "max_score": digest.points(tier["max_score"]),
        "seed": str(report["seed"]),
        "submission": digest.clean(report["submission"]["path"]),
        "sha256": report["submission"]["sha256"] or "",
    }
    for name, value in facts.items():
        ET.SubElement(properties, "property", name=name, value=value)
    suite.extend(_case(report["exercise"], check, digest.cause_of(report, check["id"])) for check in tier["checks"])
    return suite


def _case(exercise: str, check: dict[str, Any], cause: str | None) -> ET.Element:
    case = ET.Element("testcase", classname=f"{exercise}.{check['tier']}", name=check["id"], time=_seconds(check["duration_s"]))
    if check["status"] in OUTCOMES:
        tag = OUTCOMES[check["status"]][0]
        message = digest.clean(check["message"]).strip() or digest.NO_MESSAGE
        detail = ET.SubElement(case, tag, message=message)
        if tag != "skipped":
            detail.set("type", check["status"])
            detail.text = "\n\n".join([*([cause] if cause else []), message, *digest.explanations(check)])
    return case


def _count(element: ET.Element, checks: list[dict[str, Any]], seconds: float) -> None:
    """Set the tests, failures, errors, skipped and time attributes of a suite (or all suites) of ``checks``."""
    element.set("tests", str(len(checks)))
    for status, (_, attribute) in OUTCOMES.items():
        element.set(attribute, str(sum(check["status"] == status for check in checks)))
    element.set("time", _seconds(seconds))


def _seconds(value: float) -> str:
    return f"{value:.4f}"
