"""The allowances of λ's gradients: finite, and tight enough that a 1 % error never passes."""

from __future__ import annotations

import numpy as np
import pytest

from grader.exercises.diffattn import expected, oracle, suite

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
