"""CI and Gradescope outputs: results.json, JUnit XML, the Markdown summary, --fail-under."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, STUB, run_cli

from grader.commands import grade_file
from grader.commands import launch
from grader.core.scoring import overall_status, tally
from grader.reports import gradescope, junit, markdown
from grader.reports.schema import validate

TIERS = {"T1": "Contract", "T2": "Values", "T3": "Gradients"}
HIDDEN_MESSAGE = "hidden check: its inputs and expected values are shown to instructors only"
HOSTILE = "got float32 | expected float64 `x`\r\nsecond line <b>&</b>\x1b[31m red\x00"
HOSTILE_CLEAN = "got float32 | expected float64 `x`\nsecond line <b>&</b>[31m red"
WARNING = "not run as root: the worker keeps the invoking user's identity"
RESULT_KEYS = {"score", "execution_time", "output", "visibility", "stdout_visibility", "tests"}
HINT = {"id": "no_mask", "text": "Your output matches the formula without the causal mask.", "maths": "softmax(QKᵀ/√D + M): M left out"}
COUNTEREXAMPLE = {
    "found": True, "note": "The smallest failing input of the 3 tried.", "function": "differential_attention",
    "size": {"B": 1, "H": 1, "T": 1, "D": 1}, "call": "differential_attention(q1, k1, q2, k2, value, 0.5, causal=True)",
    "inputs": [], "cotangent": None, "result": "output", "with_respect_to": None,
    "expected": [[[[1.0, 2.0]]]], "got": [[[[1.5, 2.0]]]], "difference": [[[[0.5, 0.0]]]], "allowed": [[[[1e-6, 1e-6]]]],
    "mismatched": 1, "elements": 2, "worst_ratio": 5e5, "searched": 3,
}  # fmt: skip
EXPLAINED = (
    "Likely misconception: Your output matches the formula without the causal mask.\nsoftmax(QKᵀ/√D + M): M left out\n\n"
    "Smallest failing input: differential_attention(q1, k1, q2, k2, value, 0.5, causal=True)\n"
    "expected: [[[[1.0, 2.0]]]]\ngot:      [[[[1.5, 2.0]]]]"
)
TEST_KEYS = {"name", "number", "score", "max_score", "status", "output", "tags", "visibility"}


def _check(check_id: str, tier: str, status: str, points: float, message: str, duration: float,
           visibility: str = "public", **explained: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "id": check_id, "title": f"Title of {check_id}", "tier": tier, "status": status,
        "score": points if status == "passed" else 0.0, "max_score": points, "message": message,
        "duration_s": duration, "worst_ratio": None, "visibility": visibility,
        "hint": explained.get("hint"), "counterexample": explained.get("counterexample"),
    }  # fmt: skip


def sample_report(load_error: str | None = None, statuses: dict[str, str] | None = None) -> dict[str, Any]:
    """A student-audience report: T1 passed/failed/error, T2 two hidden checks, T3 not selected."""
    checks = [
        _check("returns_tensor", "T1", "passed", 3.0, "7 calls returned a tensor.", 0.25),
        _check("keeps_dtype", "T1", "failed", 2.0, HOSTILE, 0.125,
               hint=HINT, counterexample=COUNTEREXAMPLE),  # fmt: skip
        _check("graph_attached", "T1", "error", 1.0, "internal grader error in this check (KeyError: 'x'); please report it", 0.0625),
        _check("row_sums", "T2", "failed", 4.0, HIDDEN_MESSAGE, 0.5, "hidden"),
        _check("lambda_values", "T2", "passed", 6.0, HIDDEN_MESSAGE, 0.0625, "hidden"),
        _check("value_gradient", "T3", "skipped", 5.0, "tier T3 was not selected", 0.0),
        _check("toy_offset_scaling", "T3", "skipped", 5.0, "tier T3 was not selected", 0.0),
    ]
    for check in checks:
        check["status"] = (statuses or {}).get(check["id"], check["status"])
        check["score"] = check["max_score"] if check["status"] == "passed" else 0.0
    tiers, score, max_score = tally(checks, TIERS)
    document = {
        "schema_version": 3, "grader_version": "0.1.0", "exercise": "diff_attention", "exercise_title": "Differential attention", "exercise_version": "1.0", "audience": "student",
        "diagnosis": {"root_causes": [], "unexplained": [], "probes": [], "maps": [], "duration_s": 0.0},
        "submission": {"path": "subs/a|b.py", "sha256": "ab" * 32, "size_bytes": 100, "load_error": load_error, "notes": []},
        "seed": 7, "tiers_selected": ["T1", "T2"], "score": score, "max_score": max_score,
        "status": overall_status(checks), "tiers": tiers, "experiment": None,
        "worker": {"stdout": "", "stderr": "", "restarts": 0, "warnings": [WARNING], "protections": {}, "submission_cpu_s": 0.0},
        "environment": {"python": "3.11.7", "platform": "Linux", "numpy": "2.4.6", "torch": "2.13.0+cpu",
                        "pytest": "9.2.0", "jinja2": "3.1.6", "grader": "0.1.0"},
        "started_at": "2026-11-29T09:41:42+00:00", "duration_s": 2.5,
    }  # fmt: skip
    assert validate(document) == []
    return document


# --- Gradescope results.json -------------------------------------------------


def test_gradescope_has_exactly_the_specified_keys() -> None:
    """Top level and every test carry exactly the keys of the Gradescope specification that diffgrade uses."""
    results = json.loads(gradescope.to_text(sample_report()))
    assert set(results) == RESULT_KEYS
    assert all(set(test) == TEST_KEYS for test in results["tests"])
    assert gradescope.document(0.0, 0.0, "", []).keys() == RESULT_KEYS


def test_gradescope_lists_one_test_per_check_that_ran() -> None:
    """Skipped checks are left out, so the tests' points add up to the report's score and maximum."""
    results = gradescope.results(sample_report())
    rows = [(t["number"], t["tags"], t["status"], t["score"], t["max_score"]) for t in results["tests"]]
    assert rows == [
        ("1.1", ["T1", "returns_tensor"], "passed", 3.0, 3.0),
        ("1.2", ["T1", "keeps_dtype"], "failed", 0.0, 2.0),
        ("1.3", ["T1", "graph_attached"], "failed", 0.0, 1.0),
        ("2.1", ["T2", "row_sums"], "failed", 0.0, 4.0),
        ("2.2", ["T2", "lambda_values"], "passed", 6.0, 6.0),
    ]
    assert results["tests"][0]["name"] == "Title of returns_tensor"
    assert (results["score"], results["execution_time"]) == (9.0, 2.5)
    assert sum(t["max_score"] for t in results["tests"]) == sample_report()["max_score"] == 16.0


def test_gradescope_visibility_follows_the_checks() -> None:
    """Public checks are visible, hidden ones after_published; run_autograder's stdout is for instructors."""
    results = gradescope.results(sample_report())
    assert [t["visibility"] for t in results["tests"]] == ["visible"] * 3 + ["after_published"] * 2
    assert (results["visibility"], results["stdout_visibility"]) == ("visible", "hidden")
    assert results["tests"][3]["output"] == HIDDEN_MESSAGE


