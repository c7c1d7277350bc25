"""Tests of the report templates and of the chart geometry they draw from."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jinja2
import pytest

from grader.core.experiment import Axis, Frame, Measured, Panel, Series, Shown, section
from grader.reports import svgchart

TEMPLATES = Path(__file__).parents[1] / "templates"
HOSTILE = '<script>alert("x")</script> & more'
CHECK_IDS = [
    "t1_lambda_returns_0dim_tensor",
    "t1_output_shape",
    "t2_output_matches_reference",
    "t2_masked_rows",
    "t3_grad_value",
    "t3_grad_lambda",
]


def html_env() -> jinja2.Environment:
    """The HTML environment as grader/reports/report.py builds it (strict, like the text one)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )


def text_env() -> jinja2.Environment:
    """The plain-text environment as grader/reports/report.py builds it."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def render_html(report: dict[str, Any]) -> str:
    """Render the HTML report the way the caller does."""
    charts = svgchart.experiment_charts(report["experiment"])
    return html_env().get_template("report.html.j2").render(report=report, charts=charts)


def render_text(report: dict[str, Any], paths: list[str] | None = None, color: bool = False) -> str:
    """Render the terminal summary the way the caller does."""
    template = text_env().get_template("summary.txt.j2")
    return template.render(report=report, report_paths=paths or [], color=color)


def check(
    check_id: str, tier: str, status: str, points: float, message: str, worst: float | None = None
) -> dict[str, Any]:
    """One check entry; a passed check earns all its points."""
    return {
        "id": check_id,
        "title": check_id.replace("_", " ").capitalize(),
        "tier": tier,
        "status": status,
        "score": points if status == "passed" else 0.0,
        "max_score": points,
        "message": message,
        "duration_s": 0.01,
        "worst_ratio": worst,
    }


LAMBDAS = tuple(i / 10 for i in range(11))
WIDE = tuple(-1.0 + 0.25 * i for i in range(13))


def sample_experiment() -> dict[str, Any]:
    """An experiment section of three panels, as the harness assembles it.

    The first has an expected line and a gap in the submission's curve, the
    second no expected line, the third its own x axis, a context line and a
    note on each measured curve.
    """
    half: list[float | None] = [1.0 - 0.8 * lam for lam in LAMBDAS]
    half[4] = None
    frame = Frame(
        "toy_offset",
        "Toy experiment",
        ("Adding the same offset vector to every value row should move the output by (1 − λ) times that offset.",),
        (
            Panel("offset_response", "Offset response against λ", "The factor by which the offset reaches the output.",
                  Axis("λ", LAMBDAS), "offset response", (Series("Expected (1 − λ)", "expected", [1.0 - lam for lam in LAMBDAS]),), (0.0, 1.0)),
            Panel("signal_retained", "Signal retained against λ", "The norm of the output's signal part.",
                  Axis("λ", LAMBDAS), "signal retained", (), (0.0, 1.0)),
            Panel("row_sums", "Row sums against λ", "Every row sums to 1 − λ.", Axis("λ", WIDE), "row sum",
                  (Series("Expected (1 − λ)", "expected", [1.0 - x for x in WIDE]), Series("Zero", "context", [0.0] * len(WIDE))), (0.0, 1.0)),
        ),
        inputs=(Shown("Shared value offset", (0.7, -1.2, 0.3, 0.05)),),
        notes=("Only the first chart is graded.",),
    )  # fmt: skip
    preview = Measured(
        {"offset_response": [1.0 - lam for lam in LAMBDAS], "signal_retained": [1.0 - 0.3 * lam for lam in LAMBDAS], "row_sums": [1.0 - x for x in WIDE]},
        {"row_sums": "Each point is the mean of the 4 row sums."},
    )  # fmt: skip
    submission = Measured(
        {"offset_response": half, "signal_retained": [1.0 - 0.5 * lam for lam in LAMBDAS], "row_sums": [1.0 - x for x in WIDE]},
        {"row_sums": "Each point is the mean of the 4 row sums."},
    )  # fmt: skip
    return section(frame, preview, None, submission, None)


def measured_series(report: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The series of ``role`` in every panel of the report's experiment."""
    return [item for panel in report["experiment"]["panels"] for item in panel["series"] if item["role"] == role]


