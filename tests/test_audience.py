"""Hidden checks and audiences: a student's reports withhold the hidden checks' details, an instructor's do not."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Graded, grade, run_cli
from corpus.mutants import MUTANTS, mutant_source
from markupsafe import escape

from grader.commands import grade_file
from grader.exercises.diffattn.handout import HANDOUT
from grader.reports.audience import HIDDEN_MESSAGE, OUTPUT_WITHHELD, for_audience
from grader.reports.schema import validate
from grader.core.plugin import declared_checks

HIDDEN = {"strided_inputs_accepted", "large_logit_values", "strided_values", "strided_gradients"}
SEED = 4242


@pytest.fixture(scope="module")
def audiences(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Graded]:
    """A softmax that overflows on large logits (it fails a hidden check), graded once for each audience."""
    root = tmp_path_factory.mktemp("audience")
    wrong = root / "naive_softmax.py"
    wrong.write_text(mutant_source(next(m for m in MUTANTS if m.name == "naive_softmax_overflow")))
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {who: pool.submit(grade, wrong, root / who, SEED, "--audience", who) for who in ("student", "instructor")}
        return {who: run.result() for who, run in runs.items()}


def checks(run: Graded) -> dict[str, dict[str, Any]]:
    """Every check record of a run by id."""
    return {c["id"]: c for t in run.report["tiers"] for c in t["checks"]}


def secret_lines(message: str) -> list[str]:
    """The lines of an instructor's message that carry numbers or call descriptions."""
    return [line for line in message.splitlines() if "index" in line or "differential_attention(" in line]


# ---- which checks are hidden -------------------------------------------------------


def test_the_documented_checks_are_hidden() -> None:
    """Exactly the four probes of docs/scoring.md are hidden; every other check is public."""
    declared = declared_checks(HANDOUT.checks_package)
    assert {i for i, d in declared.items() if d["visibility"] == "hidden"} == HIDDEN
    scoring = (ROOT / "docs" / "scoring.md").read_text()
    listed_hidden = {line.split("`")[1] for line in scoring.splitlines() if line.endswith("| **hidden** |")}
    assert listed_hidden == HIDDEN


# ---- end to end: what each audience sees ---------------------------------------------


def test_student_reports_withhold_hidden_messages(audiences: dict[str, Graded]) -> None:
    """No line of a failed hidden check's instructor message appears in the student's JSON or HTML."""
    instructor, student = checks(audiences["instructor"]), checks(audiences["student"])
    failed_hidden = [i for i in HIDDEN if instructor[i]["status"] == "failed"]
    assert "large_logit_values" in failed_hidden
    json_text = json.dumps(audiences["student"].report, ensure_ascii=False)
    for check_id in failed_hidden:
        message = instructor[check_id]["message"]
        lines = secret_lines(message)
        assert lines, message
        assert json.dumps(message, ensure_ascii=False) not in json_text
        for line in lines:
            assert line not in json_text and str(escape(line)) not in audiences["student"].html, line
        assert student[check_id]["message"] == HIDDEN_MESSAGE


def test_instructor_reports_show_hidden_messages(audiences: dict[str, Graded]) -> None:
    """The instructor's JSON and HTML carry the hidden check's full message and its ratio."""
    run = audiences["instructor"]
    check = checks(run)["large_logit_values"]
    assert check["message"] != HIDDEN_MESSAGE and "Worst element at index" in check["message"]
    for line in secret_lines(check["message"]):
        assert str(escape(line)) in run.html
    assert run.report["audience"] == "instructor"


def test_hidden_checks_keep_their_outcome(audiences: dict[str, Graded]) -> None:
    """A hidden check keeps id, title, tier, status, points and duration; ratio, hint and counterexample become null."""
    instructor, student = checks(audiences["instructor"]), checks(audiences["student"])
    for check_id in HIDDEN:
        shown, whole = student[check_id], instructor[check_id]
        for key in ("id", "title", "tier", "status", "score", "max_score", "visibility"):
            assert shown[key] == whole[key], key
        assert shown["visibility"] == "hidden"
        assert shown["worst_ratio"] is shown["hint"] is shown["counterexample"] is None
    assert audiences["student"].report["score"] == audiences["instructor"].report["score"] < 100


