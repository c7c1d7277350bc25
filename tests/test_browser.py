"""The HTML reports as a person sees them: loaded from disk in headless Chromium at laptop and phone widths.

A student's report.html (the reference at full marks, a wrong submission) and
a batch's summary.html built from those two. Screenshots of every page land in
``artifacts/screenshots/`` of the checkout.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REFERENCE, Graded, grade
from corpus.mutants import WRONG_DIR
from headless import Chromium, PageLoad, chromium_executable, load_page

from grader.commands import batch
from grader.core.submissions import Entry
from grader.reports import classreport

EXECUTABLE = chromium_executable()
pytestmark = pytest.mark.skipif(
    EXECUTABLE is None, reason="chromium is not installed (.ci/run installs the Debian package chromium)"
)

WIDTHS = {"laptop": 1280, "phone": 390}
PAGES = [(name, device) for name in ("reference", "wrong") for device in WIDTHS]
WRONG = WRONG_DIR / "logit_difference.py"
SCORE = ".verdict .big"
TIER_TABLE = "Points and checks passed per tier"
# Each chart of the toy experiment and how many curves it draws: expected (1 − λ), preview and submission for the
# offset; preview and submission for the signal; √(1 + λ²), 1 − λ (context), preview and submission for the noise;
# the oracle's share or 1 − λ, preview and submission for the signed map.
CURVES = {
    "Offset response against λ": 3,
    "Signal retained against λ": 2,
    "Independent noise against λ": 4,
    "Negative entries of the signed map against λ": 3,
    "Row sums of the signed map against λ": 3,
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TIERS = ["T1", "T2", "T3"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    """One headless Chromium shared by the module's tests."""
    assert EXECUTABLE is not None
    with Chromium(EXECUTABLE) as chromium:
        yield chromium


@pytest.fixture(scope="module")
def reports(reference_runs: dict[int, Graded], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Graded]:
    """The reference at full marks with its preview curve, and a wrong submission graded the same way."""
    wrong = grade(WRONG, tmp_path_factory.mktemp("wrong"), 33, "--reference", str(REFERENCE))
    graded = {"reference": reference_runs[33], "wrong": wrong}
    for run in graded.values():
        assert run.html is not None and run.report is not None, run.stderr
    return graded


@pytest.fixture(scope="module")
def pages(
    browser: Chromium, reports: dict[str, Graded], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], PageLoad]:
    """Each report written to disk and loaded at each width, with a full-page screenshot."""
    folder = tmp_path_factory.mktemp("pages")
    loaded = {}
    for name, device in PAGES:
        path = folder / f"{name}.html"
        path.write_text(str(reports[name].html), encoding="utf-8")
        loaded[name, device] = load_page(browser, path, WIDTHS[device], f"report-{name}-{device}.png", (SCORE,))
    return loaded