def sample_report() -> dict[str, Any]:
    """A realistic report with a hostile failed message and a gap in the experiment's curves."""
    t1 = [
        check(CHECK_IDS[0], "T1", "passed", 3.0, "ok: shape () dtype float32"),
        check(CHECK_IDS[1], "T1", "passed", 17.0, "ok"),
    ]
    t2 = [
        check(
            CHECK_IDS[2],
            "T2",
            "failed",
            7.0,
            f"worst element differs: {HOSTILE}\n  index (0, 3, 1)\n    got 0.5 expected 0.25",
            worst=12.5,
        ),
        check(CHECK_IDS[3], "T2", "passed", 33.0, "all masked rows match"),
    ]
    t3 = [
        check(
            CHECK_IDS[4],
            "T3",
            "error",
            20.0,
            "RuntimeError: element 0 of tensors does not require grad\nTraceback ...",
        ),
        check(CHECK_IDS[5], "T3", "passed", 20.0, "dL/dlambda within tolerance"),
    ]
    def tier(name: str, title: str, score: float, total: float, checks: list) -> dict[str, Any]:
        passed = sum(1 for item in checks if item["status"] == "passed")
        return {
            "name": name,
            "title": title,
            "score": score,
            "max_score": total,
            "passed": passed,
            "total": len(checks),
            "checks": checks,
        }

    return {
        "schema_version": 3,
        "grader_version": "0.1.0",
        "exercise": "diff_attention",
        "submission": {
            "path": "exercise/diff_attention.py",
            "sha256": "ab12" * 16,
            "size_bytes": 1234,
            "load_error": None,
        },
        "seed": 123456,
        "tiers_selected": ["T1", "T2", "T3"],
        "score": 73.0,
        "max_score": 100.0,
        "status": "failed",
        "tiers": [
            tier("T1", "Contract", 20.0, 20.0, t1),
            tier("T2", "Values", 33.0, 40.0, t2),
            tier("T3", "Gradients", 20.0, 40.0, t3),
        ],
        "experiment": sample_experiment(),
        "worker": {
            "stdout": f"debug print {HOSTILE}\nsecond line",
            "stderr": "",
            "restarts": 1,
            "warnings": ["UserWarning: something odd"],
        },
        "environment": {
            "python": "3.11.7",
            "platform": "Linux-6.1-x86_64",
            "numpy": "2.4",
            "torch": None,
            "pytest": "9.2",
            "jinja2": "3.1.6",
            "grader": "0.1.0",
        },
        "started_at": "2026-11-29T09:30:00+00:00",
        "duration_s": 4.2,
    }


@pytest.fixture()
def report() -> dict[str, Any]:
    """A fresh sample report for each test."""
    return sample_report()


def svg_blocks(page: str) -> list[str]:
    """The inline SVG elements of a page, in order."""
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


def series_group(svg: str, key: str) -> str:
    """The drawn group of one series inside an SVG (empty if not drawn)."""
    match = re.search(rf'<g class="series s-{key}">(.*?)</g>', svg, flags=re.S)
    return match.group(1) if match else ""


# ---- HTML report -----------------------------------------------------------


def test_html_escapes_hostile_text(report: dict[str, Any]) -> None:
    """Student text is escaped wherever it appears and never comes out as a raw tag."""
    report["submission"]["load_error"] = f"SyntaxError at line 3: {HOSTILE}"
    for item in measured_series(report, "submission"):
        item.update(values=None, note=HOSTILE)
    for item in measured_series(report, "preview"):
        item["label"] = "<svg onload=alert(1)>"
    report["experiment"]["panels"][0]["caption"] = HOSTILE
    report["experiment"]["notes"] = [HOSTILE]
    report["worker"]["warnings"] = [HOSTILE]
    report["environment"]["platform"] = HOSTILE
    page = render_html(report)
    assert "<script" not in page.lower()
    assert "<svg onload" not in page
    assert "&lt;script&gt;alert(" in page
    assert "&amp; more" in page
    # load error, failed message, stdout, warning, environment, a caption (twice: shown and in the chart's desc),
    # the experiment's note, a note per panel
    assert page.count("&lt;script&gt;") >= 11


