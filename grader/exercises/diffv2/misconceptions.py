"""The catalogue of wrong DIFF V2 formulas students write, for the harness's diagnosis engine.

Each :class:`~grader.toolkit.misconceptions.Variant` is a known wrong formula
with its hint and one or more forms (ways of writing it that give different
numbers somewhere), evaluated here in float64 numpy like the oracle, never
with torch. A form predicts every result a check compares, with an allowance
from the checks' own rule (:func:`grader.toolkit.tolerance.allowance` with
this exercise's operation counts), and the engine hints a variant only when
the submission's results agree with one of its forms on every call the run
made to the function and the form is far from the truth on the check's own
calls (docs/diagnosis.md): a correct result can never earn a hint.

Three families, tried in turn: the output of ``gqa_attention`` (key/value
heads mapped with ``h % Hkv``, the wrong scale, no mask, the output left in
``[B, H, T, D]``, ...), the output of ``diff_v2_attention`` (those of
``gqa_attention`` inside it, plus halves instead of even/odd pairs, the gate
without its sigmoid, exp or 1 − σ instead of σ, the gate broadcast over the
wrong axis, all 2H heads returned, DIFF V1's RMSNorm and (1 − λ_init)), and
the gradients of a right forward pass (a detached gate or value, the gate's
slope σ(1 − σ) missing, key/value gradients averaged over the group).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from grader.exercises.diffv2 import expected, oracle, suite
from grader.exercises.diffv2.cases import DIFF_V2, GQA, Case
from grader.toolkit.misconceptions import (
    FLOAT32_INSIDE,
    Catalogue,
    Family,
    Form,
    Prediction,
    Variant,
    changed,
    float32_accuracy,
    no_graph,
    normalised_output,
    scaled_output,
    zeroed,
)
from grader.toolkit.tolerance import Truth, allowance

# ---- attention with one step changed ----------------------------------------------------


def _keys_for(case: Case, x: np.ndarray, tiled: bool) -> np.ndarray:
    """Key/value heads [B, T, Hkv, D] -> [B, Hq, T, D]: head h // G (interleaved) or, ``tiled``, h % Hkv."""
    if not tiled:
        return oracle.per_query_head(x, case.group)
    return np.tile(oracle.heads_first(x), (1, case.group, 1, 1))


def _softmax(logits: np.ndarray, causal: bool) -> np.ndarray:
    """Softmax over the last axis with the row maximum subtracted; future keys hidden when ``causal``."""
    if causal:
        t = logits.shape[-1]
        logits = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, logits)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def _causal_when(case: Case, default: bool) -> bool:
    """Whether a variant masks: the case's own flag, and ``default`` where the argument was left out."""
    return default if case.causal is None else case.causal


Attended = tuple[np.ndarray, np.ndarray, float]  # [B, T, Hq, D] values, their absolute-value evaluation, the growth of n


def _attended(case: Case, *, tiled: bool = False, scale: Callable[[int], float] | None = None, default_causal: bool = True,
              masked: bool = True) -> Attended:  # fmt: skip
    """Grouped-query attention of ``case`` with one step changed: tiled key/value heads, another scale, the mask."""
    d = case.q.shape[-1]
    factor = 1.0 / math.sqrt(d) if scale is None else scale(d)
    logits = np.einsum("bhtd,bhsd->bhts", oracle.heads_first(case.q), _keys_for(case, case.k, tiled)) * factor
    maps = _softmax(logits, masked and _causal_when(case, default_causal))
    values = _keys_for(case, case.v, tiled)
    attended = np.swapaxes(maps @ values, 1, 2)
    magnitude = np.swapaxes(maps @ np.abs(values), 1, 2)
    return attended, magnitude, max(1.0, factor * math.sqrt(d))


def _over_root_2d(d: int) -> float:
    return 1.0 / math.sqrt(2 * d)


def _over_d(d: int) -> float:
    return 1.0 / d


def _unscaled(d: int) -> float:
    return 1.0


