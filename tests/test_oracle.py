"""Tests for grader.exercises.diffattn.oracle, the grader's float64 truth.

The oracle is checked against straightforward torch float64 implementations,
against torch autograd, and (through gradcheck) against finite differences of
its own forward pass; its absolute-value evaluations are checked to be bounds
that are attained where no cancellation can occur.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import imported_modules

from grader.exercises.diffattn import oracle

SHAPES = [(1, 1, 1, 3), (2, 3, 5, 4), (1, 2, 8, 1), (2, 1, 6, 5)]
COEFFICIENTS = [-0.7, 0.0, 0.35, 1.8]
ARRAY_KEYS = ("q1", "k1", "q2", "k2", "value")
TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _inputs(shape: tuple[int, int, int, int], *seed: int) -> dict[str, np.ndarray]:
    """Random q1, k1, q2, k2 of ``shape`` and a value of [B, H, T, 2D], seeded by shape and ``seed``."""
    rng = np.random.default_rng([*shape, *seed])
    arrays = {name: rng.standard_normal(shape) for name in ARRAY_KEYS[:4]}
    arrays["value"] = rng.standard_normal((*shape[:3], 2 * shape[3]))
    return arrays


def _cotangent(arrays: dict[str, np.ndarray], seed: int = 0) -> np.ndarray:
    """A random cotangent shaped like the attention output."""
    return np.random.default_rng([seed, *arrays["value"].shape]).standard_normal(arrays["value"].shape)


def _lambda_vectors(dim: int, seed: int) -> dict[str, np.ndarray]:
    """Random 1-D q1, k1, q2, k2 of length ``dim``, scaled so the exponents stay moderate."""
    rng = np.random.default_rng([dim, seed])
    return {name: rng.standard_normal(dim) / math.sqrt(dim) for name in ("q1", "k1", "q2", "k2")}


def _torch_maps(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """Reference softmax(q kᵀ / sqrt(D) + mask) with torch."""
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        logits = logits.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(logits, dim=-1)


def _torch_attention(q1, k1, q2, k2, value, coefficient, causal: bool) -> torch.Tensor:
    """Reference differential attention (A1 - coefficient * A2) V with torch."""
    return (_torch_maps(q1, k1, causal) - coefficient * _torch_maps(q2, k2, causal)) @ value


def _torch_lambda(q1, k1, q2, k2, lambda_init: float) -> torch.Tensor:
    """Reference lambda parameterisation with torch."""
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init


def _tensors(arrays: dict[str, np.ndarray], grad: bool = False) -> dict[str, torch.Tensor]:
    """float64 torch copies of ``arrays``, optionally requiring grad."""
    return {name: torch.tensor(a, dtype=torch.float64, requires_grad=grad) for name, a in arrays.items()}


# --- forward agrees with torch ------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_attention_maps_match_torch(shape, causal):
    """attention_maps equals torch's masked softmax for both branches."""
    arrays = _inputs(shape, causal)
    t = _tensors(arrays)
    for q, k in (("q1", "k1"), ("q2", "k2")):
        expected = _torch_maps(t[q], t[k], causal).numpy()
        got = oracle.attention_maps(arrays[q], arrays[k], causal)
        assert got.shape == (*shape[:3], shape[2]) and got.dtype == np.float64
        np.testing.assert_allclose(got, expected, **TIGHT)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(1, 2, 1, 3), (2, 1, 9, 4), (1, 2, 37, 8), (2, 2, 16, 1)])
def test_vectorised_maps_match_the_scalar_oracle(shape, causal):
    """The extended-precision maps equal the plain-Python ones to a few float64 ulps (masked entries exactly 0)."""
    arrays = _inputs(shape, causal)
    for q, k in (("q1", "k1"), ("q2", "k2")):
        scalar = oracle.scalar_attention_maps(arrays[q], arrays[k], causal)
        vectorised = oracle.vectorised_attention_maps(arrays[q], arrays[k], causal)
        np.testing.assert_allclose(vectorised, scalar, rtol=4e-15, atol=1e-300)  # a few ulps: both round exp and divisions
        assert np.array_equal(vectorised == 0, scalar == 0)