def test_html_is_self_contained(report: dict[str, Any]) -> None:
    """The page references nothing outside itself and runs no script."""
    page = render_html(report).lower()
    assert page.startswith("<!doctype html>")
    forbidden = ("http://", "https://", "<script", "<link", "@import", "<img", "<iframe", "url(")
    for needle in forbidden:
        assert needle not in page, needle


def test_html_document_structure(report: dict[str, Any]) -> None:
    """Language, charset, viewport, title and a single h1 are present."""
    page = render_html(report)
    assert '<html lang="en">' in page
    assert '<meta charset="utf-8">' in page
    assert 'name="viewport"' in page
    assert re.search(r"<title>[^<]*73\.0/100\.0[^<]*</title>", page)
    assert page.count("<h1>") == 1
    assert "<details" in page and "<pre>" in page


def test_html_summary_facts(report: dict[str, Any]) -> None:
    """Score, percentage, seed, path, hash, grader version and duration are shown."""
    page = render_html(report)
    assert "73.0&thinsp;/&thinsp;100.0" in page
    assert "(73%)" in page
    assert "123456" in page
    assert "exercise/diff_attention.py" in page
    assert "ab12" * 16 in page
    assert "diffgrade 0.1.0" in page
    assert "4.2&nbsp;s" in page


def test_html_tier_table(report: dict[str, Any]) -> None:
    """The tier table has scoped headers and one row per tier with its points."""
    page = render_html(report)
    section = re.search(r'<section aria-labelledby="tiers-heading">.*?</table>', page, flags=re.S)
    table = section.group(0)
    assert '<th scope="col">Tier</th>' in table
    expected = (("T1", "Contract", "20.0"), ("T2", "Values", "33.0"), ("T3", "Gradients", "20.0"))
    for name, title, points in expected:
        row = re.search(rf'<th scope="row"><a href="#tier-\d">{name}</a></th>.*?</tr>', table, re.S)
        assert row, name
        assert title in row.group(0) and points in row.group(0)


def test_html_every_check_shown(report: dict[str, Any]) -> None:
    """Every check id appears, with its status as a word and its message in a pre."""
    page = render_html(report)
    for check_id in CHECK_IDS:
        assert f"<code>{check_id}</code>" in page
    assert page.count('<article class="check st-passed"') == 4
    assert page.count('<article class="check st-failed"') == 1
    assert page.count('<article class="check st-error"') == 1
    assert "</span> failed</span>" in page and "</span> error</span>" in page
    assert "<pre>worst element differs: &lt;script&gt;" in page
    assert "\n  index (0, 3, 1)\n    got 0.5" in page


def test_html_load_error_prominent(report: dict[str, Any]) -> None:
    """A load error is shown before the summary."""
    report["submission"]["load_error"] = "SyntaxError at line 3, column 5: invalid syntax"
    page = render_html(report)
    error_at = page.index("SyntaxError at line 3, column 5")
    assert error_at < page.index('id="summary-heading"')
    assert "could not be loaded" in page


def test_html_no_load_error_section_when_loaded(report: dict[str, Any]) -> None:
    """No load-error box appears for a submission that loaded."""
    assert "could not be loaded" not in render_html(report)


def test_html_draws_every_panel_by_role(report: dict[str, Any]) -> None:
    """One chart per panel; each draws the series its panel has, told apart by role (dash, marker, context dots)."""
    page = render_html(report)
    offset_svg, signal_svg, sums_svg = svg_blocks(page)
    for svg in (offset_svg, signal_svg, sums_svg):
        assert 'role="img"' in svg and "<title>" in svg and "aria-label=" in svg
    assert "<polyline" in series_group(offset_svg, "expected")
    assert "<polyline" in series_group(offset_svg, "preview")
    # The submission's null at λ = 0.4 splits its line in two.
    assert series_group(offset_svg, "submission").count("<polyline") == 2
    assert series_group(signal_svg, "expected") == ""
    assert "<polyline" in series_group(signal_svg, "preview")
    assert "<polyline" in series_group(signal_svg, "submission")
    context = series_group(sums_svg, "context")
    assert "<polyline" in context and "<circle" not in context and "<path" not in context  # drawn dotted, without markers
    assert series_group(sums_svg, "submission").count("<path") == len(WIDE)  # a square per point
    assert "1 of 11 points were not finite" in page
    assert "Each point is the mean of the 4 row sums." in page


