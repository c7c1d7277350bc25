"""The HTML report's structure, read from its markup: headings, tables, status words, responsive layout."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest
from test_templates import sample_report

from grader.reports.report import render_html

STATUS_TEXT = {"passed": "✓ passed", "failed": "✗ failed", "error": "! error", "skipped": "– skipped"}


@dataclass
class Table:
    """One table: its own attributes, whether it has a caption, its header cells' attributes, its parent's class."""

    attrs: dict[str, str | None]
    parent_class: str
    caption: bool = False
    headers: list[dict[str, str | None]] = field(default_factory=list)


class Structure(HTMLParser):
    """Collects headings, tables, SVG elements, badges and elements with src or href."""

    VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "source"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, dict[str, str | None]]] = []
        self.headings: list[tuple[int, str]] = []
        self.tables: list[Table] = []
        self.svgs: list[dict[str, str | None]] = []
        self.badges: list[tuple[str, str]] = []
        self.urls: list[str] = []
        self.metas: list[dict[str, str | None]] = []
        self._text: list[str] | None = None
        self._badge: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.urls += [value for name, value in attrs if name in ("src", "href") and value is not None]
        if re.fullmatch(r"h[1-6]", tag):
            self._text = []
        elif tag == "table":
            parent_class = (self.open[-1][1].get("class") or "") if self.open else ""
            self.tables.append(Table(found, parent_class))
        elif tag == "caption":
            self.tables[-1].caption = True
        elif tag == "th":
            self.tables[-1].headers.append(found)
        elif tag == "svg":
            self.svgs.append(found)
        elif tag == "meta":
            self.metas.append(found)
        elif tag == "span" and "badge" in (found.get("class") or "").split():
            self._badge = ((found["class"] or "").split()[-1].removeprefix("st-"), [])
        if tag not in self.VOID:
            self.open.append((tag, found))

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)
        if self._badge is not None:
            self._badge[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if re.fullmatch(r"h[1-6]", tag) and self._text is not None:
            self.headings.append((int(tag[1]), " ".join("".join(self._text).split())))
            self._text = None
        if self._badge is not None and tag == "span" and (self.open[-1][1].get("class") or "").startswith("badge"):
            self.badges.append((self._badge[0], " ".join("".join(self._badge[1]).split())))
            self._badge = None
        if self.open and self.open[-1][0] == tag:
            self.open.pop()


def structure(report: dict[str, Any]) -> Structure:
    """The parsed structure of the page the grader renders for ``report``."""
    parser = Structure()
    parser.feed(render_html(report))
    parser.close()
    return parser


def variants() -> list[tuple[str, dict[str, Any]]]:
    """The sample report as it is, with a load error and warnings, with only skipped checks, without an experiment."""
    plain = sample_report()
    broken = sample_report()
    broken["submission"]["load_error"] = "SyntaxError at line 3"
    broken["worker"]["warnings"] = ["RuntimeWarning: overflow"]
    skipped = sample_report()
    for tier in skipped["tiers"]:
        for check in tier["checks"]:
            check.update(status="skipped", score=0.0)
    no_experiment = sample_report()
    no_experiment["experiment"] = None
    return [("plain", plain), ("load error", broken), ("skipped", skipped), ("no experiment", no_experiment)]


@pytest.mark.parametrize(("name", "report"), variants())
def test_headings_form_an_outline(name: str, report: dict[str, Any]) -> None:
    """One h1 comes first, and no heading skips a level below the one before it."""
    levels = [level for level, _text in structure(report).headings]
    assert levels[0] == 1 and levels.count(1) == 1, levels
    skips = [(a, b) for a, b in zip(levels, levels[1:]) if b > a + 1]
    assert skips == [], f"{name}: {skips}"


def test_sections_and_tiers_are_headed() -> None:
    """Each section has an h2, each tier's checks sit under it as h3, and so does each panel of the experiment."""
    report = sample_report()
    headings = structure(report).headings
    h2 = [text for level, text in headings if level == 2]
    assert h2[:2] == ["Summary", "Tiers"]
    assert [text.split(" · ")[0] for text in h2[2:5]] == ["T1", "T2", "T3"]
    assert h2[5:] == ["Toy experiment", "Worker process", "Environment"]
    at = headings.index((2, "Toy experiment"))
    assert headings[at + 1 : at + 4] == [(3, panel["title"]) for panel in report["experiment"]["panels"]]
    report["experiment"] = None
    assert [text for level, text in structure(report).headings if level == 2][5:] == ["Worker process", "Environment"]
    t2_at = headings.index((2, next(text for text in h2 if text.startswith("T2"))))
    assert headings[t2_at + 1] == (3, "T2 output matches reference")


