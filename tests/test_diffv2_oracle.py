"""Tests for grader.exercises.diffv2.oracle, the DIFF V2 exercise's float64 truth.

The oracle is held against a straightforward torch float64 implementation
written here (not the reference), against torch autograd, and, through
``torch.autograd.gradcheck``, against finite differences of its own forward
pass; its two evaluation paths (Python floats, vectorised longdouble) against
each other; its gate at saturated logits; and its absolute-value evaluations
are checked to bound the true values.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import imported_modules

from grader.exercises.diffv2 import oracle

# (B, T, Hq, Hkv, D): G = 2 and 4, Hkv = 1, T = 1, D = 1
SHAPES = [(1, 1, 2, 1, 3), (2, 5, 4, 2, 3), (1, 7, 8, 2, 2), (2, 6, 4, 1, 1), (1, 4, 8, 4, 5)]
TIGHT = {"rtol": 1e-12, "atol": 1e-12}
NAMES = ("q", "k", "v", "lambda_logits")


def _inputs(shape: tuple[int, int, int, int, int], *seed: int, gate_scale: float = 3.0) -> dict[str, np.ndarray]:
    """q, k, v, lambda_logits and a cotangent for ``shape`` = (B, T, Hq, Hkv, D), seeded by shape and ``seed``."""
    b, t, hq, hkv, d = shape
    rng = np.random.default_rng([*shape, *seed])
    return {
        "q": rng.standard_normal((b, t, hq, d)),
        "k": rng.standard_normal((b, t, hkv, d)),
        "v": rng.standard_normal((b, t, hkv, d)),
        "lambda_logits": gate_scale * rng.standard_normal((b, t, hq // 2)),
        "cotangent": rng.standard_normal((b, t, hq // 2, d)),
    }


def _torch_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Grouped-query attention in torch with an explicit loop over query heads."""
    group = q.shape[2] // k.shape[2]
    t = q.shape[1]
    heads = []
    for h in range(q.shape[2]):
        logits = torch.einsum("btd,bsd->bts", q[:, :, h], k[:, :, h // group]) / math.sqrt(q.shape[-1])
        if causal:
            logits = logits.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        heads.append(torch.softmax(logits, dim=-1) @ v[:, :, h // group])
    return torch.stack(heads, dim=2)


def _torch_diff_v2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lambda_logits: torch.Tensor, causal: bool) -> torch.Tensor:
    """DIFF V2 in torch: even heads minus sigmoid-gated odd heads."""
    attended = _torch_gqa(q, k, v, causal)
    return attended[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * attended[:, :, 1::2]


def _tensors(arrays: dict[str, np.ndarray], grad: bool = False) -> list[torch.Tensor]:
    """float64 torch copies of q, k, v, lambda_logits."""
    return [torch.tensor(arrays[name], dtype=torch.float64, requires_grad=grad) for name in NAMES]


# --- forward values -------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_torch(shape: tuple[int, int, int, int, int], causal: bool) -> None:
    """gqa_attention and diff_v2_attention equal torch's loop-over-heads implementation."""
    arrays = _inputs(shape, causal)
    q, k, v, gates = _tensors(arrays)
    gqa = oracle.gqa_attention(arrays["q"], arrays["k"], arrays["v"], causal)
    np.testing.assert_allclose(gqa, _torch_gqa(q, k, v, causal).numpy(), **TIGHT)
    diff = oracle.diff_v2_attention(arrays["q"], arrays["k"], arrays["v"], arrays["lambda_logits"], causal)
    np.testing.assert_allclose(diff, _torch_diff_v2(q, k, v, gates, causal).numpy(), **TIGHT)


@pytest.mark.parametrize("causal", [True, False])
def test_scalar_and_vectorised_paths_agree(causal: bool) -> None:
    """The Python-float maps and outputs equal the longdouble ones, on both sides of SCALAR_LIMIT."""
    arrays = _inputs((2, 9, 4, 2, 3), 7)
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    scalar, vectorised = oracle.scalar_maps(q, k, causal), oracle.vectorised_maps(q, k, causal)
    np.testing.assert_allclose(scalar, vectorised, rtol=0, atol=1e-15)
    small = oracle.apply_maps(scalar, v, 2)
    big = _torch_gqa(*_tensors(arrays)[:3], causal).numpy()
    np.testing.assert_allclose(small, big, **TIGHT)
    large = _inputs((1, 80, 4, 2, 8), 3)  # B·Hq·T²·D = 204,800 > SCALAR_LIMIT
    assert 80 * 80 * 4 * 8 > oracle.SCALAR_LIMIT
    expected = _torch_gqa(*_tensors(large)[:3], causal).numpy()
    np.testing.assert_allclose(oracle.gqa_attention(large["q"], large["k"], large["v"], causal), expected, **TIGHT)


def test_masked_entries_are_zero_and_rows_sum_to_one() -> None:
    """Future keys get exactly 0.0; visible weights are positive; every row sums to 1."""
    arrays = _inputs((2, 6, 4, 2, 3), 1)
    maps = oracle.attention_maps(arrays["q"], arrays["k"], True)
    future = np.triu(np.ones((6, 6), dtype=bool), 1)
    assert (maps[..., future] == 0.0).all() and (maps[..., ~future] > 0).all()
    np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=0, atol=1e-14)


def test_maps_stable_for_logits_near_1000() -> None:
    """Scaled logits of ±1000 give finite, normalised maps."""
    arrays = _inputs((1, 5, 4, 2, 4), 2)
    q = arrays["q"] * 1000.0 / np.abs(oracle.logit_magnitude(arrays["q"], arrays["k"])).max()
    maps = oracle.attention_maps(q, arrays["k"], False)
    assert np.isfinite(maps).all()
    np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=0, atol=1e-14)


def test_signed_maps_rows_sum_to_one_minus_gate() -> None:
    """Each row of P_i = A_2i - σ(ℓ)A_2i+1 sums to 1 - σ(ℓ_t); a value of ones gives 1 - σ(ℓ)."""
    arrays = _inputs((2, 6, 8, 2, 3), 4)
    signed = oracle.signed_maps(arrays["q"], arrays["k"], arrays["lambda_logits"], True)
    complement = 1.0 - oracle.sigmoids(arrays["lambda_logits"])  # [B, T, H]
    np.testing.assert_allclose(signed.sum(-1), np.swapaxes(complement, 1, 2), rtol=0, atol=1e-14)
    ones = np.ones_like(arrays["v"])
    out = oracle.diff_v2_attention(arrays["q"], arrays["k"], ones, arrays["lambda_logits"], True)
    np.testing.assert_allclose(out, np.broadcast_to(complement[..., None], out.shape), rtol=0, atol=1e-14)


def test_saturated_gate_gives_even_heads() -> None:
    """As ℓ → -∞ the output is the even heads' ordinary attention; as ℓ → +∞ even minus odd."""
    arrays = _inputs((1, 5, 4, 1, 3), 5)
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    gqa = oracle.gqa_attention(q, k, v, True)
    low = oracle.diff_v2_attention(q, k, v, np.full((1, 5, 2), -1000.0), True)
    high = oracle.diff_v2_attention(q, k, v, np.full((1, 5, 2), 1000.0), True)
    np.testing.assert_allclose(low, gqa[:, :, 0::2], rtol=0, atol=1e-15)
    np.testing.assert_allclose(high, gqa[:, :, 0::2] - gqa[:, :, 1::2], rtol=0, atol=1e-15)


# --- the gate -------------------------------------------------------------------------


def test_gate_is_finite_and_accurate_for_any_logit() -> None:
    """σ, σ(-x) = 1 - σ and σ(1 - σ) equal closed forms and stay finite at ±1000 (where 1/(1 + exp(-x)) overflows)."""
    x = np.array([-1000.0, -745.0, -100.0, -30.0, -1.5, 0.0, 0.7, 30.0, 100.0, 1000.0])
    s, slopes = oracle.sigmoids(x), oracle.sigmoid_slopes(x)
    assert np.isfinite(s).all() and np.isfinite(slopes).all()
    for xi, si, slope in zip(x, s, slopes):
        assert si == pytest.approx(oracle.sigmoid(float(xi)), rel=1e-15, abs=0)
        exact = math.exp(xi) / (1 + math.exp(xi)) if xi < 700 else 1.0
        assert si == pytest.approx(exact, rel=1e-14, abs=1e-300)
        assert slope == pytest.approx(si * oracle.sigmoid(-float(xi)), rel=1e-14, abs=1e-300)
    assert oracle.sigmoid(-100.0) == pytest.approx(math.exp(-100.0), rel=1e-14)  # not 0, not 1 - 1
    assert oracle.sigmoid(100.0) == 1.0 and oracle.sigmoid(-100.0) + oracle.sigmoid(100.0) == 1.0


# --- gradients ------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_vjps_match_autograd(shape: tuple[int, int, int, int, int], causal: bool) -> None:
    """Every VJP (q, k, v, lambda_logits; and gqa's q, k, v) equals torch.autograd.grad of the torch forward."""
    arrays = _inputs(shape, 11, causal)
    tensors = _tensors(arrays, grad=True)
    out = _torch_diff_v2(*tensors, causal)
    wanted = torch.autograd.grad(out, tensors, torch.tensor(arrays["cotangent"]))
    grads = oracle.diff_v2_vjp(arrays["q"], arrays["k"], arrays["v"], arrays["lambda_logits"], causal, arrays["cotangent"])
    for name, grad in zip(NAMES, wanted):
        np.testing.assert_allclose(grads[name], grad.numpy(), **TIGHT, err_msg=name)
    cotangent = np.random.default_rng(3).standard_normal(arrays["q"].shape)
    gqa_out = _torch_gqa(*tensors[:3], causal)
    wanted = torch.autograd.grad(gqa_out, tensors[:3], torch.tensor(cotangent))
    grads = oracle.gqa_vjp(arrays["q"], arrays["k"], arrays["v"], causal, cotangent)
    for name, grad in zip(NAMES, wanted):
        np.testing.assert_allclose(grads[name], grad.numpy(), **TIGHT, err_msg=f"gqa {name}")


def test_gate_gradient_at_saturated_logits() -> None:
    """dℓ stays finite and exact (σ(1 - σ) from exp(-|ℓ|)) at ±100 and ±1000."""
    arrays = _inputs((1, 3, 2, 1, 2), 9)
    logits = np.array([[[-1000.0], [-100.0], [100.0]]])
    grads = oracle.diff_v2_vjp(arrays["q"], arrays["k"], arrays["v"], logits, True, arrays["cotangent"])
    odd = oracle.gqa_attention(arrays["q"], arrays["k"], arrays["v"], True)[:, :, 1]
    expected = -np.exp(-np.abs(logits[..., 0])) * np.sum(arrays["cotangent"][:, :, 0] * odd, axis=-1)
    assert np.isfinite(grads["lambda_logits"]).all()
    np.testing.assert_allclose(grads["lambda_logits"][..., 0], expected, rtol=1e-13, atol=0)


class _OracleDiffV2(torch.autograd.Function):
    """A torch Function whose forward is the oracle's forward and whose backward is the oracle's VJP."""

    @staticmethod
    def forward(ctx, q, k, v, gates, causal):  # type: ignore[no-untyped-def, override]
        ctx.save_for_backward(q, k, v, gates)
        ctx.causal = causal
        arrays = [x.detach().numpy().copy() for x in (q, k, v, gates)]
        return torch.from_numpy(oracle.diff_v2_attention(*arrays, causal))

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def, override]
        arrays = [x.detach().numpy().copy() for x in ctx.saved_tensors]
        found = oracle.diff_v2_vjp(*arrays, ctx.causal, grad.detach().numpy().copy())
        return (*(torch.from_numpy(np.ascontiguousarray(found[name])) for name in NAMES), None)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(1, 3, 4, 2, 2), (1, 4, 4, 1, 2), (2, 2, 8, 2, 1)])