def test_gradescope_test_output_has_message_hint_and_counterexample() -> None:
    """A failed check's output is its cleaned message, then its hint and counterexample in words."""
    output = gradescope.results(sample_report())["tests"][1]["output"]
    assert output == HOSTILE_CLEAN + "\n\n" + EXPLAINED


def test_gradescope_summary_has_tiers_load_error_warnings_and_seed() -> None:
    """The top-level output gives the score per tier, the load error, the worker's warnings and the seed."""
    output = gradescope.results(sample_report(load_error="SyntaxError: line 3\n  x = ("))["output"]
    assert output.splitlines() == [
        "diffgrade 0.1.0: Score 9.0/16.0 (error)",
        "",
        "T1 Contract: 3.0/6.0 points, 1 of 3 checks passed",
        "T2 Values: 6.0/10.0 points, 1 of 2 checks passed",
        "T3 Gradients: not run",
        "",
        "A check failed inside the grader itself, so this score may be too low: please tell your instructor.",
        "",
        "Your submission could not be loaded, so every check failed:",
        "SyntaxError: line 3",
        "  x = (",
        "",
        "Warnings:",
        f"- {WARNING}",
        "",
        "Seed 7 (diffgrade --seed 7 repeats these inputs).",
    ]


# --- JUnit XML ---------------------------------------------------------------


def _attributes(element: ET.Element, *names: str) -> tuple[str | None, ...]:
    return tuple(element.get(name) for name in names)


