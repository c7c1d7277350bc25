"""What the squall corpora (defensive code that defends too much, written blind) showed: two wrong files at full marks on
some seeds, both for want of a boundary the contract allows, which the domain now always meets (a head wider than a fused
kernel's 256 features, a Python float within 1e-6 of 0 and of 1); and checks of the student's own that refuse calls the
contract allows, in a function of one part or on sizes, which were no root cause or a wrong one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import REFERENCE, ROOT, first_root_cause, grade

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


@pytest.mark.parametrize(("corpus_file", "component"), [
    ("diagnosis_squall/wrong/att_negative_coefficient_normalised.py", "sign"),
    ("diagnosis_practice/wrong/att_coefficient_clamped_nonnegative.py", "coefficient"),
])  # fmt: skip
def test_a_map_right_for_coefficients_of_one_sign_alone_names_the_negative_ones(corpus_file: str, component: str, tmp_path: Path) -> None:
    """Branches swapped for λ < 0 are the sign's fault, λ clamped at 0 the coefficient's: both read out at λ = −½ alone."""
    cause = first_root_cause(corpus_file, tmp_path)
    assert (cause["function"], cause["component"], cause["title"]) == ("differential_attention", component, "Negative coefficients give the wrong map")
    assert "A1 − λ·A2 at λ = 0, ½, 2; at λ = −½ it is" in cause["evidence"]


def test_a_row_wrong_alike_with_and_without_the_mask_is_no_fault_of_the_causal_path(tmp_path: Path) -> None:
    """A log-normaliser floored at 0 spoils causal rows of few keys: the rows' sums, not the causal path, are named."""
    cause = first_root_cause("v2_squall/wrong/log_normaliser_floored_at_zero.py", tmp_path, "T2", "--exercise", "diff_v2")
    assert (cause["function"], cause["component"], cause["title"]) == ("gqa_attention", "softmax", "The attention weights of a row do not sum to 1")


def test_an_output_clamped_at_the_largest_value_is_no_finite_mask(tmp_path: Path) -> None:
    """A future value's change that reaches every feature of earlier outputs is no weight on a hidden key."""
    cause = first_root_cause("v2_squall/wrong/output_bounded_by_value_magnitude.py", tmp_path, "T2", "--exercise", "diff_v2")
    assert cause["function"] == "diff_v2_attention" and cause["component"] != "mask"


def test_a_check_of_a_value_made_from_a_parameter_is_that_parameter_s_part(tmp_path: Path) -> None:
    """`gate = torch.sigmoid(lambda_logits)` then `if not (0 < gate < 1): raise`: the gate refuses saturated logits."""
    cause = first_root_cause("v2_squall/wrong/gate_range_asserted_open_interval.py", tmp_path, "T1", "--exercise", "diff_v2")
    assert (cause["function"], cause["component"]) == ("diff_v2_attention", "gate")
    assert "a check of its own refuses calls the contract allows" in cause["title"]


def test_gates_read_out_of_a_logit_sweep_tell_logits_rescaled_before_the_sigmoid(tmp_path: Path) -> None:
    """Logits multiplied by 30 / max|ℓ| when some |ℓ| > 30: the sweep to ±60 reads the gate as σ(0.5·ℓ)."""
    cause = first_root_cause("v2_squall/wrong/gate_logits_rescaled_into_range.py", tmp_path, "T2", "--exercise", "diff_v2")
    assert (cause["function"], cause["component"], cause["title"]) == ("diff_v2_attention", "gate", "The gate is not σ(ℓ) of each logit")
    assert "g is σ(0.5·ℓ)" in cause["evidence"]


def test_a_map_read_at_a_wrong_call_s_coefficient_tells_the_coefficient_used(tmp_path: Path) -> None:
    """A Python float within 1e-6 of 0 snapped to 0: read out at that coefficient, the map is A1 − 0·A2."""
    cause = first_root_cause("diagnosis_squall/wrong/att_coefficient_noise_snapped.py", tmp_path)
    assert (cause["function"], cause["component"]) == ("differential_attention", "coefficient")
    assert cause["title"].startswith("The coefficient −") and cause["title"].endswith("is used as 0")


GUARDED_LINE = '        logits = logits.masked_fill(future, float("-inf"))\n'
ROW_MAX_CHECK = ('    row_max = logits.amax(dim=-1)\n'
                 '    if (row_max > 50).any():\n'
                 '        raise FloatingPointError("logits past the range this softmax is tested on")\n')


def test_a_check_of_its_own_on_a_value_a_part_made_is_that_part_s(tmp_path: Path) -> None:
    """`row_max = logits.amax(-1)` then `if (row_max > 50).any(): raise`: the softmax's line made what the check refuses."""
    source = REFERENCE.read_text()
    assert GUARDED_LINE in source
    path = tmp_path / "guarded_softmax.py"
    path.write_text(source.replace(GUARDED_LINE, GUARDED_LINE + ROW_MAX_CHECK))
    cause = grade(path, tmp_path / "run", 20261201, "--tiers", "T2").report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("differential_attention", "softmax")
    assert "a check of its own refuses calls the contract allows" in cause["title"]