def test_html_experiment_text(report: dict[str, Any]) -> None:
    """The section is headed by the experiment's title and shows its summary, inputs, captions and notes."""
    page = render_html(report)
    assert '<h2 id="experiment-heading">Toy experiment</h2>' in page
    assert "should move the output by (1 − λ) times that offset." in page
    assert "Shared value offset (4 components):" in page and "0.7, -1.2, 0.3, 0.05" in page
    for title in ("Offset response against λ", "Signal retained against λ", "Row sums against λ"):
        assert f"<h3>{title}</h3>" in page
    assert "<p>Every row sums to 1 − λ.</p>" in page
    assert "<li>Only the first chart is graded.</li>" in page


def test_html_chart_axes_and_legend(report: dict[str, Any]) -> None:
    """Charts carry tick labels, axis labels and a legend naming every series."""
    offset_svg, _signal_svg, sums_svg = svg_blocks(render_html(report))
    for label in ("0.0", "0.2", "1.0"):
        assert f">{label}</text>" in offset_svg
    assert ">λ</text>" in offset_svg and ">offset response</text>" in offset_svg
    legend = offset_svg[offset_svg.index('<g class="legend">') :]
    for text in ("Expected (1 − λ)", "Reference preview", "Submission"):
        assert f">{text}</text>" in legend
    for label in ("-1.0", "2.0"):
        assert f">{label}</text>" in sums_svg
    assert '<g class="s-context">' in sums_svg[sums_svg.index('<g class="legend">') :]


def test_html_missing_curves_show_notes(report: dict[str, Any]) -> None:
    """Null preview and submission curves draw nothing and show their notes."""
    for item in measured_series(report, "preview"):
        item.update(values=None, note="the reference preview was not run & skipped")
    for item in measured_series(report, "submission"):
        item.update(values=None, note="submission raised ValueError")
    page = render_html(report)
    offset_svg, signal_svg, _sums_svg = svg_blocks(page)
    assert series_group(offset_svg, "submission") == ""
    assert series_group(offset_svg, "preview") == ""
    assert "<polyline" in series_group(offset_svg, "expected")
    assert "the reference preview was not run &amp; skipped" in page
    assert "submission raised ValueError" in page
    assert "Submission (not available)" in offset_svg
    assert "No curve could be drawn for this chart." in page  # the signal chart has no expected line


def test_html_all_null_points_and_empty_experiment(report: dict[str, Any]) -> None:
    """A curve of only nulls, and an experiment whose panel has no x values, still render."""
    measured_series(report, "submission")[0]["values"] = [None] * len(LAMBDAS)
    page = render_html(report)
    assert series_group(svg_blocks(page)[0], "submission") == ""
    assert "Submission:</strong> not shown: none of its 11 points has a finite value." in page
    empty = copy.deepcopy(report)
    empty["experiment"]["panels"] = [{
        "id": "empty", "title": "Nothing", "caption": "", "x": {"label": "x", "values": []}, "y_label": "y",
        "y_includes": [], "series": [{"label": "Submission", "role": "submission", "values": None, "note": None}],
    }]  # fmt: skip
    assert len(svg_blocks(render_html(empty))) == 1


def test_html_worker_output_collapsible(report: dict[str, Any]) -> None:
    """Non-empty stdout is in a details element; empty stderr gets none."""
    page = render_html(report)
    assert "<summary>Captured stdout (2 lines)</summary>" in page
    assert "Captured stderr" not in page
    report["worker"]["stdout"] = ""
    assert "The worker printed nothing." in render_html(report)