@pytest.fixture(scope="module")
def summary_page(reports: dict[str, Graded], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """summary.html of a batch of the two graded submissions, with their reports in folders beside it."""
    folder = tmp_path_factory.mktemp("batch")
    records = []
    for name, run in reports.items():
        (folder / name).mkdir()
        (folder / name / "report.html").write_text(str(run.html), encoding="utf-8")
        records.append(batch.record_of(Entry(name, name, None), run.report))
    summary = classreport.summarize(
        records, exercise="diff_attention", seed=33, tiers=TIERS, interrupted=False,
        started_at="2026-11-29T12:00:00+00:00", duration_s=9.0, graded=2, reused=0,
    )  # fmt: skip
    path = folder / "summary.html"
    path.write_text(classreport.render_html(summary), encoding="utf-8")
    return path


def table(facts: dict[str, Any], label: str) -> dict[str, Any]:
    """The measured table labelled ``label``."""
    return next(t for t in facts["tables"] if t["label"] == label)


def assert_outline_and_links(facts: dict[str, Any]) -> None:
    """One h1 first, no skipped heading level, and no src or href leaving the page."""
    levels = [level for level, _text in facts["headings"]]
    assert levels[0] == 1 and levels.count(1) == 1, levels
    assert all(after <= before + 1 for before, after in zip(levels, levels[1:])), levels
    assert not [url for url in facts["urls"] if re.match(r"\s*(https?:)?//", url, re.I)]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file, from its header."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_console_errors_and_exceptions_are_caught(browser: Chromium, tmp_path: Path) -> None:
    """A logged error, a thrown exception and a missing file are all reported; a clean page reports none."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!doctype html><title>bad</title><script>console.error("deliberate", 42)</script>'
        '<script>throw new Error("thrown on purpose")</script><img src="missing.png" alt="">'
    )
    clean = tmp_path / "clean.html"
    clean.write_text('<!doctype html><title>clean</title><p>fine</p><script>console.log("ok")</script>')
    errors = sorted(load_page(browser, bad, 1280).errors)
    assert len(errors) == 3, errors
    assert errors[0] == "console.error: deliberate 42"
    assert errors[1].startswith("log (network): Failed to load resource: net::ERR_FILE_NOT_FOUND")
    assert errors[1].endswith("/missing.png")
    assert errors[2].startswith("uncaught exception: Error: thrown on purpose")
    assert load_page(browser, clean, 1280).errors == []


def test_overflow_and_cut_labels_are_measured(browser: Chromium, tmp_path: Path) -> None:
    """A page wider than a phone and a chart label outside its viewBox are both seen."""
    faulty = tmp_path / "faulty.html"
    faulty.write_text(
        '<!doctype html><meta name="viewport" content="width=device-width, initial-scale=1"><title>faulty</title>'
        '<div style="width: 600px">wide</div><svg viewBox="0 0 100 50" aria-label="cut">'
        '<text x="-40" y="20">cut off</text><text x="10" y="40">inside</text></svg>'
    )
    facts = load_page(browser, faulty, WIDTHS["phone"]).facts
    # 600 px plus the body's 8 px margin; a phone zooms out to show it all, which widens innerWidth.
    assert (facts["scroll_width"], facts["client_width"], facts["inner_width"]) == (608, WIDTHS["phone"], 608)
    assert facts["svgs"][0]["cut_text"] == ["cut off"]


@pytest.mark.parametrize(("name", "device"), PAGES)
def test_report_loads_cleanly_and_is_captured(pages: dict[tuple[str, str], PageLoad], name: str, device: str) -> None:
    """No console error or exception; the screenshot is a PNG as wide as the window and the whole page tall."""
    page = pages[name, device]
    assert page.errors == []
    assert page.screenshot is not None
    width, height = png_size(page.screenshot)
    assert width == WIDTHS[device] and height > 2000


def test_reference_page_shows_full_marks(pages: dict[tuple[str, str], PageLoad], reports: dict[str, Graded]) -> None:
    """The score reads 100.0 / 100.0, every tier row says all passed, and every check says passed."""
    facts = pages["reference", "laptop"].facts
    assert facts["selected"][SCORE] == ["100.0 / 100.0"]
    rows = table(facts, TIER_TABLE)["rows"][1:]
    assert [row[0] for row in rows] == ["T1", "T2", "T3", "Total"]
    assert [row[2] for row in rows] == ["20.0 / 20.0", "40.0 / 40.0", "40.0 / 40.0", "100.0 / 100.0"]
    assert [row[-1] for row in rows] == ["✓ all passed"] * 3 + ["✓ passed"]
    checks = sum(tier["total"] for tier in reports["reference"].report["tiers"])
    assert facts["text"].count("✓ passed") >= checks
    assert "✗" not in facts["text"]


def test_wrong_page_shows_its_failures(pages: dict[tuple[str, str], PageLoad], reports: dict[str, Graded]) -> None:
    """The score and each tier's count of failed checks are shown in words, with the failed checks listed."""
    report = reports["wrong"].report
    facts = pages["wrong", "laptop"].facts
    assert report["score"] < 100.0
    assert facts["selected"][SCORE] == [f"{report['score']:.1f} / 100.0"]
    rows = {row[0]: row for row in table(facts, TIER_TABLE)["rows"][1:]}
    statuses = [check["status"] for tier in report["tiers"] for check in tier["checks"]]
    assert "error" not in statuses and "failed" in statuses
    for tier in report["tiers"]:
        failed = sum(check["status"] == "failed" for check in tier["checks"])
        assert rows[tier["name"]][-1] == (f"✗ {failed} failed" if failed else "✓ all passed")
    assert rows["Total"][-1] == "✗ failed"
    assert [3, "Checks that did not pass"] in facts["headings"]
    assert facts["text"].count("✗ failed") >= 2 * statuses.count("failed")  # listed in the summary and in its tier


def chart_of(facts: dict[str, Any], title: str) -> dict[str, Any]:
    """The measured SVG whose accessible name is ``title``: it has a size within the window and its viewBox's aspect."""
    chart = next(svg for svg in facts["svgs"] if svg["label"] == title)
    assert 0 < chart["width"] <= facts["inner_width"]
    assert chart["height"] / chart["width"] == pytest.approx(380 / 640, rel=1e-3)
    return chart


@pytest.mark.parametrize(("name", "device"), PAGES)
def test_experiment_charts_are_drawn(
    pages: dict[tuple[str, str], PageLoad], reports: dict[str, Graded], name: str, device: str
) -> None:
    """A chart per panel with every curve full and a square per submission point; the noise sentence is shown; no SVG label is cut off."""
    facts = pages[name, device].facts
    panels = reports[name].report["experiment"]["panels"]
    assert [svg["label"] for svg in facts["svgs"] if svg["label"] in CURVES] == [found["title"] for found in panels]
    for found in panels:
        points = len(found["x"]["values"])
        chart = chart_of(facts, found["title"])
        assert chart["polylines"] == [points] * CURVES[found["title"]], found["id"]
        assert len(chart["paths"]) == points + 1 and min(chart["paths"]) > 0  # the submission's markers and its legend's
    assert "Noise that is independent in the two maps is not cancelled" in facts["text"]
    assert "Each point is the mean of the 4 row sums" in facts["text"]
    assert [svg["cut_text"] for svg in facts["svgs"] if svg["cut_text"]] == []


@pytest.mark.parametrize(("name", "device"), PAGES)
def test_page_fits_the_window(pages: dict[tuple[str, str], PageLoad], name: str, device: str) -> None:
    """The document is no wider than the window (a phone does not zoom out), and the tier table fits whole."""
    facts = pages[name, device].facts
    assert facts["inner_width"] == facts["client_width"] == WIDTHS[device]
    assert facts["scroll_width"] <= facts["client_width"]
    tiers = table(facts, TIER_TABLE)
    assert tiers["width"] <= tiers["container_width"]


@pytest.mark.parametrize(("name", "device"), PAGES)
def test_outline_and_links_stay_in_the_page(pages: dict[tuple[str, str], PageLoad], name: str, device: str) -> None:
    """One h1 first, no skipped heading level, and no src or href leaves the page."""
    facts = pages[name, device].facts
    assert facts["urls"]
    assert_outline_and_links(facts)


@pytest.mark.parametrize("device", WIDTHS)
def test_class_summary_as_seen(
    browser: Chromium, summary_page: Path, reports: dict[str, Graded], device: str
) -> None:
    """summary.html loads cleanly, fits the window, draws both bar charts and lists both students in words."""
    page = load_page(browser, summary_page, WIDTHS[device], f"summary-{device}.png")
    facts = page.facts
    assert page.errors == []
    assert facts["scroll_width"] <= facts["client_width"] == facts["inner_width"] == WIDTHS[device]
    assert_outline_and_links(facts)
    assert all(not svg["cut_text"] for svg in facts["svgs"])
    histogram = next(svg for svg in facts["svgs"] if svg["label"] == "Number of students per score range")
    assert histogram["width"] > 0 and histogram["height"] > 0
    assert len(histogram["rects"]) == 10 and min(histogram["rects"]) > 0
    failures = next(svg for svg in facts["svgs"] if svg["label"] == "Share of graded students who failed each check")
    checks = sum(tier["total"] for tier in reports["reference"].report["tiers"])
    assert failures["width"] > 0 and len(failures["rects"]) == checks and max(failures["rects"]) > 0
    rows = table(facts, "Every student's score, linking to their report")["rows"][1:]
    wrong_score = f"{reports['wrong'].report['score']:.1f} / 100.0"
    assert [(row[0], row[1], row[-2]) for row in rows] == [
        ("reference", "100.0 / 100.0", "✓ passed"),
        ("wrong", wrong_score, "✗ failed"),
    ]


V2_REFERENCE = REFERENCE.parent / "diff_v2_attention.py"
V2_WRONG = REFERENCE.parents[1] / "tests" / "corpus" / "v2" / "wrong" / "exp_gate.py"
V2_PAGES = [(name, device) for name in ("v2_reference", "v2_wrong") for device in WIDTHS]


@pytest.fixture(scope="module")
def v2_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Graded]:
    """The DIFF V2 reference and a wrong DIFF V2 file (exp instead of the sigmoid), graded with the preview curve."""
    graded = {
        name: grade(path, tmp_path_factory.mktemp(name), 33, "--reference", str(V2_REFERENCE))
        for name, path in (("v2_reference", V2_REFERENCE), ("v2_wrong", V2_WRONG))
    }
    for run in graded.values():
        assert run.html is not None and run.report is not None and run.report["exercise"] == "diff_v2", run.stderr
    return graded