def test_public_checks_are_the_same_for_both(audiences: dict[str, Graded]) -> None:
    """Public checks' records do not depend on the audience (apart from timing)."""
    instructor, student = checks(audiences["instructor"]), checks(audiences["student"])
    for check_id, whole in instructor.items():
        if check_id not in HIDDEN:
            assert {**student[check_id], "duration_s": 0} == {**whole, "duration_s": 0}, check_id


def test_reports_record_the_audience_and_validate(audiences: dict[str, Graded]) -> None:
    """Both reports validate against the schema and say who they are for, in the JSON and the HTML."""
    for who, run in audiences.items():
        assert run.report["audience"] == who
        assert validate(run.report) == []
        assert f"<dt>Audience</dt><dd>{who}" in run.html


def test_hidden_checks_are_labelled_in_words(audiences: dict[str, Graded]) -> None:
    """The HTML tags each hidden check "hidden"; the terminal summary marks failed ones "(hidden)"."""
    for run in audiences.values():
        assert run.html.count(">hidden</span>") == len(HIDDEN)
        assert "large_logit_values (hidden)" in run.stdout
        assert "causal_values (hidden)" not in run.stdout


# ---- the redaction function itself -----------------------------------------------------


def test_for_audience_copies_and_leaves_the_input_alone(audiences: dict[str, Graded]) -> None:
    """for_audience returns a new document; the whole report passed in is unchanged."""
    whole = audiences["instructor"].report
    before = copy.deepcopy(whole)
    shown = for_audience(whole, "student")
    assert whole == before
    assert shown is not whole and shown["audience"] == "student"
    assert for_audience(whole, "instructor") == whole


def test_what_the_submission_printed_is_withheld_from_students_when_checks_are_hidden(audiences: dict[str, Graded]) -> None:
    """Printed output can carry hidden inputs: a student's copy replaces it (stdout and stderr alike), an instructor's keeps it;
    without hidden checks the student sees it too."""
    whole = copy.deepcopy(audiences["instructor"].report)
    whole["worker"] = {**whole["worker"], "stdout": "q1 strides (0, 34, 2, 1)\n", "stderr": ""}
    shown = for_audience(whole, "student")
    assert shown["worker"]["stdout"] == OUTPUT_WITHHELD and shown["worker"]["stderr"] == ""
    assert for_audience(whole, "instructor")["worker"]["stdout"] == "q1 strides (0, 34, 2, 1)\n"
    for tier in whole["tiers"]:
        tier["checks"] = [{**check, "visibility": "public"} for check in tier["checks"]]
    assert for_audience(whole, "student")["worker"]["stdout"] == "q1 strides (0, 34, 2, 1)\n"


@pytest.mark.parametrize(
    ("audience", "whose", "fragment"),
    [
        ("teacher", "instructor", "'audience' must be one of ('student', 'instructor') (got 'teacher')"),
        ("instructor", "student", "only a whole report can be shown to an audience (got one for 'student')"),
    ],
)
def test_for_audience_refuses_unknown_audiences_and_redacted_input(audience: str, whose: str, fragment: str) -> None:
    """An unknown audience, or a document already redacted for students, is a ValueError that says what was expected."""
    with pytest.raises(ValueError) as raised:
        for_audience({"audience": whose, "tiers": []}, audience)
    assert str(raised.value) == fragment


# ---- the option ----------------------------------------------------------------------


def test_default_audience_is_student() -> None:
    """Without --audience the reports are for a student."""
    parser = grade_file.build_parser()
    assert parser.parse_args([]).audience == "student"
    assert "instructor shows everything" in " ".join(parser.format_help().split())


def test_unknown_audience_is_a_usage_error(tmp_path: Path) -> None:
    """--audience with another word exits 2 with one line naming the choices."""
    run = run_cli(["x.py", "--audience", "everyone"], tmp_path)
    assert run.code == 2 and run.report is None
    assert run.stderr.count("\n") == 1
    assert "argument --audience: invalid choice: 'everyone' (choose from 'student', 'instructor')" in run.stderr