def test_tables_are_labelled_scoped_and_scrollable() -> None:
    """Every table is labelled, every header cell has a scope, and every table scrolls in its own container."""
    report = sample_report()
    tables = structure(report).tables
    assert len(tables) == 2 + len(report["experiment"]["panels"])  # tiers, a data table per chart, environment
    for table in tables:
        assert table.caption or table.attrs.get("aria-label") or table.attrs.get("aria-labelledby")
        assert table.headers and all(th.get("scope") in ("col", "row") for th in table.headers)
        assert table.parent_class == "table-wrap"
    tier_table = tables[0]
    assert tier_table.attrs["aria-label"] == "Points and checks passed per tier"
    assert [th["scope"] for th in tier_table.headers] == ["col"] * 5 + ["row"] * 4


def test_every_status_reads_as_a_word() -> None:
    """Each badge shows its status as a symbol and a word, not by colour alone."""
    with_skip = sample_report()
    with_skip["tiers"][0]["checks"][0].update(status="skipped", score=0.0)
    plain, skipped = structure(sample_report()).badges, structure(with_skip).badges
    assert set(STATUS_TEXT.values()) <= {text for _status, text in plain + skipped}
    for status, text in plain + skipped:
        assert text[0] == STATUS_TEXT[status][0] and len(text) > 2, (status, text)
    assert {("passed", "✓ all passed"), ("failed", "✗ 1 failed"), ("error", "! 1 error")} <= set(plain)
    assert ("skipped", "– 1 skipped") in skipped


def test_page_is_responsive_and_self_contained() -> None:
    """A viewport meta tag, charts that scale by their viewBox, and no URL out of the page."""
    report = sample_report()
    parsed = structure(report)
    assert {"name": "viewport", "content": "width=device-width, initial-scale=1"} in parsed.metas
    assert len(parsed.svgs) == len(report["experiment"]["panels"])
    for svg in parsed.svgs:
        assert re.fullmatch(r"0 0 \d+ \d+", svg["viewbox"] or "")  # the parser lowercases names
        assert "width" not in svg and "height" not in svg
    assert parsed.urls and all(url.startswith("#") for url in parsed.urls)
    css = render_html(sample_report())
    assert re.search(r"\.table-wrap \{ overflow-x: auto;", css)
    assert re.search(r"main \{ max-width: \d+rem;", css)


# ---- a report has a size cap (issue 10, item 5) -----------------------------------------------


def test_a_report_over_the_cap_has_its_longest_strings_cut_with_a_note() -> None:
    """25 messages of 9 million characters: the JSON fits in 8 MiB, each long message is cut with a note, short strings are kept."""
    from grader.reports import report

    document = {"tiers": [{"checks": [{"id": f"c{i}", "message": "x" * 9_000_000} for i in range(25)]}], "status": "failed"}
    bounded = report.bounded(document)
    assert len(report.to_json(bounded).encode()) <= report.MAX_REPORT_BYTES
    messages = [c["message"] for c in bounded["tiers"][0]["checks"]]
    assert all(m.endswith("more characters cut: a report is limited to 8,388,608 bytes]") for m in messages)
    assert [c["id"] for c in bounded["tiers"][0]["checks"]] == [f"c{i}" for i in range(25)] and bounded["status"] == "failed"
    assert report.bounded({"message": "short"}) == {"message": "short"}