def test_vjp_passes_gradcheck(shape: tuple[int, int, int, int, int], causal: bool) -> None:
    """The hand-derived VJP matches finite differences of the oracle's own forward pass."""
    tensors = _tensors(_inputs(shape, 13), grad=True)
    assert torch.autograd.gradcheck(lambda *xs: _OracleDiffV2.apply(*xs, causal), tensors, eps=1e-6, atol=1e-8, rtol=1e-6)


# --- absolute-value evaluations ---------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
def test_magnitudes_bound_the_values(causal: bool) -> None:
    """The absolute-value evaluations bound the outputs and every gradient element-wise."""
    arrays = _inputs((2, 6, 8, 2, 3), 17)
    q, k, v, gates, cotangent = (arrays[n] for n in (*NAMES, "cotangent"))
    slack = 1 + 1e-12
    assert (np.abs(oracle.gqa_attention(q, k, v, causal)) <= slack * oracle.gqa_output_magnitude(q, k, v, causal)).all()
    assert (np.abs(oracle.diff_v2_attention(q, k, v, gates, causal)) <= slack * oracle.diff_v2_output_magnitude(q, k, v, gates, causal)).all()
    exact = oracle.diff_v2_vjp(q, k, v, gates, causal, cotangent)
    bound = oracle.diff_v2_vjp(q, k, v, gates, causal, cotangent, absolute=True)
    for name in NAMES:
        assert (np.abs(exact[name]) <= slack * bound[name]).all(), name