def test_junit_counts_suites_and_cases() -> None:
    """testsuites and each tier's testsuite count tests, failures, errors, skipped and time exactly."""
    root = ET.fromstring(junit.to_xml(sample_report()))
    counts = ("name", "tests", "failures", "errors", "skipped", "time")
    assert root.tag == "testsuites"
    assert _attributes(root, *counts) == ("diffgrade diff_attention", "7", "2", "1", "2", "2.5000")
    assert [_attributes(suite, *counts) for suite in root.findall("testsuite")] == [
        ("T1 Contract", "3", "1", "1", "0", "0.4375"),
        ("T2 Values", "2", "1", "0", "0", "0.5625"),
        ("T3 Gradients", "2", "0", "0", "2", "0.0000"),
    ]
    properties = {p.get("name"): p.get("value") for p in root.find("testsuite/properties")}
    assert properties == {"score": "3.0", "max_score": "6.0", "seed": "7", "submission": "subs/a|b.py", "sha256": "ab" * 32}


def test_junit_testcases_carry_outcome_and_full_message() -> None:
    """Each check is a testcase; failures and errors hold the whole message, skipped ones say why."""
    root = ET.fromstring(junit.to_xml(sample_report()))
    cases = root.findall("testsuite/testcase")
    assert [_attributes(c, "classname", "name", "time") for c in cases[:2]] == [
        ("diff_attention.T1", "returns_tensor", "0.2500"),
        ("diff_attention.T1", "keeps_dtype", "0.1250"),
    ]
    assert [[child.tag for child in case] for case in cases] == [[], ["failure"], ["error"], ["failure"], [], ["skipped"], ["skipped"]]
    failure = cases[1].find("failure")
    assert _attributes(failure, "message", "type") == (HOSTILE_CLEAN, "failed")
    assert failure.text == HOSTILE_CLEAN + "\n\n" + EXPLAINED
    assert cases[2].find("error").get("type") == "error"
    assert cases[5].find("skipped").get("message") == "tier T3 was not selected"


def test_junit_drops_characters_xml_cannot_hold() -> None:
    """NUL, escape, lone surrogates and U+FFFF in a message still give well-formed XML."""
    document = sample_report()
    document["tiers"][0]["checks"][1]["message"] = "a\x00b\x1bc\ud800d\uffffe\x85f\u202eg"
    text = junit.to_xml(document)
    text.encode("utf-8")
    assert ET.fromstring(text).find("testsuite/testcase/failure").get("message") == "abc\ufffdd\ufffdefg"


# --- Markdown ----------------------------------------------------------------


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row, splitting only on pipes that are not backslash-escaped."""
    masked = re.sub(r"\\.", "__", row)
    bounds = [i for i, c in enumerate(masked) if c == "|"]
    return [row[a + 1 : b].strip() for a, b in zip(bounds, bounds[1:])]


def test_markdown_has_title_and_tier_table() -> None:
    """The summary opens with the score, then one table row per tier."""
    lines = markdown.summary(sample_report()).splitlines()
    assert lines[0] == "## diffgrade: Score 9.0/16.0 (error)"
    assert lines[2] == r"Submission subs/a\|b.py, seed 7, graded by diffgrade 0.1.0 in 2.5 s."
    assert lines[4:9] == [
        "| Tier | Points | Checks passed |",
        "| --- | ---: | ---: |",
        "| T1 Contract | 3.0/6.0 | 1/3 |",
        "| T2 Values | 6.0/10.0 | 1/2 |",
        "| T3 Gradients | not run | – |",
    ]


def test_markdown_failed_checks_are_escaped_on_one_line() -> None:
    """Pipes, backticks, markup and newlines of a message cannot break the failed-checks table."""
    lines = markdown.summary(sample_report()).splitlines()
    start = lines.index("### Checks that did not pass (3)")
    table = lines[start + 2 : start + 7]
    assert table[2] == r"| keeps\_dtype | T1 | failed | 0.0/2.0 | got float32 \| expected float64 \`x\` |"
    assert table[4] == r"| row\_sums | T2 | failed | 0.0/4.0 | hidden check: its inputs and expected values are shown to instructors only |"
    assert all(len(_cells(row)) == 5 for row in table)


def test_markdown_puts_load_error_in_a_longer_fence_and_lists_warnings() -> None:
    """A load error with a backtick fence inside sits in a longer fence; warnings are a list."""
    text = markdown.summary(sample_report(load_error="bad ```\n| x |"))
    assert "The submission could not be loaded, so every check failed:\n\n````text\nbad ```\n| x |\n````" in text
    assert text.endswith(f"Warnings:\n\n```text\n{WARNING}\n```\n")


def test_markdown_says_so_when_everything_passed() -> None:
    """With every check passed there is no failure table, one sentence instead."""
    text = markdown.summary(sample_report(statuses={"keeps_dtype": "passed", "graph_attached": "passed", "row_sums": "passed"}))
    assert "All 5 checks that ran passed." in text and "###" not in text


# --- The grade command: options, exit codes, files ---------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--fail-under", "-1"], "argument --fail-under: must be finite and at least 0 (got -1)"),
        (["--fail-under", "nan"], "argument --fail-under: must be finite and at least 0 (got nan)"),
        (["--fail-under", "inf"], "argument --fail-under: must be finite and at least 0 (got inf)"),
        (["--fail-under", "most"], "argument --fail-under: must be a number (got 'most')"),
        (["--junit", "same.out", "--markdown", "same.out"], "arguments --junit and --markdown must name different files (both are same.out)"),
        (["--json", "r.json", "--gradescope", "r.json"], "arguments --json and --gradescope must name different files"),
        (["--markdown", "."], "argument --markdown: must name a regular file (got '.')"),
    ],
)
def test_bad_output_options_are_one_line_usage_errors(args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad --fail-under or clashing output paths exit 2 with one line on stderr, before grading."""
    with pytest.raises(SystemExit) as stopped:
        launch.run([str(STUB), *args])
    error = capsys.readouterr().err
    assert stopped.value.code == 2
    assert len(error.strip().splitlines()) == 1 and fragment in error, error