def test_html_environment_table(report: dict[str, Any]) -> None:
    """Each environment entry is a row; a null version reads as not available."""
    page = render_html(report)
    for name in ("python", "platform", "numpy", "torch", "pytest", "jinja2"):
        assert f'<th scope="row">{name}</th>' in page
    assert '<th scope="row">torch</th><td><span class="muted">not available</span>' in page


def test_html_null_numbers(report: dict[str, Any]) -> None:
    """Null score, hash and durations render as dashes instead of failing."""
    report["score"] = None
    report["duration_s"] = None
    report["submission"]["sha256"] = None
    report["submission"]["size_bytes"] = None
    report["tiers"][1]["checks"][0]["score"] = None
    page = render_html(report)
    assert "&mdash;&thinsp;/&thinsp;100.0" in page
    assert "not available" in page


def test_html_status_not_colour_only(report: dict[str, Any]) -> None:
    """Each status badge carries a symbol and a word next to its colour class."""
    page = render_html(report)
    pattern = r'<span class="badge st-(\w+)"><span aria-hidden="true">(.)</span> (\w[\w ,]*)</span>'
    badges = re.findall(pattern, page)
    kinds = {(cls, symbol) for cls, symbol, _word in badges}
    assert ("passed", "✓") in kinds and ("failed", "✗") in kinds and ("error", "!") in kinds
    assert all(word for _cls, _symbol, word in badges)


def test_html_without_experiment(report: dict[str, Any]) -> None:
    """An exercise without an experiment (null section, no charts) has no section for it."""
    report["experiment"] = None
    page = render_html(report)
    assert "experiment-heading" not in page
    assert "<svg" not in page and "</html>" in page


class TagBalance(HTMLParser):
    """Collects element nesting problems and the names of all start tags."""

    VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "source"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.seen: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.add(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.add(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"unexpected </{tag}> with open {self.stack[-3:]}")
            return
        self.stack.pop()


def test_html_is_well_formed(report: dict[str, Any]) -> None:
    """Every element the page opens is closed in order, and no script element exists."""
    report["submission"]["load_error"] = "SyntaxError: <div>"
    measured_series(report, "submission")[0]["values"] = None
    parser = TagBalance()
    parser.feed(render_html(report))
    parser.close()
    assert parser.problems == []
    assert parser.stack == []
    assert "script" not in parser.seen and "div" in parser.seen
    assert {"svg", "polyline", "table", "details", "pre", "h1", "h2", "h3"} <= parser.seen


# ---- text summary ------------------------------------------------------------


def test_text_summary_layout(report: dict[str, Any]) -> None:
    """Header, tier lines, score line and report paths come out as plain text."""
    text = render_text(report, ["out/report.html", "out/report.json"])
    lines = text.splitlines()
    assert lines[0] == "diffgrade 0.1.0 | exercise/diff_attention.py | seed 123456"
    assert re.search(r"^T1 Contract\s+20\.0/20\.0\s+2/2 passed$", text, flags=re.M)
    assert re.search(r"^T2 Values\s+33\.0/40\.0\s+1/2 passed$", text, flags=re.M)
    assert "Score: 73.0/100.0 (73%)" in text
    assert "Reports: out/report.html" in text and "out/report.json" in text
    assert text.endswith("\n")
    assert "\x1b" not in text
    assert all(len(line) <= 80 for line in lines)


def test_text_summary_lists_only_non_passed(report: dict[str, Any]) -> None:
    """Failed and errored checks appear with their first message line; passed ones do not."""
    text = render_text(report)
    assert "FAIL  t2_output_matches_reference" in text
    assert "ERROR t3_grad_value" in text
    assert f"        worst element differs: {HOSTILE}" in text
    assert "index (0, 3, 1)" not in text
    assert "RuntimeError: element 0 of tensors does not require grad" in text
    for passed in (CHECK_IDS[0], CHECK_IDS[1], CHECK_IDS[3], CHECK_IDS[5]):
        assert passed not in text
    assert "Reports:" not in text


def test_text_summary_color(report: dict[str, Any]) -> None:
    """With color on, statuses get ANSI green, red and yellow codes."""
    text = render_text(report, color=True)
    assert "\x1b[32m2/2 passed\x1b[0m" in text
    assert "\x1b[31mFAIL \x1b[0m" in text
    assert "\x1b[33mERROR\x1b[0m" in text
    assert "\x1b[31mFAILED\x1b[0m" in text


def test_text_summary_load_error_and_skips(report: dict[str, Any]) -> None:
    """A load error is printed and a tier of only skipped checks collapses to one line."""
    report["submission"]["load_error"] = "SyntaxError at line 3, column 5: bad\n    def f(:"
    for tier in report["tiers"]:
        for item in tier["checks"]:
            item.update(status="skipped", score=0.0, message="skipped: the submission did not load")
        tier.update(score=0.0, passed=0)
    report.update(score=0.0, status="error")
    text = render_text(report)
    assert "LOAD ERROR" in text
    assert "  SyntaxError at line 3, column 5: bad\n      def f(:\n" in text
    assert text.count("all 2 checks") == 3
    assert "Score: 0.0/100.0 (0%)  ERROR" in text


def test_text_summary_strips_control_characters(report: dict[str, Any]) -> None:
    """Escape sequences in student text cannot reach the terminal."""
    report["tiers"][1]["checks"][0]["message"] = "\x1b[2J\x1b]0;pwned\x07cleared\rover\nsecond"
    report["worker"]["warnings"] = ["\x9b31mwarn"]
    text = render_text(report, color=False)
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "[2J]0;pwnedcleared" in text


def test_text_summary_null_numbers_and_long_lines(report: dict[str, Any]) -> None:
    """Null numbers read n/a and very long first lines are cut to 80 columns."""
    report["score"] = None
    report["tiers"][1]["checks"][0]["message"] = "x" * 500
    text = render_text(report)
    assert "Score: n/a/100.0 (n/a)" in text
    assert all(len(line) <= 80 for line in text.splitlines())


# ---- svgchart ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (-1.2, 1.0, [-1.5, -1.0, -0.5, 0.0, 0.5, 1.0]),
        (0.1, 0.7, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]),
        (0.0, 37.0, [0.0, 10.0, 20.0, 30.0, 40.0]),
        (1.0, 0.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    ],
)
def test_nice_ticks(lo: float, hi: float, expected: list[float]) -> None:
    """Ticks are round, evenly spaced and cover the range."""
    assert svgchart.nice_ticks(lo, hi) == expected


