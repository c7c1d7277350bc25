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
from dataclasses import replace
from collections.abc import Callable

import numpy as np

from grader.exercises.diffv2 import expected, oracle, suite
from grader.exercises.diffv2.cases import DIFF_V2, GQA, Case
from grader.toolkit import domain
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
from grader.toolkit.tolerance import Memo, Truth, allowance, remember

# ---- attention with one step changed ----------------------------------------------------


def _heads_for(case: Case, x: np.ndarray, tiled: bool) -> np.ndarray:
    """Key or value heads [B, T, Hkv, D] -> [B, Hq, T, D]: head h // G (interleaved) or, ``tiled``, h % Hkv."""
    if not tiled:
        return oracle.per_query_head(x, case.group)
    return np.tile(oracle.heads_first(x), (1, case.group, 1, 1))


def _softmax(logits: np.ndarray, hidden: np.ndarray | None, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` with the maximum subtracted, ``hidden`` entries at −∞ (a line with none visible is NaN)."""
    if hidden is not None:
        logits = np.where(hidden, -np.inf, logits)
    with np.errstate(invalid="ignore"):
        weights = np.exp(logits - logits.max(axis=axis, keepdims=True))
        return weights / weights.sum(axis=axis, keepdims=True)


def _future(queries: int, keys: int, offset: int = 1) -> np.ndarray:
    """The hidden entries of a causal mask built as ``ones(queries, keys).triu(offset)`` (1: the right one)."""
    return np.triu(np.ones((queries, keys), dtype=bool), offset)


def _causal_when(case: Case, default: bool) -> bool:
    """Whether a variant masks: the case's own flag, and ``default`` where the argument was left out."""
    return default if case.causal is None else case.causal


Attended = tuple[np.ndarray, np.ndarray, float]  # [B, T, Hq, D] values, their absolute-value evaluation, the growth of n


def _attended(case: Case, *, tiled_keys: bool = False, tiled_values: bool = False, scale: Callable[[int], float] | None = None,
              default_causal: bool = True, mask_offset: int | None = 1, axis: int = -1) -> Attended:  # fmt: skip
    """Grouped-query attention of ``case`` with one step changed.

    Key or value heads tiled (h % Hkv), another scale (of D), the mask left
    out where causal is (``default_causal``) or always (``mask_offset``
    None) or moved (another diagonal offset), the softmax along another axis.
    """
    d, t = case.q.shape[-1], case.q.shape[1]
    factor = 1.0 / math.sqrt(d) if scale is None else scale(d)
    logits = oracle.heads_first(case.q) @ np.swapaxes(_heads_for(case, case.k, tiled_keys), -1, -2) * factor
    masked = mask_offset is not None and _causal_when(case, default_causal)
    maps = _softmax(logits, _future(t, t, mask_offset) if masked and mask_offset is not None else None, axis)
    values = _heads_for(case, case.v, tiled_values)
    return np.swapaxes(maps @ values, 1, 2), np.swapaxes(maps @ np.abs(values), 1, 2), max(1.0, factor * math.sqrt(d))


def _over_root_2d(d: int) -> float:
    return 1.0 / math.sqrt(2 * d)


def _over_d(d: int) -> float:
    return 1.0 / d


def _unscaled(d: int) -> float:
    return 1.0


def _prediction(case: Case, values: np.ndarray, magnitude: np.ndarray, growth: float = 1.0) -> Prediction:
    """The output ``values``, allowed the checks' rule for a result whose absolute-value evaluation is ``magnitude``."""
    magnitude = np.nan_to_num(np.abs(magnitude), nan=0.0, posinf=0.0)  # non-finite values are compared as such, not bounded
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


def _mean_over_tokens(logits: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """σ of the logits averaged over the tokens: one gate per head, [B, 1, H]."""
    gate = oracle.sigmoids(logits.mean(axis=1, keepdims=True))
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


def _reshaped_back(gate: np.ndarray) -> np.ndarray:
    """``gate.reshape(B, H, T).transpose(1, 2)[..., None]``: the gate read as if stored [B, H, T], tokens and heads scrambled."""
    b, t, h = gate.shape
    return np.swapaxes(gate.reshape(b, h, t), 1, 2)[..., None]


def _combined(case: Case, attended: Attended, gate: Gate = _sigmoid, broadcast: Broadcast = _per_head, halves: bool = False,
              swapped: bool = False) -> Prediction:  # fmt: skip
    """first − gate·second over the pairs of query heads (even/odd, or first half/second half; ``swapped``: odd − gate·even)."""
    values, magnitude, growth = attended
    assert case.lambda_logits is not None
    h = values.shape[2] // 2
    pick = (slice(None, h), slice(h, None)) if halves else (slice(0, None, 2), slice(1, None, 2))
    pick = pick[::-1] if swapped else pick
    weight, size = (broadcast(x) for x in gate(case.lambda_logits, case.dtype))
    first, second = (values[:, :, p] for p in pick)
    first_size, second_size = (magnitude[:, :, p] for p in pick)
    with np.errstate(invalid="ignore", over="ignore"):
        return _prediction(case, first - weight * second, first_size + size * second_size, growth)


_ATTENDED: Memo = {}  # (change, case) -> Attended: the forms of one change share its attention


def _output_form(change: Callable[[Case], Attended], **combine: object) -> Form:
    """A form whose attention is ``change(case)``: the output itself for gqa_attention, combined into pairs for diff_v2_attention."""

    def form(case: Case, truth: Prediction) -> Prediction:
        attended = remember(_ATTENDED, (change, case), lambda: change(case))
        if case.function == GQA:
            return _prediction(case, attended[0], attended[1], attended[2])
        return _combined(case, attended, **combine)  # type: ignore[arg-type]

    return form


def _true(case: Case) -> Attended:
    return _attended(case)


def _tiled(case: Case) -> Attended:
    return _attended(case, tiled_keys=True, tiled_values=True)


def _values_tiled(case: Case) -> Attended:
    return _attended(case, tiled_values=True)


def _mask_moved(offset: int) -> Callable[[Case], Attended]:
    def change(case: Case) -> Attended:
        return _attended(case, mask_offset=offset)

    return change


def _over_queries(case: Case) -> Attended:
    return _attended(case, axis=-2)


def _odd_heads_always_causal(case: Case) -> Attended:
    """diff_v2_attention calling attention twice and passing causal to the even heads' call only."""
    values, magnitude, _ = _attended(case)
    odd, odd_size, _ = _attended(replace(case, causal=True))
    values[:, :, 1::2], magnitude[:, :, 1::2] = odd[:, :, 1::2], odd_size[:, :, 1::2]
    return values, magnitude, 1.0


def _result_reshaped(case: Case) -> Attended:
    """The [B, Hq, T, D] result brought back with reshape(B, T, Hq, D) instead of transpose(1, 2)."""
    values, magnitude, growth = _attended(case)
    back = [np.swapaxes(x, 1, 2).reshape(x.shape) for x in (values, magnitude)]
    return back[0], back[1], growth


def _scaled(scale: Callable[[int], float]) -> Callable[[Case], Attended]:
    def change(case: Case) -> Attended:
        return _attended(case, scale=scale)

    return change


def _unmasked(case: Case) -> Attended:
    return _attended(case, mask_offset=None)


def _default_not_causal(case: Case) -> Attended:
    return _attended(case, default_causal=False)


def _heads_as_tokens(case: Case) -> Attended:
    """q, k, v read as [B, H, T, D]: every token attends over the key/value heads (the causal mask top-left aligned, as SDPA's)."""
    hq, hkv = case.q.shape[2], case.k.shape[2]
    logits = case.q @ np.swapaxes(case.k, -1, -2) / math.sqrt(case.q.shape[-1])
    maps = _softmax(logits, _future(hq, hkv) if _causal_when(case, True) else None)
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

LAYOUT_TEXT = (
    "The tensors are read or returned as [B, H, T, D]: this exercise uses FlashAttention's [B, T, H, D] "
    "(tokens on axis 1, heads on axis 2); transpose(1, 2) to [B, H, T, D] and back, not reshape."
)
LAYOUT_MATHS = "q: [B, T, Hq, D], k and v: [B, T, Hkv, D], output: [B, T, Hq, D]"

SHARED_VARIANTS = (
    Variant(
        "kv_heads_tiled",
        "Key/value heads are mapped with h % Hkv (what repeat gives): query head h must read key/value head h // G, "
        "the G query heads of a group being contiguous (what repeat_interleave gives), for the keys and the values.",
        "out[b, t, h] = Σ_s softmax_s(q[b,t,h]·k[b,s,h // G]/√D + M[t,s]) v[b,s,h // G]",
        (_output_form(_tiled), _output_form(_values_tiled)),
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
    Variant(
        "mask_misplaced",
        "The causal mask is on the wrong diagonal: token t sees keys s ≤ t, itself included (triu(diagonal=1) of the "
        "future keys), no more and no less.",
        "M[t, s] = −∞ for s > t, 0 for s ≤ t",
        (_output_form(_mask_moved(2)), _output_form(_mask_moved(0))),
    ),
    Variant(
        "softmax_over_queries",
        "The softmax runs over the queries (dim −2): it normalises over the keys, the last axis of the [.., T, T] logits.",
        "A[t, s] = exp(S[t, s]) / Σ_s' exp(S[t, s'])",
        (_output_form(_over_queries),),
    ),
)

GQA_VARIANTS = (
    *SHARED_VARIANTS,
    Variant("layout_bhtd", LAYOUT_TEXT, LAYOUT_MATHS, (_output_transposed, _output_form(_heads_as_tokens), _output_form(_result_reshaped))),
)

DIFF_V2_VARIANTS = (
    *SHARED_VARIANTS,
    Variant("layout_bhtd", LAYOUT_TEXT, LAYOUT_MATHS, (_output_form(_heads_as_tokens), _output_form(_result_reshaped))),
    Variant(
        "pairs_as_halves",
        "Heads are paired as first half minus second half: DIFF V2 subtracts odd head 2i + 1 from even head 2i.",
        "out[:, :, i] = A[:, :, 2i] − σ(ℓ[:, :, i])·A[:, :, 2i + 1], i.e. A[:, :, 0::2] − σ(ℓ)[..., None]·A[:, :, 1::2]",
        (_output_form(_true, halves=True),),
    ),
    Variant(
        "pairs_swapped",
        "The pair's roles are swapped: the gated head is the odd one, subtracted from the even one.",
        "out = A[:, :, 0::2] − σ(ℓ)[..., None]·A[:, :, 1::2]",
        (_output_form(_true, swapped=True),),
    ),
    Variant(
        "causal_not_forwarded",
        "The odd heads are always causal: pass causal to every attention call (with causal=False neither map is masked).",
        "A = gqa_attention(q, k, v, causal) for the even and the odd heads alike",
        (_output_form(_odd_heads_always_causal),),
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
        "The gate is applied along the wrong axis: sigmoid(lambda_logits) is [B, T, H], one gate per token and head, "
        "the same for every feature (sigmoid(lambda_logits)[..., None]), neither averaged nor transposed nor reshaped.",
        "out[b, t, i, :] = A[b, t, 2i, :] − σ(ℓ[b, t, i])·A[b, t, 2i + 1, :]",
        (*(_output_form(_true, broadcast=b) for b in (_per_feature, _transposed, _reshaped, _reshaped_back)),
         _output_form(_true, gate=_mean_over_tokens)),  # fmt: skip
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
        return domain.read_where_expanded({**truth, "lambda_logits": gradient}, case.names, case.memory_layouts)

    return form


def _ones(logits: np.ndarray) -> np.ndarray:
    return np.ones_like(logits)


def _zeroed_when_causal(truth: Truth, case: Case) -> Truth:
    """No gradient where the causal mask is applied (the mask, and what follows it, built outside autograd)."""
    return zeroed(truth, case) if case.is_causal else truth


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
        "The gradients of k (or k and v) are averaged over the G query heads of a group: they are summed.",
        "∂L/∂k[b, s, g] = Σ_{h: h // G = g} Σ_t dS[b, h, t, s]·q[b, t, h] / √D, and likewise for v",
        (changed(("k",), _group_mean), changed(("k", "v"), _group_mean)),
    ),
    Variant(
        "logits_detached",
        "No gradient reaches q and k: the logits are cut off from autograd (a mask or scale applied under "
        "torch.no_grad(), .detach() or .data on the way).",
        "∂L/∂q = dS·k / √D and ∂L/∂k = Σ_h dSᵀ·q / √D, with dS = A ⊙ (dA − rowsum(dA ⊙ A))",
        (changed(("q", "k"), zeroed), changed(("q", "k"), _zeroed_when_causal)),
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
    readable=lambda case: not case.one_object and domain.below_model_length(case.q.shape[1]),
)
attach_hint = CATALOGUE.attach_hint