@pytest.mark.parametrize(
    ("status", "score", "fail_under", "code"),
    [
        ("passed", 16.0, None, 0),
        ("failed", 9.0, None, 1),
        ("failed", 9.0, 9.0, 0),
        ("failed", 9.0, 9.5, 1),
        ("passed", 16.0, 20.0, 1),
        ("error", 16.0, 0.0, 3),
    ],
)
def test_exit_code_follows_fail_under(status: str, score: float, fail_under: float | None, code: int) -> None:
    """With --fail-under the score decides 0 or 1; without it any failed check gives 1; an errored check is 3."""
    assert grade_file.exit_code({"status": status, "score": score}, fail_under) == code


def test_grade_command_writes_every_summary(tmp_path: Path) -> None:
    """The stub, all checks failing, exits 0 with --fail-under 0 and writes the three summaries of its report."""
    paths = {name: tmp_path / "out" / name for name in ("results.json", "junit.xml", "summary.md")}
    run = run_cli([str(STUB), "--seed", "3", "--no-preview", "--tiers", "T1", "--fail-under", "0",
                   "--gradescope", str(paths["results.json"]), "--junit", str(paths["junit.xml"]),
                   "--markdown", str(paths["summary.md"])], ROOT, reports=tmp_path)  # fmt: skip
    assert run.code == 0, run.stderr
    assert (run.report["status"], run.report["score"]) == ("failed", 0.0)
    assert json.loads(paths["results.json"].read_text()) == gradescope.results(run.report)
    assert paths["summary.md"].read_text() == markdown.summary(run.report)
    root = ET.parse(paths["junit.xml"]).getroot()
    assert _attributes(root, "tests", "failures", "errors", "skipped") == ("28", "9", "0", "19")
    assert all(str(path) in run.stdout for path in paths.values())


def test_ci_example_installs_like_the_readme_and_uses_real_options() -> None:
    """docs/ci.md's workflow installs with the README's command, and its diffgrade call parses."""
    workflow = re.search(r"```yaml\n(.*?)\n```", (ROOT / "docs" / "ci.md").read_text(), re.S).group(1)
    install = re.search(r"run: (python -m pip install .*)", workflow).group(1)
    assert f"\n{install}\n" in (ROOT / "README.md").read_text()
    command = re.search(r"run: >-\n((?: {10}.*\n)+)", workflow).group(1).split()
    args = grade_file.build_parser().parse_args(command[1:])
    assert command[0] == "diffgrade"
    assert (args.junit, args.markdown, args.fail_under) == (Path("reports/junit.xml"), Path("reports/summary.md"), 80.0)
