"""Calls at edges of the domain that the ice and v2_hail corpora found unvisited: a future key far above every visible one,
values past float16's range, a head of zero values, λ's exponents both below exp's range, far apart and a hair apart, one
tensor passed as k and v (and as q, k and v), and the way gradients are asked for and arrive; and the blind files that only
those calls catch, which lose points there."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, grade_class

from grader.exercises.diffattn import cases as attention_cases
from grader.exercises.diffattn import expected as attention_expected
from grader.exercises.diffattn import oracle as attention_oracle
from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain

SEEDS = [1, 2, 3]
ICE = ROOT / "tests" / "corpus" / "diagnosis_ice" / "wrong"
V2_HAIL = ROOT / "tests" / "corpus" / "v2_hail" / "wrong"


@pytest.mark.parametrize("seed", SEEDS)
def test_the_large_logit_set_has_a_future_key_far_above_large_values_and_a_zero_head(seed: int) -> None:
    """The three cases before the last: a causal float32 call whose last key draws scaled logits past 1e4 from every earlier query (the
    last one all zeros), a float32
    call with values of 2e5 or more, and a float64 call with one (batch, head) of values exactly zero and the others not."""
    future, large, zeroed = attention_suite.attention_large_logits(seed)[-4:-1]
    logits = np.einsum("bhtd,bhd->bht", future.q1, future.k1[:, :, -1]) / math.sqrt(future.q1.shape[-1])
    assert future.is_causal and future.dtype == "float32" and logits[..., :-1].min() > 1e4 and not logits[..., -1].any()
    assert large.dtype == "float32" and np.abs(large.value).max() > 65504.0 and "values scaled by" in large.note
    per_head = np.abs(zeroed.value).max(axis=(2, 3))
    assert zeroed.dtype == "float64" and (per_head == 0).sum() == 1 and (per_head > 0).sum() == per_head.size - 1


@pytest.mark.parametrize("seed", SEEDS)
def test_each_diff_v2_large_logit_set_ends_with_the_same_three_edges(seed: int) -> None:
    """gqa_attention's and diff_v2_attention's large-logit sets end with the same edges: a future key past 1e4 for every
    earlier query (the last one all zeros), values past float16's range, and one (batch, key/value head) of zero values."""
    for case_set in (v2_suite.gqa_large_logits, v2_suite.diff_large_logits):
        future, large, zeroed = case_set(seed)[-3:]
        assert np.all(future.k[:, -1] == future.k[:, -1, :1])  # the far key is one vector for every key/value head
        logits = np.einsum("bthd,bd->bht", future.q, future.k[:, -1, 0]) / math.sqrt(future.q.shape[-1])
        assert future.is_causal and logits[..., :-1].min() > 1e4 and not logits[..., -1].any()
        assert np.abs(large.v).max() > 65504.0
        per_head = np.abs(zeroed.v).max(axis=(1, 3))
        assert (per_head == 0).sum() == 1 and (per_head > 0).sum() == per_head.size - 1


@pytest.mark.parametrize("seed", SEEDS)
def test_lambda_sets_reach_exponents_below_underflow_far_apart_and_a_hair_apart(seed: int) -> None:
    """lambda_limits ends with both exponents below where exp underflows (λ = λ_init exactly); lambda_values with one exponent
    of 30 to 60 beside one within ±3 (every vector trainable), the first or the second the larger, in both dtypes, and with
    two exponents 0.001 to 0.01 apart in float64."""
    for case in attention_suite.lambda_limits(seed)[-2:]:
        exponents = attention_oracle.lambda_exponents(*case.vectors)
        assert max(exponents) < -attention_cases.EXP_LIMIT[case.dtype]
        assert attention_expected.lambda_value(case).values == case.effective_init
    *distant, near = attention_suite.lambda_values(seed)[-5:]
    orders = set()
    for case in distant:
        exponents = attention_oracle.lambda_exponents(*case.vectors)
        low, high = sorted(exponents)
        assert case.frozen == () and 30 <= high <= 60.01 and -3.01 <= low <= 3.01
        orders.add((case.dtype, exponents[0] > exponents[1]))
    assert orders == {("float32", True), ("float32", False), ("float64", True), ("float64", False)}
    gap = abs(np.subtract(*attention_oracle.lambda_exponents(*near.vectors)))
    assert near.dtype == "float64" and 0.001 - 1e-9 <= gap <= 0.01 + 1e-9


def test_a_lambda_gradient_is_allowed_its_own_pairs_rounding_not_the_others() -> None:
    """With exponents 50 and 2, q2's allowance is a rounding of e² (and 1), not of e⁵⁰: the error of a form that rebuilds the
    smaller pair's gradient from the larger exponential (about e⁵⁰·ε) is far outside it."""
    case = attention_cases.lambda_case(np.random.default_rng(0), 3, "float32", None, exponents=(50.0, 2.0))
    truths = attention_expected.lambda_grads(case)
    assert np.all(truths["q2"].allowed < 1e-3) and np.all(truths["q1"].allowed > 1e10)
    assert math.exp(50.0) * np.finfo(np.float32).eps > 1e3 * truths["q2"].allowed.max()


@pytest.mark.parametrize("seed", SEEDS)
def test_diff_v2_sets_pass_one_tensor_as_k_and_v_and_as_q_k_and_v(seed: int) -> None:
    """Every output set ends with k and v as one object (and, for gqa_attention, q, k and v at Hq = Hkv), heads at least two
    features wide; the request sends one tensor for them and the gradient truth sums theirs."""
    for case_set in (v2_suite.gqa_causal, v2_suite.gqa_noncausal, v2_suite.diff_causal, v2_suite.diff_noncausal,
                     v2_suite.gqa_gradients, v2_suite.diff_gradients):  # fmt: skip
        tied = [case for case in case_set(seed) if case.one_object]
        expected = [("k", "v"), ("q", "k", "v")] if case_set.name.startswith("gqa") else [("k", "v")]
        assert [case.one_object for case in tied] == expected
        for case in tied:
            assert case.q.shape[-1] >= 2 and "one tensor object passed as" in case.label()
            request = v2_suite.request(case, grads=True)
            assert len(request.inputs) == len(case.names) - len(case.one_object) + 1
            assert set(v2_suite.gradient_positions(case)) == set(domain.tensor_names(case.names, case.one_object)) - set(case.frozen)


BLIND_FILES = {
    "diff_attention": [ICE / f"{name}.py" for name in (
        "att_additive_mask_minus_1e4", "att_output_clamped_to_half_range", "att_value_per_head_amax_scaling",
        "lam_expm1_larger_factor_autograd", "lam_init_inside_shared_exponent_factor", "lam_near_tie_expm1_series")],
    "diff_v2": [V2_HAIL / f"{name}.py" for name in (
        "gate_grad_fused_and_returned", "kv_widened_once_per_object_keys_prescaled", "value_grad_fused_into_existing_grad",
        "multi_query_rows_backward_views_cotangent")],
}


@pytest.mark.parametrize("exercise", sorted(BLIND_FILES))
def test_the_blind_files_only_these_calls_catch_lose_points(exercise: str, tmp_path: Path) -> None:
    """Each file that scored 100 before these calls (on every seed, or on some) loses points on seed 2."""
    runs = grade_class({path.stem: path for path in BLIND_FILES[exercise]}, 2, tmp_path, "--exercise", exercise)
    assert {name: run.report["score"] for name, run in runs.items() if run.report["score"] >= 100.0} == {}