def test_nice_ticks_degenerate_and_invalid() -> None:
    """An empty range is widened; non-finite bounds are refused."""
    ticks = svgchart.nice_ticks(0.5, 0.5)
    assert ticks[0] < 0.5 < ticks[-1]
    assert svgchart.nice_ticks(0.0, 0.0)[0] < 0.0
    with pytest.raises(ValueError):
        svgchart.nice_ticks(0.0, float("inf"))
    with pytest.raises(ValueError):
        svgchart.nice_ticks(float("nan"), 1.0)


def test_tick_labels() -> None:
    """Tick labels use the decimals the step needs and never print minus zero."""
    ticks = svgchart.nice_ticks(-1.2, 1.0)
    labels = [svgchart.tick_label(t, ticks) for t in ticks]
    assert labels == ["-1.5", "-1.0", "-0.5", "0.0", "0.5", "1.0"]
    assert svgchart.tick_label(20.0, [0.0, 10.0, 20.0]) == "20"
    assert svgchart.tick_label(-0.0, [0.0, 0.5]) == "0.0"


def test_scale_and_format() -> None:
    """Scaling is linear (also reversed, for y) and numbers are short."""
    assert svgchart.scale(0.5, (0.0, 1.0), (10.0, 110.0)) == 60.0
    assert svgchart.scale(1.0, (0.0, 1.0), (300.0, 20.0)) == 20.0
    assert svgchart.scale(3.0, (2.0, 2.0), (0.0, 10.0)) == 5.0
    assert svgchart.format_number(175.2000001) == "175.2"
    assert svgchart.format_number(-0.001) == "0"
    assert svgchart.format_number(64.0) == "64"