@pytest.fixture(scope="module")
def v2_pages(
    browser: Chromium, v2_reports: dict[str, Graded], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], PageLoad]:
    """Each DIFF V2 report loaded at each width, with a full-page screenshot."""
    folder = tmp_path_factory.mktemp("v2_pages")
    loaded = {}
    for name, device in V2_PAGES:
        path = folder / f"{name}.html"
        path.write_text(str(v2_reports[name].html), encoding="utf-8")
        loaded[name, device] = load_page(browser, path, WIDTHS[device], f"report-{name}-{device}.png", (SCORE,))
    return loaded


@pytest.mark.parametrize(("name", "device"), V2_PAGES)
def test_diff_v2_report_is_drawn_like_the_first(
    v2_pages: dict[tuple[str, str], PageLoad], v2_reports: dict[str, Graded], name: str, device: str
) -> None:
    """A DIFF V2 report loads without error, fits the window, keeps its outline, and draws every panel of its experiment."""
    page, report = v2_pages[name, device], v2_reports[name].report
    assert page.errors == []
    facts = page.facts
    assert facts["scroll_width"] <= facts["client_width"] == WIDTHS[device]
    assert_outline_and_links(facts)
    assert facts["selected"][SCORE] == [f"{report['score']:.1f} / 100.0"]
    assert (report["score"] == 100.0) == (name == "v2_reference")
    for found in report["experiment"]["panels"]:
        chart = chart_of(facts, found["title"])
        assert chart["polylines"] == [len(found["x"]["values"])] * len(found["series"]), found["id"]
    assert [svg["cut_text"] for svg in facts["svgs"] if svg["cut_text"]] == []
