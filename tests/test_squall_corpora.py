"""What the squall corpora (defensive code that defends too much, written blind) showed: two wrong files at full marks on
some seeds, both for want of a boundary the contract allows, which the domain now always meets (a head wider than a fused
kernel's 256 features, a Python float within 1e-6 of 0 and of 1); and checks of the student's own that refuse calls the
contract allows, in a function of one part or on sizes, which were no root cause or a wrong one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, grade

from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain

CORPORA = ROOT / "tests" / "corpus"
SEEDS = (1, 2, 3, 4, 20261201)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_non_causal_output_set_has_a_head_wider_than_a_fused_kernel_takes(seed: int) -> None:
    """Each exercise's non-causal output sets call once with a head past 256 features."""
    assert max(c.q1.shape[-1] for c in attention_suite.attention_noncausal(seed)) > domain.KERNEL_WIDEST
    for output_set in (v2_suite.gqa_noncausal, v2_suite.diff_noncausal):
        assert max(c.q.shape[-1] for c in output_set(seed)) > domain.KERNEL_WIDEST


@pytest.mark.parametrize("seed", SEEDS)
def test_the_coefficient_set_has_python_floats_within_a_millionth_of_zero_and_of_one(seed: int) -> None:
    """A Python float coefficient 0 < |c| < 1e-6 and one 0 < |c − 1| < 1e-6 are called on every seed."""
    floats = [c.coefficient for c in attention_suite.attention_coefficients(seed) if c.coefficient_kind == "float"]
    assert any(0.0 < abs(c) < 1e-6 for c in floats)
    assert any(0.0 < abs(c - 1.0) < 1e-6 for c in floats)


@pytest.mark.parametrize(("corpus_file", "exercise", "seed"), [
    ("v2_squall/wrong/head_dim_limit_of_fused_kernels.py", "diff_v2", 20261201),
    ("diagnosis_squall/wrong/att_coefficient_noise_snapped.py", "diff_attention", 2),
])  # fmt: skip
def test_a_boundary_the_contract_allows_costs_points(corpus_file: str, exercise: str, seed: int, tmp_path: Path) -> None:
    """A refusal of heads past 256 features, and a snap of near-integer coefficients, lose points on seeds that gave them 100."""
    assert grade(CORPORA / corpus_file, tmp_path, seed, "--exercise", exercise).report["score"] < 100.0


def test_a_function_of_one_part_that_refuses_frozen_inputs_is_that_part(tmp_path: Path) -> None:
    """differential_lambda's own check raising unless every vector requires grad: λ's part refuses calls the contract allows."""
    run = grade(CORPORA / "diagnosis_squall/wrong/lam_trainable_parameters_enforced.py", tmp_path, 20261201)
    cause: dict[str, Any] = run.report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("differential_lambda", "lambda")
    assert "a check of its own refuses calls the contract allows" in cause["title"]
    assert run.report["diagnosis"]["unexplained"] == []


def test_a_check_of_sizes_that_refuses_wide_heads_is_the_shape_s_in_the_function_that_holds_it(tmp_path: Path) -> None:
    """gqa_attention's own `if d > 256: raise`: gqa_attention's sizes, not the causal flag diff_v2_attention passes it."""
    run = grade(CORPORA / "v2_squall/wrong/head_dim_limit_of_fused_kernels.py", tmp_path, 20261201, "--exercise", "diff_v2")
    cause: dict[str, Any] = run.report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("gqa_attention", "shape")
    assert "The check tests the sizes of its inputs" in cause["evidence"]
