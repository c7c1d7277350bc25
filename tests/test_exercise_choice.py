"""Which exercise a run grades: --exercise, or the functions the submission defines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

from grader.core import registry
from grader.core.registry import ExerciseError, defined_names, matching

ATTENTION = registry.named("diff_attention")
TWO = [ATTENTION, replace(ATTENTION, name="other", functions=("gqa_attention", "diff_v2_attention"))]


def test_defined_names_reads_the_top_level_without_running_it() -> None:
    """Functions, classes, assignments and imports count; names inside functions do not."""
    source = "import torch as t\nfrom x import differential_lambda\nA = 1\nclass B: pass\ndef f():\n    g = 2\n"
    names, functions = defined_names(source)
    assert names == {"t", "differential_lambda", "A", "B", "f"} and functions == {"B", "f"}


def test_defined_names_survives_a_syntax_error() -> None:
    """A file Python cannot parse still shows its def lines."""
    assert defined_names("def differential_attention(q1:\n    return (\n") == ({"differential_attention"},) * 2


def test_the_exercise_with_most_functions_wins() -> None:
    """One function of an exercise is enough when no other exercise shares more."""
    assert matching(["def gqa_attention(q, k, v): pass\n"], TWO).name == "other"
    assert matching(["def differential_lambda(): pass\ndef helper(): pass\n"], TWO).name == "diff_attention"


def test_a_file_defining_nothing_goes_to_the_default_exercise() -> None:
    """An empty file, a script or a star import cannot vote: the default exercise grades it (and says why it fails)."""
    assert matching(["", "import sys\nsys.exit(0)\n", "from reference import *\n"], TWO).name == registry.DEFAULT


def test_functions_of_no_exercise_are_a_usage_error() -> None:
    """A file whose functions belong to no exercise gets a message listing every exercise's functions."""
    with pytest.raises(ExerciseError, match=r"defines none of the functions .*diff_attention: differential_lambda, "
                       r"differential_attention; other: gqa_attention, diff_v2_attention.*--exercise NAME"):  # fmt: skip
        matching(["def softmax(x): pass\n"], TWO)


def test_a_tie_is_a_usage_error() -> None:
    """A file defining one function of each exercise is ambiguous."""
    with pytest.raises(ExerciseError, match="fits diff_attention and other equally"):
        matching(["def differential_lambda(): pass\ndef gqa_attention(): pass\n"], TWO)


def test_a_class_votes_by_majority() -> None:
    """In a batch, the exercise most students' files are for wins, even when some files fit another one."""
    sources = ["def differential_attention(): pass\n"] * 3 + ["def gqa_attention(): pass\n"]
    assert matching(sources, TWO).name == "diff_attention"


def test_an_unknown_exercise_name_exits_2(tmp_path: Path) -> None:
    """--exercise with a name nobody installed is a one-line usage error that lists the installed ones."""
    run = run_cli(["--exercise", "nope"], ROOT, reports=tmp_path)
    assert run.code == 2 and run.report is None
    assert "no exercise is called 'nope' (installed: diff_attention, diff_v2" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_file_for_no_exercise_exits_2(tmp_path: Path) -> None:
    """A file defining only unrelated functions is not graded: exit 2 and the advice to pass --exercise."""
    path = tmp_path / "softmax.py"
    path.write_text("def softmax(x):\n    return x\n")
    run = run_cli([str(path)], tmp_path)
    assert run.code == 2 and run.report is None and "pass --exercise NAME" in run.stderr


def test_exercise_option_overrides_detection(tmp_path: Path) -> None:
    """With --exercise, the named exercise grades the file whatever it defines (here: 0, its functions are missing)."""
    path = tmp_path / "softmax.py"
    path.write_text("def softmax(x):\n    return x\n")
    run = run_cli([str(path), "--exercise", "diff_attention", "--tiers", "T1", "--no-preview"], tmp_path)
    assert run.code == 1 and run.report["exercise"] == "diff_attention" and run.report["score"] == 0.0
    assert "does not define differential_lambda" in run.check("lambda_returns_0dim_tensor")["message"]