def _prediction(case: Case, values: np.ndarray, magnitude: np.ndarray, growth: float = 1.0) -> Prediction:
    """The output ``values``, allowed the checks' rule for a result whose absolute-value evaluation is ``magnitude``."""
    magnitude = np.nan_to_num(np.abs(magnitude), nan=0.0, posinf=np.inf)
    return {"output": Truth(values, allowance(case.dtype, growth * expected.operations(case), magnitude))}


Gate = Callable[[np.ndarray, str], tuple[np.ndarray, np.ndarray]]  # (lambda_logits, dtype) -> gate and its magnitude


def _sigmoid(logits: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    gate = oracle.sigmoids(logits)
    return gate, gate


def _no_sigmoid(logits: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    return logits, np.abs(logits)


def _exponential(logits: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """exp(ℓ) in the case's dtype: infinite where it overflows there."""
    with np.errstate(over="ignore"):
        gate = np.exp(logits.astype(dtype)).astype(np.float64)
    return gate, gate


def _complement(logits: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """1 − σ(ℓ), whose terms have magnitude 1 + σ."""
    return oracle.sigmoids(-logits), 1.0 + oracle.sigmoids(logits)


Broadcast = Callable[[np.ndarray], np.ndarray]  # the gate [B, T, H] -> what multiplies the odd heads [B, T, H, D]


def _per_head(gate: np.ndarray) -> np.ndarray:
    """The right broadcast: one gate per token and head, the same for every feature."""
    return gate[..., None]


def _per_feature(gate: np.ndarray) -> np.ndarray:
    """``gate.unsqueeze(2)``: gate i multiplies feature i of every head (H = D, or H = 1)."""
    return gate[:, :, None, :]


def _transposed(gate: np.ndarray) -> np.ndarray:
    """``gate.transpose(1, 2)[..., None]``: the [B, H, T] gate against the [B, T, H, D] heads."""
    return np.swapaxes(gate, 1, 2)[..., None]


def _reshaped(gate: np.ndarray) -> np.ndarray:
    """``gate.reshape(B, H, T, 1)``: the [B, T, H] gate's numbers read as [B, H, T]."""
    b, t, h = gate.shape
    return gate.reshape(b, h, t, 1)


def _combined(case: Case, attended: Attended, gate: Gate = _sigmoid, broadcast: Broadcast = _per_head, halves: bool = False) -> Prediction:
    """first − gate·second over the pairs of query heads (even/odd, or first half/second half)."""
    values, magnitude, growth = attended
    assert case.lambda_logits is not None
    h = values.shape[2] // 2
    pick = (slice(None, h), slice(h, None)) if halves else (slice(0, None, 2), slice(1, None, 2))
    weight, size = (broadcast(x) for x in gate(case.lambda_logits, case.dtype))
    first, second = (values[:, :, p] for p in pick)
    first_size, second_size = (magnitude[:, :, p] for p in pick)
    with np.errstate(invalid="ignore", over="ignore"):
        return _prediction(case, first - weight * second, first_size + size * second_size, growth)


def _output_form(change: Callable[[Case], Attended], **combine: object) -> Form:
    """A form whose attention is ``change(case)``: the output itself for gqa_attention, combined into pairs for diff_v2_attention."""

    def form(case: Case, truth: Prediction) -> Prediction:
        attended = change(case)
        if case.function == GQA:
            return _prediction(case, attended[0], attended[1], attended[2])
        return _combined(case, attended, **combine)  # type: ignore[arg-type]

    return form


def _true(case: Case) -> Attended:
    return _attended(case)


def _tiled(case: Case) -> Attended:
    return _attended(case, tiled=True)


def _scaled(scale: Callable[[int], float]) -> Callable[[Case], Attended]:
    def change(case: Case) -> Attended:
        return _attended(case, scale=scale)

    return change


def _unmasked(case: Case) -> Attended:
    return _attended(case, masked=False)


def _default_not_causal(case: Case) -> Attended:
    return _attended(case, default_causal=False)


def _heads_as_tokens(case: Case) -> Attended:
    """q and k read as [B, H, T, D]: every token attends over the heads (with Hq = Hkv, as such code then runs)."""
    if case.q.shape[2] != case.k.shape[2]:
        raise ValueError("the layout variant runs only with Hq = Hkv")
    d = case.q.shape[-1]
    maps = _softmax(np.einsum("bthd,btjd->bthj", case.q, case.k) / math.sqrt(d), _causal_when(case, True))
    return maps @ case.v, maps @ np.abs(case.v), 1.0


def _output_transposed(case: Case, truth: Prediction) -> Prediction:
    """The right output left in [B, H, T, D] (inputs transposed to it, the result never transposed back)."""
    right = truth["output"]
    return {"output": Truth(np.swapaxes(right.values, 1, 2), np.swapaxes(right.allowed, 1, 2))}


def _all_heads(signed: bool) -> Form:
    """diff_v2_attention returning 2H heads: A itself, or A with each odd head multiplied by −σ(ℓ)."""

    def form(case: Case, truth: Prediction) -> Prediction:
        values, magnitude, _ = _attended(case)
        if signed:
            assert case.lambda_logits is not None
            gate = oracle.sigmoids(case.lambda_logits)[..., None]
            values, magnitude = values.copy(), magnitude.copy()
            values[:, :, 1::2] *= -gate
            magnitude[:, :, 1::2] *= gate
        return _prediction(case, values, magnitude)

    return form


LAMBDA_INITS = (0.2, 0.8)  # DIFF V1's λ_init at the first layer and its limit: (1 − λ_init) is 0.8 or 0.2
EPSILONS = (1e-5, 1e-6, 1e-8, 0.0)

SHARED_VARIANTS = (
    Variant(
        "kv_heads_tiled",
        "Key/value heads are mapped with h % Hkv (what repeat gives): query head h must read key/value head h // G, "
        "the G query heads of a group being contiguous (what repeat_interleave gives).",
        "out[b, t, h] = Σ_s softmax_s(q[b,t,h]·k[b,s,h // G]/√D + M[t,s]) v[b,s,h // G]",
        (_output_form(_tiled),),
    ),
    Variant(
        "scale_root_2d",
        "The logits are scaled by 1/√(2D): the scale is 1/√D, D the head_dim of q and k.",
        "S = q·k / √D",
        (_output_form(_scaled(_over_root_2d)),),
    ),
    Variant(
        "scale_inverse_d",
        "The logits are scaled by 1/D: the scale is 1/√D.",
        "S = q·k / √D",
        (_output_form(_scaled(_over_d)),),
    ),
    Variant(
        "no_scale",
        "The logits are not scaled: divide q·k by √D.",
        "S = q·k / √D",
        (_output_form(_scaled(_unscaled)),),
    ),
    Variant(
        "causal_default_false",
        "No causal mask when causal is left out: the default is True.",
        "def gqa_attention(q, k, v, causal=True) and def diff_v2_attention(q, k, v, lambda_logits, causal=True)",
        (_output_form(_default_not_causal),),
    ),
    Variant(
        "no_mask",
        "No causal mask: with causal=True a token must not see later keys (−∞ for s > t before the softmax).",
        "S[t, s] = q_t·k_s / √D + M[t, s], M = −∞ for s > t",
        (_output_form(_unmasked),),
    ),
)

GQA_VARIANTS = (
    *SHARED_VARIANTS,
    Variant(
        "layout_bhtd",
        "The tensors are read or returned as [B, H, T, D]: this exercise uses FlashAttention's [B, T, H, D] "
        "(tokens on axis 1, heads on axis 2).",
        "q: [B, T, Hq, D], k and v: [B, T, Hkv, D], output: [B, T, Hq, D]",
        (_output_transposed, _output_form(_heads_as_tokens)),
    ),
)

DIFF_V2_VARIANTS = (
    *SHARED_VARIANTS,
    Variant(
        "pairs_as_halves",
        "Heads are paired as first half minus second half: DIFF V2 subtracts odd head 2i + 1 from even head 2i.",
        "out[:, :, i] = A[:, :, 2i] − σ(ℓ[:, :, i])·A[:, :, 2i + 1], i.e. A[:, :, 0::2] − σ(ℓ)[..., None]·A[:, :, 1::2]",
        (_output_form(_true, halves=True),),
    ),
    Variant(
        "gate_without_sigmoid",
        "lambda_logits is used as λ directly: λ = sigmoid(lambda_logits).",
        "λ = σ(ℓ) = 1 / (1 + exp(−ℓ)), in (0, 1)",
        (_output_form(_true, gate=_no_sigmoid),),
    ),
    Variant(
        "gate_exponential",
        "λ = exp(lambda_logits) (DIFF V1's exponential re-parameterisation): λ = sigmoid(lambda_logits).",
        "λ = σ(ℓ), not exp(ℓ)",
        (_output_form(_true, gate=_exponential),),
    ),
    Variant(
        "gate_complement",
        "λ = 1 − sigmoid(lambda_logits): λ = sigmoid(lambda_logits) itself.",
        "out = A_even − σ(ℓ)·A_odd",
        (_output_form(_true, gate=_complement),),
    ),
    Variant(
        "gate_wrong_axis",
        "The gate is broadcast over the wrong axis: sigmoid(lambda_logits) is [B, T, H] and multiplies head i of "
        "token t, the same for every feature (sigmoid(lambda_logits)[..., None] or .unsqueeze(-1)).",
        "out[b, t, i, :] = A[b, t, 2i, :] − σ(ℓ[b, t, i])·A[b, t, 2i + 1, :]",
        tuple(_output_form(_true, broadcast=b) for b in (_per_feature, _transposed, _reshaped)),
    ),
    Variant(
        "all_heads_returned",
        "The output has 2H heads: combine each pair (2i, 2i + 1) into one head, so the output is [B, T, H, D].",
        "out = A[:, :, 0::2] − σ(ℓ)[..., None]·A[:, :, 1::2], H = Hq / 2 heads",
        (_all_heads(signed=False), _all_heads(signed=True)),
    ),
    Variant(
        "output_rmsnorm",
        "The output is normalised per head (DIFF V1's RMSNorm): DIFF V2 has no normalisation after the subtraction.",
        "out = A_even − σ(ℓ)·A_odd, nothing after it",
        tuple(normalised_output(eps, factor=1.0 - init) for eps in EPSILONS for init in (0.0, *LAMBDA_INITS)),
    ),
    Variant(
        "one_minus_lambda_init",
        "The output is multiplied by (1 − λ_init), a DIFF V1 leftover: DIFF V2 has no such factor.",
        "out = A_even − σ(ℓ)·A_odd, nothing after it",
        tuple(scaled_output(1.0 - init) for init in LAMBDA_INITS),
    ),
)

# ---- gradients of a right forward pass ---------------------------------------------------


def _gate_gradient(slope: Callable[[np.ndarray], np.ndarray], slope_size: Callable[[np.ndarray], np.ndarray]) -> Form:
    """∂ℓ = −slope(ℓ)·Σ_d G·A_odd instead of −σ(1 − σ)·Σ_d G·A_odd; the other gradients right."""

    def form(case: Case, truth: Prediction) -> Prediction:
        assert case.lambda_logits is not None
        odd = oracle.gqa_attention(case.q, case.k, case.v, case.is_causal)[:, :, 1::2]
        odd_size = oracle.gqa_output_magnitude(case.q, case.k, case.v, case.is_causal)[:, :, 1::2]
        upstream = -np.sum(case.cotangent * odd, axis=-1)
        size = np.sum(np.abs(case.cotangent) * odd_size, axis=-1)
        gradient = Truth(slope(case.lambda_logits) * upstream, allowance(case.dtype, expected.operations(case), slope_size(case.lambda_logits) * size))
        return {**truth, "lambda_logits": gradient}

    return form


def _ones(logits: np.ndarray) -> np.ndarray:
    return np.ones_like(logits)


def _group_mean(truth: Truth, case: Case) -> Truth:
    return Truth(truth.values / case.group, truth.allowed / case.group)


GRADIENT_VARIANTS = (
    Variant(
        "gate_detached",
        "No gradient reaches lambda_logits: the gate is cut off from autograd (.detach(), .item(), torch.tensor(...)).",
        "∂L/∂ℓ_i = −σ(ℓ_i)(1 − σ(ℓ_i))·Σ_d G_i·A_2i+1",
        (changed(("lambda_logits",), zeroed),),
    ),
    Variant(
        "gate_slope_missing",
        "The gradient of lambda_logits misses the sigmoid's slope σ(ℓ)(1 − σ(ℓ)).",
        "∂L/∂ℓ_i = −σ(ℓ_i)(1 − σ(ℓ_i))·Σ_d G_i·A_2i+1",
        (_gate_gradient(_ones, _ones), _gate_gradient(oracle.sigmoids, oracle.sigmoids)),
    ),
    Variant(
        "kv_gradients_averaged",
        "The gradients of k and v are averaged over the G query heads of a group: they are summed.",
        "∂L/∂k[b, s, g] = Σ_{h: h // G = g} Σ_t dS[b, h, t, s]·q[b, t, h] / √D, and likewise for v",
        (changed(("k", "v"), _group_mean),),
    ),
    Variant(
        "value_detached",
        "No gradient reaches v: the values are cut off from autograd.",
        "∂L/∂v[b, s, g] = Σ_{h: h // G = g} Σ_t A[b, h, t, s]·dO[b, t, h]",
        (changed(("v",), zeroed),),
    ),
)


OUTPUT_DETACHED = Variant(
    "output_detached",
    "No gradient reaches any input: your output is cut off from the autograd graph.",
    "the output must stay a function of q, k, v and lambda_logits in torch: no .detach(), .numpy(), .item() or torch.tensor(...) on the way",
    (),
)


def _output_truth(case: Case) -> Prediction:
    """What a right answer for a case is (its output) with allowances."""
    return {"output": expected.output(case)}


def _gradient_truth(case: Case) -> Prediction:
    """The output and every gradient of a case, with allowances."""
    return {"output": expected.output(case), **expected.gradients(case)}


GQA_OUTPUT = Family(
    "gqa_output", GQA, GQA_VARIANTS, _output_truth,
    ((suite.gqa_causal, False), (suite.gqa_noncausal, False), (suite.gqa_large_logits, False), (suite.gqa_strided, False)),
)  # fmt: skip
DIFF_V2_OUTPUT = Family(
    "diff_v2_output", DIFF_V2, DIFF_V2_VARIANTS, _output_truth,
    ((suite.diff_causal, False), (suite.diff_noncausal, False), (suite.diff_large_logits, False), (suite.diff_saturated, False),
     (suite.diff_strided, False), (suite.diff_offsets, False), (suite.diff_gate_off, False)),
)  # fmt: skip
GQA_GRADIENTS = Family(
    "gqa_gradients", GQA, tuple(v for v in GRADIENT_VARIANTS if not v.id.startswith("gate")), _gradient_truth,
    ((suite.gqa_gradients, True), (suite.gqa_strided, True)), gradients=True,
)  # fmt: skip
DIFF_V2_GRADIENTS = Family(
    "diff_v2_gradients", DIFF_V2, GRADIENT_VARIANTS, _gradient_truth,
    ((suite.diff_gradients, True), (suite.diff_saturated, True), (suite.diff_strided, True)), gradients=True,
)  # fmt: skip
CATALOGUE = Catalogue(
    families=(GQA_OUTPUT, DIFF_V2_OUTPUT, GQA_GRADIENTS, DIFF_V2_GRADIENTS),
    outcome=suite.outcome,
    positions=suite.gradient_positions,
    checked=tuple(suite.SETS),
    symptoms=(
        (OUTPUT_DETACHED, no_graph(GQA_OUTPUT)),
        (OUTPUT_DETACHED, no_graph(DIFF_V2_OUTPUT)),
        (FLOAT32_INSIDE, float32_accuracy(GQA_OUTPUT)),
        (FLOAT32_INSIDE, float32_accuracy(DIFF_V2_OUTPUT)),
    ),
)
attach_hint = CATALOGUE.attach_hint
prepare = CATALOGUE.prepare