@pytest.mark.parametrize("causal", [True, False])
def test_large_problems_use_the_vectorised_oracle_and_match_torch(causal):
    """Past SCALAR_LIMIT the output comes from the vectorised path and still equals torch's float64 result."""
    shape = (1, 1, 300, 24)
    assert shape[0] * shape[1] * shape[2] ** 2 * shape[3] > oracle.SCALAR_LIMIT
    arrays = _inputs(shape, causal)
    t = _tensors(arrays)
    expected = _torch_attention(*(t[n] for n in ARRAY_KEYS), 0.7, causal).numpy()
    got = oracle.differential_attention(*(arrays[n] for n in ARRAY_KEYS), 0.7, causal)
    np.testing.assert_allclose(got, expected, **TIGHT)


def test_attention_maps_are_computed_once_per_pair_of_arrays():
    """The same q and k objects give the very same (read-only) maps; equal copies are computed again."""
    arrays = _inputs((1, 1, 5, 2), True)
    first = oracle.attention_maps(arrays["q1"], arrays["k1"], True)
    assert oracle.attention_maps(arrays["q1"], arrays["k1"], True) is first and not first.flags.writeable
    copy = oracle.attention_maps(arrays["q1"].copy(), arrays["k1"], True)
    assert copy is not first and np.array_equal(copy, first)


@pytest.mark.parametrize("coefficient", COEFFICIENTS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_differential_attention_matches_torch(shape, causal, coefficient):
    """differential_attention equals (A1 - λA2) V computed with torch."""
    arrays = _inputs(shape, causal)
    t = _tensors(arrays)
    expected = _torch_attention(*(t[n] for n in ARRAY_KEYS), coefficient, causal).numpy()
    got = oracle.differential_attention(*(arrays[n] for n in ARRAY_KEYS), coefficient, causal)
    assert got.shape == arrays["value"].shape and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, **TIGHT)


@pytest.mark.parametrize("lambda_init", [-0.5, 0.0, 0.8])
@pytest.mark.parametrize("dim", [1, 4, 16])
def test_scalar_lambda_and_exponents_match_torch(dim, lambda_init):
    """scalar_lambda and lambda_exponents equal the torch parameterisation and dot products."""
    vectors = _lambda_vectors(dim, seed=1)
    t = _tensors(vectors)
    got = oracle.scalar_lambda(*vectors.values(), lambda_init)
    assert isinstance(got, float)
    assert got == pytest.approx(_torch_lambda(*t.values(), lambda_init).item(), rel=1e-12, abs=1e-12)
    x1, x2 = oracle.lambda_exponents(*vectors.values())
    assert (x1, x2) == pytest.approx(((t["q1"] @ t["k1"]).item(), (t["q2"] @ t["k2"]).item()), rel=1e-12)


# --- numerical stability and structure of the maps -----------------------------


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_attention_maps_stable_for_logits_near_1000(sign):
    """With every logit near ±1000 the maps are finite, sum to 1 and match torch.softmax."""
    # D = 1 makes each logit a single exact product, so torch sees the same logits.
    rng = np.random.default_rng(7)
    q = np.full((1, 1, 6, 1), sign * 1000.0)
    k = rng.uniform(0.99, 1.01, size=(1, 1, 6, 1))
    for causal in (True, False):
        got = oracle.attention_maps(q, k, causal)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=0, atol=1e-14)
        expected = _torch_maps(torch.tensor(q), torch.tensor(k), causal).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300)


