"""The allowances of λ's gradients: finite, and tight enough that a 1 % error never passes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import ROOT, run_cli

from grader.exercises.diffattn import expected, oracle, suite
from grader.toolkit.tolerance import FLOOR_SHARE, SAFETY, UNIT_ROUNDOFF, allowance

# 12 and 19: a case whose Σ|q⊙k| is 170 and 94 (the old bound, exp(|q|·|k|), allowed anything);
# 1825336751: one of 752 (the old bound overflowed, an internal error for every submission).
SEEDS = (1, 12, 19, 1825336751)


@pytest.mark.parametrize("seed", SEEDS)
def test_lambda_gradient_allowances_are_finite_and_below_one_percent(seed: int) -> None:
    """Every case of lambda_values: every allowance is under 1 % of λ's largest gradient element (or of |g|·|vector|, the
    gradient's scale at exponents near 0), and under 1 % of the vector's own gradient wherever the two exponents are
    within 5 of each other and above −20: there a 1 % error in one term's gradient never passes. Far apart, or both far
    below 0, a term's gradient is below the rounding of the larger term or of 1, which any identity for λ may carry."""
    judged = 0
    for case in suite.lambda_values(seed):
        grads = expected.lambda_grads(case)
        scale = abs(case.upstream) * max(float(np.abs(v).max()) for v in case.vectors)
        largest = max([scale] + [float(np.abs(truth.values).max()) for truth in grads.values()])
        a, b = oracle.lambda_exponents(*case.vectors)
        own = abs(a - b) <= 5.0 and min(a, b) > -20.0
        judged += own
        for name, truth in grads.items():
            assert np.all(np.isfinite(truth.allowed)), (seed, case.label(), name)
            assert truth.allowed.max() < 0.01 * largest, (seed, case.label(), name)
            if own:
                assert truth.allowed.max() < 0.01 * np.abs(truth.values).max(), (seed, case.label(), name)
    assert judged >= 5  # most cases have exponents close enough for the per-vector bound


@pytest.mark.parametrize("seed", SEEDS)
def test_end_to_end_gradients_have_finite_allowances(seed: int) -> None:
    """λ feeding the attention: every gradient allowance is finite."""
    for case in suite.end_to_end(seed):
        for name, truth in expected.attention_grads(case).items():
            assert np.all(np.isfinite(truth.allowed)), (seed, name)


def test_the_smallest_allowance_is_a_share_of_the_largest_a_few_roundings_of_the_largest_element() -> None:
    """Elements near 0 beside large ones are allowed FLOOR_SHARE of the largest allowance (the rounding an exactly cancelling
    term leaves on them), elements of their own size keep their own bound, and a lone element is allowed its own."""
    allowed = allowance("float32", 100, np.array([1e-15, 1e-2, 2.0]))
    largest = SAFETY * UNIT_ROUNDOFF["float32"] * 100 * 2.0
    assert allowed[2] == pytest.approx(largest) and allowed[0] == pytest.approx(FLOOR_SHARE * largest)
    assert allowed[1] == pytest.approx(SAFETY * UNIT_ROUNDOFF["float32"] * 100 * 1e-2)
    assert allowed[0] < UNIT_ROUNDOFF["float32"] * 2.0 * 2  # two roundings of the largest element at n = 100
    assert float(allowance("float64", 10, 1e-20)) == pytest.approx(SAFETY * UNIT_ROUNDOFF["float64"] * 10 * 1e-20)


def test_a_correct_attention_with_keys_centred_over_the_tokens_earns_full_marks(tmp_path: Any) -> None:
    """Keys centred over the tokens move each row's logits by one constant: right maps, and gradients that cancel that
    term only to the rounding of the largest gradients, which near-zero gradient elements must be allowed."""
    path = ROOT / "tests" / "corpus" / "diagnosis_harvest" / "correct" / "keys_centred_row_constant_shift.py"
    run = run_cli([str(path), "--seed", "1", "--no-preview"], tmp_path)
    assert run.report["score"] == 100.0


def test_a_correct_attention_with_values_centred_over_the_tokens_earns_full_marks(tmp_path: Any) -> None:
    """Values centred over every token, their mean added back times 1 − c: right outputs that round at the size of that
    mean, which keys the mask hides may set (on seed 4, four checks failed before, by up to 2.4 times their allowance)."""
    path = ROOT / "tests" / "corpus" / "diagnosis_ice" / "correct" / "centred_values_newton_reciprocal.py"
    run = run_cli([str(path), "--seed", "4", "--no-preview"], tmp_path)
    assert run.report["score"] == 100.0


def test_the_output_allowance_counts_a_shift_of_the_values_by_their_largest_magnitude() -> None:
    """The output's absolute-value evaluation adds each row's weight times the largest |value| of its feature over every token."""
    from grader.exercises.diffattn import oracle

    q = np.zeros((1, 1, 2, 1))
    value = np.array([[[[1.0, 0.0], [10.0, 0.0]]]])
    magnitude = oracle.attention_output_magnitude(q, q, q, q, value, 0.0, True)
    # query 0 sees key 0 only (|V| = 1), and the shift is the feature's largest |V| = 10 (a hidden key's)
    np.testing.assert_allclose(magnitude[0, 0, 0], [1.0 + 10.0, 0.0])
    np.testing.assert_allclose(magnitude[0, 0, 1], [5.5 + 10.0, 0.0])