def test_segments_break_at_none() -> None:
    """None in x or y ends a segment; isolated points make one-point segments."""
    xs = [0.0, 0.25, 0.5, 0.75, 1.0]
    ys = [0.0, None, 1.0, 1.0, None]
    parts = svgchart.segments(xs, ys, (0.0, 1.0), (0.0, 1.0), (0.0, 0.0, 100.0, 100.0))
    assert parts == [[(0.0, 100.0)], [(50.0, 0.0), (75.0, 0.0)]]
    assert svgchart.points_attr(parts[1]) == "50,0 75,0"


def test_experiment_charts_shape() -> None:
    """One chart per panel with ticks, legend, series keyed by role and a table headed by the x axis."""
    charts = svgchart.experiment_charts(sample_report()["experiment"])
    assert [chart["id"] for chart in charts] == ["chart-offset_response", "chart-signal_retained", "chart-row_sums"]
    offset, signal, sums = charts
    assert [s["key"] for s in offset["series"]] == ["expected", "preview", "submission"]
    assert [s["key"] for s in signal["series"]] == ["preview", "submission"]
    assert [s["key"] for s in sums["series"]] == ["expected", "context", "preview", "submission"]
    assert [s["z"] for s in sums["series"]] == [2, 0, 1, 3]
    assert offset["viewbox"] == f"0 0 {offset['width']} {offset['height']}"
    assert [t["label"] for t in offset["x_ticks"]] == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
    assert offset["x_label"] == "λ" and offset["y_label"] == "offset response"
    assert offset["description"].startswith("Line chart of offset response against λ, for λ from 0 to 1.")
    submission = offset["series"][2]
    assert submission["missing"] == 1 and len(submission["segments"]) == 2
    assert len(submission["markers"]) == 10
    assert len(offset["table"]["rows"]) == 11 and offset["table"]["rows"][4][3] == "\u2014"
    assert offset["table"]["headings"] == ["λ", "Expected (1 − λ)", "Reference preview", "Submission"]
    assert len(sums["table"]["rows"]) == 13 and sums["table"]["rows"][0][0] == "-1"
    number = r"-?\d+(\.\d{1,2})?"
    pair = rf"{number},{number}"
    for series in offset["series"]:
        for points in series["segments"]:
            assert re.fullmatch(rf"{pair}( {pair})*", points)


def test_experiment_charts_deterministic_and_tolerant() -> None:
    """The same input gives the same output; junk, extreme values and repeated ids do not raise."""
    experiment = sample_report()["experiment"]
    assert svgchart.experiment_charts(experiment) == svgchart.experiment_charts(copy.deepcopy(experiment))
    junk = {
        "panels": [
            {
                "id": "Not an id!",
                "x": {"values": [0.0, 0.5, "x", 1.0]},
                "series": [
                    {"role": "submission", "values": [1e300, float("nan"), True, -1e300]},
                    {"role": "preview", "label": "<b>x</b>" * 20, "values": [1.0]},
                    {"role": "mystery", "values": "no"},
                    "not a series",
                ],
            },
            {"id": "twice"},
            {"id": "twice"},
            None,
        ]
    }
    charts = svgchart.experiment_charts(junk)
    assert [chart["id"] for chart in charts] == ["chart-panel-1", "chart-twice", "chart-twice-3", "chart-panel-4"]
    first = charts[0]
    assert first["series"][0]["available"] and first["series"][0]["missing"] == 2
    assert len(first["legend"][1]["text"]) == svgchart.LABEL_MAX_CHARS and first["legend"][1]["text"].endswith("…")
    assert first["series"][1]["label"] == "<b>x</b>" * 20  # whole in the notes and the table
    assert first["series"][2]["key"] == "context" and not first["series"][2]["present"]
    assert not charts[1]["has_data"] and charts[1]["title"] == "Panel 2"
    assert svgchart.experiment_charts(None) == [] and svgchart.experiment_charts({"panels": "no"}) == []
    huge = svgchart.panel_chart({"x": {"values": [-1e308, 1e308]}, "series": [{"role": "submission", "values": [0, 1]}]})
    assert huge["series"][0]["available"]