def test_attention_maps_stable_for_wide_logit_range():
    """Rows whose logits span about -1000..1000 stay finite and match torch.softmax."""
    arrays = _inputs((2, 2, 7, 4), 11)
    logits = np.einsum("bhid,bhjd->bhij", arrays["q1"], arrays["k1"]) / 2.0
    q = arrays["q1"] * (1000.0 / np.abs(logits).max(axis=-1, keepdims=True))
    got = oracle.attention_maps(q, arrays["k1"], causal=False)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=0, atol=1e-14)
    expected = _torch_maps(torch.tensor(q), torch.tensor(arrays["k1"]), causal=False).numpy()
    # Logits of size 1000 carry rounding of about 1e-13 that differs between the two.
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize("shape", SHAPES)
def test_masked_entries_are_exactly_zero_and_rows_sum_to_one(shape):
    """Causal maps are exactly 0.0 above the diagonal, positive elsewhere, and every row sums to 1."""
    arrays = _inputs(shape, 3)
    future = np.triu(np.ones((shape[2], shape[2]), dtype=bool), 1)
    causal_maps = oracle.attention_maps(arrays["q1"], arrays["k1"], causal=True)
    assert np.all(causal_maps[..., future] == 0.0)
    assert np.all(causal_maps[..., ~future] > 0.0)
    full_maps = oracle.attention_maps(arrays["q1"], arrays["k1"], causal=False)
    assert np.all(full_maps > 0.0)
    for maps in (causal_maps, full_maps):
        np.testing.assert_allclose(maps.sum(axis=-1), 1.0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("coefficient", COEFFICIENTS)
@pytest.mark.parametrize("causal", [True, False])
def test_rows_of_p_sum_to_one_minus_coefficient(causal, coefficient):
    """With V all ones every output element is a row sum of P, which is 1 - λ."""
    arrays = _inputs((2, 2, 5, 3), 5)
    arrays["value"] = np.ones_like(arrays["value"])
    got = oracle.differential_attention(*(arrays[n] for n in ARRAY_KEYS), coefficient, causal)
    np.testing.assert_allclose(got, 1.0 - coefficient, rtol=0, atol=1e-14)


# --- backward agrees with torch autograd ---------------------------------------


@pytest.mark.parametrize("coefficient", COEFFICIENTS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_attention_vjp_matches_autograd(shape, causal, coefficient):
    """Every key of attention_vjp, coefficient included, equals torch.autograd.grad."""
    arrays = _inputs(shape, causal, 1)
    cotangent = _cotangent(arrays)
    t = _tensors(arrays, grad=True)
    coef = torch.tensor(coefficient, dtype=torch.float64, requires_grad=True)
    out = _torch_attention(*(t[n] for n in ARRAY_KEYS), coef, causal)
    expected = torch.autograd.grad(out, [*(t[n] for n in ARRAY_KEYS), coef], torch.tensor(cotangent))
    got = oracle.attention_vjp(*(arrays[n] for n in ARRAY_KEYS), coefficient, causal, cotangent)
    assert set(got) == {*ARRAY_KEYS, "coefficient"}
    for name, reference in zip(ARRAY_KEYS, expected):
        assert got[name].shape == arrays[name].shape and got[name].dtype == np.float64, name
        np.testing.assert_allclose(got[name], reference.numpy(), **TIGHT, err_msg=name)
    assert isinstance(got["coefficient"], float)
    assert got["coefficient"] == pytest.approx(expected[-1].item(), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("upstream", [-1.3, 0.6])
@pytest.mark.parametrize("dim", [1, 4, 16])
def test_lambda_vjp_matches_autograd(dim, upstream):
    """lambda_vjp equals torch.autograd.grad of upstream * lambda."""
    vectors = _lambda_vectors(dim, seed=2)
    t = _tensors(vectors, grad=True)
    upstream_tensor = torch.tensor(upstream, dtype=torch.float64)
    expected = torch.autograd.grad(_torch_lambda(*t.values(), 0.3), list(t.values()), upstream_tensor)
    got = oracle.lambda_vjp(*vectors.values(), upstream)
    assert set(got) == set(vectors)
    for name, reference in zip(vectors, expected):
        assert got[name].shape == (dim,)
        np.testing.assert_allclose(got[name], reference.numpy(), **TIGHT, err_msg=name)


# --- backward agrees with finite differences of the oracle's own forward -------


class _OracleAttention(torch.autograd.Function):
    """Differential attention whose forward and backward are the numpy oracle."""

    @staticmethod
    def forward(ctx, q1, k1, q2, k2, value, coefficient, causal):
        """Evaluate oracle.differential_attention on detached copies."""
        ctx.causal = causal
        ctx.save_for_backward(q1, k1, q2, k2, value, coefficient)
        arrays = (a.detach().numpy() for a in (q1, k1, q2, k2, value))
        return torch.from_numpy(oracle.differential_attention(*arrays, coefficient.item(), causal))

    @staticmethod
    def backward(ctx, grad_output):
        """Return oracle.attention_vjp's gradients in input order."""
        *tensors, coefficient = ctx.saved_tensors
        grads = oracle.attention_vjp(
            *(a.detach().numpy() for a in tensors), coefficient.item(), ctx.causal, grad_output.numpy()
        )
        coefficient_grad = torch.tensor(grads["coefficient"], dtype=torch.float64)
        return (*(torch.from_numpy(grads[n]) for n in ARRAY_KEYS), coefficient_grad, None)


class _OracleLambda(torch.autograd.Function):
    """The lambda parameterisation whose forward and backward are the numpy oracle."""

    @staticmethod
    def forward(ctx, q1, k1, q2, k2, lambda_init):
        """Evaluate oracle.scalar_lambda on detached copies."""
        ctx.save_for_backward(q1, k1, q2, k2)
        arrays = (a.detach().numpy() for a in (q1, k1, q2, k2))
        return torch.tensor(oracle.scalar_lambda(*arrays, lambda_init), dtype=torch.float64)

    @staticmethod
    def backward(ctx, grad_output):
        """Return oracle.lambda_vjp's gradients in input order."""
        grads = oracle.lambda_vjp(*(a.detach().numpy() for a in ctx.saved_tensors), grad_output.item())
        return (*(torch.from_numpy(grads[n]) for n in ("q1", "k1", "q2", "k2")), None)


@pytest.mark.parametrize("shape", [(1, 2, 3, 2), (1, 1, 1, 2)])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_vjp_passes_gradcheck(causal, shape):
    """The hand-derived attention VJP matches finite differences of the oracle forward."""
    t = _tensors(_inputs(shape, causal, 2), grad=True)
    coefficient = torch.tensor(0.45, dtype=torch.float64, requires_grad=True)
    inputs = (*(t[n] for n in ARRAY_KEYS), coefficient, causal)
    assert torch.autograd.gradcheck(_OracleAttention.apply, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("dim", [1, 5])
def test_lambda_vjp_passes_gradcheck(dim):
    """The hand-derived lambda VJP matches finite differences of the oracle forward."""
    t = _tensors(_lambda_vectors(dim, seed=3), grad=True)
    assert torch.autograd.gradcheck(_OracleLambda.apply, (*t.values(), 0.2), eps=1e-6, atol=1e-8, rtol=1e-6)


# --- absolute-value evaluations bound the true values and are attained --------


def _assert_bounded(value, bound, name: str = "") -> None:
    """|value| <= bound elementwise, allowing for rounding of both sides."""
    assert np.all(np.abs(value) <= np.asarray(bound) * (1 + 1e-12)), name


@pytest.mark.parametrize("coefficient", [-1.4, 0.5])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_magnitudes_bound_output_and_gradients(seed, causal, coefficient):
    """|O| and every |gradient| lie below their absolute-value evaluations."""
    arrays = _inputs((2, 2, 6, 3), seed, causal)
    args = (*(arrays[n] for n in ARRAY_KEYS), coefficient, causal)
    cotangent = _cotangent(arrays, seed)
    _assert_bounded(oracle.differential_attention(*args), oracle.attention_output_magnitude(*args))
    grads = oracle.attention_vjp(*args, cotangent)
    bounds = oracle.attention_vjp(*args, cotangent, absolute=True)
    assert set(bounds) == set(grads) and isinstance(bounds["coefficient"], float)
    for name in grads:
        _assert_bounded(grads[name], bounds[name], name)


@pytest.mark.parametrize("lambda_init", [-0.8, 0.0, 0.8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambda_magnitude_bounds_lambda(seed, lambda_init):
    """|lambda| lies below lambda_magnitude."""
    vectors = _lambda_vectors(6, seed)
    args = (*vectors.values(), lambda_init)
    _assert_bounded(oracle.scalar_lambda(*args), oracle.lambda_magnitude(*args))


def test_logit_magnitude_bounds_logits():
    """Every |logit| of a query row lies below that row's logit_magnitude."""
    arrays = _inputs((2, 3, 5, 4), 9)
    logits = np.einsum("bhid,bhjd->bhij", arrays["q1"], arrays["k1"]) / 2.0
    bound = oracle.logit_magnitude(arrays["q1"], arrays["k1"])
    assert bound.shape == (2, 3, 5)
    _assert_bounded(logits, bound[..., None])


def test_magnitudes_are_attained_without_cancellation():
    """With positive inputs and λ = 0 the bounds equal |O| and |∂V| plus the shift of the values over the tokens (each row
    sums to 1: the largest value of each feature, and the cotangent's mean over the queries), |∂λ| and the largest logit."""
    rng = np.random.default_rng(13)
    arrays = {n: rng.uniform(0.1, 1.0, size=(2, 2, 5, 3)) for n in ARRAY_KEYS[:4]}
    arrays["value"] = rng.uniform(0.1, 1.0, size=(2, 2, 5, 6))
    cotangent = rng.uniform(0.1, 1.0, size=(2, 2, 5, 6))
    for causal in (True, False):
        args = (*(arrays[n] for n in ARRAY_KEYS), 0.0, causal)
        np.testing.assert_allclose(
            oracle.attention_output_magnitude(*args),
            oracle.differential_attention(*args) + arrays["value"].max(axis=-2, keepdims=True), rtol=1e-13
        )
        grads = oracle.attention_vjp(*args, cotangent)
        bounds = oracle.attention_vjp(*args, cotangent, absolute=True)
        np.testing.assert_allclose(bounds["value"], grads["value"] + cotangent.mean(axis=-2, keepdims=True), rtol=1e-13)
        assert bounds["coefficient"] == pytest.approx(-grads["coefficient"], rel=1e-13)
    logits = np.einsum("bhid,bhjd->bhij", arrays["q1"], arrays["k1"]) / math.sqrt(3)
    bound = oracle.logit_magnitude(arrays["q1"], arrays["k1"])
    np.testing.assert_allclose(bound, logits.max(axis=-1), rtol=1e-13)


def test_lambda_magnitude_is_attained_when_second_term_vanishes():
    """With exp(q2·k2) negligible and lambda_init >= 0, lambda_magnitude equals lambda."""
    q1, k1 = np.array([0.3, -0.2, 0.5]), np.array([0.4, 0.1, -0.6])
    q2, k2 = np.array([5.0, 5.0]), np.array([-4.0, -6.0])
    assert oracle.lambda_magnitude(q1, k1, q2, k2, 0.25) == pytest.approx(
        oracle.scalar_lambda(q1, k1, q2, k2, 0.25), rel=1e-15
    )


# --- independence and cost ----------------------------------------------------


def test_oracle_source_imports_only_numpy_and_stdlib():
    """oracle.py's import statements name only numpy, standard-library modules and the numpy-only grader.toolkit.softmax."""
    imported = imported_modules(Path(oracle.__file__))
    assert imported, "no imports found: the check is not looking at the right file"
    roots = {name.split(".")[0] for name in imported - {"grader.toolkit.softmax"}}
    assert roots <= set(sys.stdlib_module_names) | {"numpy"}, imported


def test_importing_oracle_does_not_load_torch():
    """A fresh interpreter that imports the oracle has no torch module loaded."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    code = (
        "import sys, grader.exercises.diffattn.oracle\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