def test_magnitudes_are_attained_without_cancellation() -> None:
    """With non-negative values the attention outputs equal their bounds; diff_v2's adds the odd heads' with the gate's terms."""
    arrays = _inputs((1, 5, 4, 2, 3), 19)
    q, k = arrays["q"], arrays["k"]
    v = np.abs(arrays["v"])
    both = oracle.gqa_output_magnitude(q, k, v, True)
    np.testing.assert_allclose(oracle.gqa_attention(q, k, v, True), both, rtol=1e-13)
    gates = np.full((1, 5, 2), -800.0)  # σ = 0 to float64 precision: nothing is subtracted
    np.testing.assert_allclose(oracle.diff_v2_attention(q, k, v, gates, True), both[:, :, 0::2], rtol=1e-13)
    np.testing.assert_allclose(oracle.diff_v2_output_magnitude(q, k, v, gates, True), both[:, :, 0::2] + 2.0 * both[:, :, 1::2], rtol=1e-13)


def test_complement_magnitude_counts_both_terms() -> None:
    """The bound of dℓ uses the terms of whichever form of σ' is larger: at ℓ = ±100 it stays of order |G|·|A|·|v| while dℓ is
    ~e⁻¹⁰⁰ (σ(ℓ)(1 − σ(ℓ)) subtracts near 1 for ℓ > 0, a gate written 1 − σ(−ℓ) for ℓ < 0)."""
    arrays = _inputs((1, 2, 2, 1, 2), 23)
    for logit in (100.0, -100.0):
        gates = np.full((1, 2, 1), logit)
        exact = oracle.diff_v2_vjp(arrays["q"], arrays["k"], arrays["v"], gates, True, arrays["cotangent"])["lambda_logits"]
        bound = oracle.diff_v2_vjp(arrays["q"], arrays["k"], arrays["v"], gates, True, arrays["cotangent"], absolute=True)["lambda_logits"]
        assert (np.abs(exact) < 1e-40).all() and (bound > 1e-3).all()


def test_the_gate_counts_as_the_terms_of_its_larger_form() -> None:
    """|λ| is 2 − σ(ℓ), the terms of 1 − σ(−ℓ): at least 1 for every ℓ, 2 where σ(ℓ) is 0."""
    magnitudes = oracle.gate_magnitudes(np.array([-1000.0, -5.0, 0.0, 5.0, 1000.0]))
    np.testing.assert_allclose(magnitudes, 2.0 - oracle.sigmoids(np.array([-1000.0, -5.0, 0.0, 5.0, 1000.0])))
    assert magnitudes[0] == 2.0 and magnitudes[-1] == 1.0 and (magnitudes >= 1.0).all()


# --- independence ---------------------------------------------------------------------


def test_oracle_imports_only_numpy_and_the_standard_library() -> None:
    """oracle.py imports numpy, standard-library modules and the numpy-only grader.toolkit.softmax, and loads no torch."""
    imported = imported_modules(Path(oracle.__file__))
    roots = {name.split(".")[0] for name in imported - {"grader.toolkit.softmax"}}
    assert roots <= {"__future__", "math", "operator", "collections", "numpy"}, imported
    code = "import sys, grader.exercises.diffv2.oracle; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
