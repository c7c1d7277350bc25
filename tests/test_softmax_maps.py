"""grader.toolkit.softmax: the vectorised oracles' maps, head by head in extended precision, independent of torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import imported_modules

from grader.exercises.diffattn import oracle
from grader.toolkit import softmax


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lead", [(1,), (2, 3), ()])
def test_maps_match_python_floats_to_a_few_ulps(lead: tuple[int, ...], causal: bool) -> None:
    """Every head's map equals the plain-Python one (the oracle's scalar path) to a few float64 ulps (of the element, or of 1
    for weights far below it, whose Python-float exponent is rounded), hidden keys exactly 0, the leading axes kept."""
    rng = np.random.default_rng(7)
    queries, keys = rng.normal(0, 3, (*lead, 9, 5)), rng.normal(0, 3, (*lead, 9, 5))
    got = softmax.softmax_maps(queries, keys, causal)
    heads = (-1, 1, 9, 5) if len(lead) < 2 else (*lead, 9, 5)  # the scalar path takes [B, H, T, D]
    expected = oracle.scalar_attention_maps(queries.reshape(heads), keys.reshape(heads), causal).reshape(*lead, 9, 9)
    assert got.shape == (*lead, 9, 9) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=4e-15, atol=4e-16)
    assert np.array_equal(got == 0, expected == 0)


def test_large_logits_neither_overflow_nor_lose_the_largest_key() -> None:
    """Scaled logits of thousands give finite rows that sum to 1, the largest logit's key taking all the weight."""
    queries = np.full((1, 2, 4), 60.0)
    keys = np.array([[[60.0] * 4, [-60.0] * 4]])
    got = softmax.softmax_maps(queries, keys, causal=False)
    np.testing.assert_array_equal(got, [[[1.0, 0.0], [1.0, 0.0]]])


@pytest.mark.parametrize("causal", [True, False])
def test_maps_weights_stay_within_two_ulps_of_an_extended_precision_exp(causal: bool) -> None:
    """The float64 exp with its longdouble correction: every visible weight within 2 float64 ulps of the map made with longdouble
    exp throughout, for logits of up to several hundred; hidden keys exactly 0."""
    rng = np.random.default_rng(11)
    queries, keys = rng.normal(0, 4, (3, 40, 6)), rng.normal(0, 4, (3, 40, 6))
    got = softmax.softmax_maps(queries, keys, causal)
    logits = np.einsum("htd,hsd->hts", queries.astype(np.longdouble), keys.astype(np.longdouble)) / np.sqrt(np.longdouble(6))
    hidden = np.triu(np.ones((40, 40), dtype=bool), 1) if causal else np.zeros((40, 40), dtype=bool)
    logits[:, hidden] = -np.inf
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    expected = (weights / weights.sum(axis=-1, keepdims=True)).astype(np.float64)
    visible = expected > np.finfo(np.float64).tiny
    ulps = np.abs(got - expected)[visible] / np.spacing(expected[visible])
    assert ulps.max() <= 2.0, ulps.max()
    assert np.all(got[:, hidden] == 0.0)


def test_imports_only_numpy_and_the_standard_library() -> None:
    """softmax.py imports numpy and standard-library modules only, and importing it loads no torch (the oracles rely on it)."""
    roots = {name.split(".")[0] for name in imported_modules(Path(softmax.__file__))}
    assert roots and roots <= set(sys.stdlib_module_names) | {"numpy"}, roots
    code = "import sys, grader.toolkit.softmax; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_float32_calls_get_float64_arithmetic_within_the_block_only() -> None:
    """Inside arithmetic_for("float32") the maps are computed in float64 and agree with the extended-precision ones to
    float64's rounding over a long row, far below float32's unit roundoff; the extended arithmetic comes back after."""
    rng = np.random.default_rng(3)
    queries, keys = rng.normal(0, 1, (1, 600, 4)), rng.normal(0, 1, (1, 600, 4))
    extended = softmax.softmax_maps(queries, keys, True)
    with softmax.arithmetic_for("float32"):
        assert softmax.arithmetic() is np.float64
        plain = softmax.softmax_maps(queries, keys, True)
    assert softmax.arithmetic() is np.longdouble
    assert not np.array_equal(plain, extended)  # computed differently ...
    np.testing.assert_allclose(plain, extended, rtol=600 * 2**-52, atol=1e-300)  # ... to float64's accuracy
    assert np.array_equal(plain == 0, extended == 0)


def test_kept_maps_are_those_of_the_arithmetic_asked_for() -> None:
    """recent_maps keeps the maps per arithmetic: a float32 call's maps are not served to a float64 call of the same arrays."""
    queries = np.ones((1, 3, 2))
    with softmax.arithmetic_for("float32"):
        first = softmax.recent_maps(queries, queries, True, lambda: np.zeros(1))
    second = softmax.recent_maps(queries, queries, True, lambda: np.ones(1))
    assert first.tolist() == [0.0] and second.tolist() == [1.0] and not second.flags.writeable
    assert softmax.recent_maps(queries, queries, True, lambda: np.full(1, 2.0)) is second
