"""The catalogue of wrong formulas students write for the differential-attention exercise.

The diagnosis engine is the toolkit's (:mod:`grader.toolkit.misconceptions`,
docs/diagnosis.md): when a value or gradient check fails, the first variant
whose forms agree with every answered call of the function, and are far from
the truth on the check's own calls, becomes the check's hint. This module
holds the variants (no causal mask, softmax over the wrong axis, λ on the
wrong branch, a detached value, ...), each form evaluated in float64 numpy
like the oracle, with no torch, and the allowance of the checks' own rule
(``expected.allowance``). Three families are tried in turn: the value of
differential_lambda, the output of differential_attention, and the gradients
of differential_attention (variants whose forward pass is right); then two
symptoms, no graph behind any output and float64 results with float32's
accuracy. A hint is advice only: it never changes a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from grader.exercises.diffattn import expected, oracle, suite
from grader.exercises.diffattn.cases import ATTENTION, INPUT_NAMES, LAMBDA, AttentionCase, LambdaCase
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
    negated,
    no_graph,
    normalised_output,
    scaled_output,
    zeroed,
)
from grader.toolkit.tolerance import Truth

Case = Any  # a LambdaCase or an AttentionCase: each form asserts the kind it takes

# ---- differential_lambda -----------------------------------------------------


def _lambda_form(formula: Callable[[LambdaCase, float], tuple[np.ndarray | float, np.ndarray | float]]) -> Form:
    """A form from ``formula(case, lambda_init) -> (value, absolute-value evaluation)``."""

    def form(case: Case, truth: Prediction) -> Prediction:
        assert isinstance(case, LambdaCase)
        value, magnitude = formula(case, case.effective_init)
        return {"output": Truth(np.asarray(value, dtype=np.float64), expected.allowance(case, magnitude))}

    return form


def _exponentials(case: LambdaCase) -> tuple[float, float]:
    """e1 = exp(q1·k1) and e2 = exp(q2·k2)."""
    x1, x2 = oracle.lambda_exponents(*case.vectors)
    return math.exp(x1), math.exp(x2)


def _products(case: LambdaCase) -> tuple[np.ndarray, np.ndarray]:
    """The elementwise products q1 ⊙ k1 and q2 ⊙ k2."""
    return case.q1 * case.k1, case.q2 * case.k2


def _default_changed(case: LambdaCase, init: float) -> tuple[float, float]:
    e1, e2 = _exponentials(case)
    init = 0.8 if case.lambda_init is None else init
    return e1 - e2 + init, e1 + e2 + abs(init)


def _no_init(case: LambdaCase, init: float) -> tuple[float, float]:
    e1, e2 = _exponentials(case)
    return e1 - e2, e1 + e2


def _no_exp(case: LambdaCase, init: float) -> tuple[float, float]:
    x1, x2 = oracle.lambda_exponents(*case.vectors)
    p1, p2 = _products(case)
    return x1 - x2 + init, float(np.abs(p1).sum() + np.abs(p2).sum()) + abs(init)


def _sign_swapped(case: LambdaCase, init: float) -> tuple[float, float]:
    e1, e2 = _exponentials(case)
    return e2 - e1 + init, e1 + e2 + abs(init)


def _terms_added(case: LambdaCase, init: float) -> tuple[float, float]:
    e1, e2 = _exponentials(case)
    return e1 + e2 + init, e1 + e2 + abs(init)


def _clamped(case: LambdaCase, init: float) -> tuple[float, float]:
    e1, e2 = _exponentials(case)
    return min(max(e1 - e2 + init, 0.0), 1.0), e1 + e2 + abs(init)


def _elementwise(case: LambdaCase, init: float) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):  # products past exp's range: the variant overflows, as its code would
        e1, e2 = (np.exp(p) for p in _products(case))
        return e1 - e2 + init, e1 + e2 + abs(init)


def _sum_of_exponentials(case: LambdaCase, init: float) -> tuple[float, float]:
    with np.errstate(over="ignore", invalid="ignore"):
        e1, e2 = (float(np.exp(p).sum()) for p in _products(case))
        return e1 - e2 + init, e1 + e2 + abs(init)


def _sum_not_dot(case: LambdaCase, init: float) -> tuple[float, float]:
    e1, e2 = (math.exp(float(np.sum(q + k))) for q, k in _branches(case))
    return e1 - e2 + init, e1 + e2 + abs(init)


LAMBDA_VARIANTS = (
    Variant(
        "lambda_default_changed",
        "λ uses lambda_init = 0.8 when it is left out; the default is 0.2.",
        "def differential_lambda(q1, k1, q2, k2, lambda_init=0.2)",
        (_lambda_form(_default_changed),),
    ),
    Variant(
        "lambda_no_init",
        "λ matches exp(q1·k1) − exp(q2·k2): lambda_init is not added.",
        "λ = exp(q1·k1) − exp(q2·k2) + λ_init: you left out + λ_init",
        (_lambda_form(_no_init),),
    ),
    Variant(
        "lambda_no_exp",
        "λ matches q1·k1 − q2·k2 + λ_init: the exponentials are missing.",
        "λ = exp(q1·k1) − exp(q2·k2) + λ_init: you left out exp",
        (_lambda_form(_no_exp),),
    ),
    Variant(
        "lambda_sign_swapped",
        "λ matches exp(q2·k2) − exp(q1·k1) + λ_init: the terms are swapped.",
        "λ = exp(q1·k1) − exp(q2·k2) + λ_init: the q1·k1 term comes first",
        (_lambda_form(_sign_swapped),),
    ),
    Variant(
        "lambda_terms_added",
        "λ matches exp(q1·k1) + exp(q2·k2) + λ_init: subtract the second term.",
        "λ = exp(q1·k1) − exp(q2·k2) + λ_init: subtract exp(q2·k2)",
        (_lambda_form(_terms_added),),
    ),
    Variant(
        "lambda_clamped",
        "λ matches the right value clamped to [0, 1]; λ may be any number.",
        "λ = exp(q1·k1) − exp(q2·k2) + λ_init, not clamped",
        (_lambda_form(_clamped),),
    ),
    Variant(
        "lambda_elementwise",
        "λ matches exp(q1 ⊙ k1) − exp(q2 ⊙ k2) + λ_init element by element: use dot products, which give one "
        "number.",
        "λ = exp(q1·k1) − exp(q2·k2) + λ_init with dot products q·k = Σ_d q_d k_d",
        (_lambda_form(_elementwise),),
    ),
    Variant(
        "lambda_sum_of_exponentials",
        "λ matches Σ exp(q1_d k1_d) − Σ exp(q2_d k2_d) + λ_init: the sum belongs inside the exponential (a "
        "dot product).",
        "λ = exp(Σ_d q1_d k1_d) − exp(Σ_d q2_d k2_d) + λ_init",
        (_lambda_form(_sum_of_exponentials),),
    ),
    Variant(
        "lambda_sum_not_dot",
        "λ matches exp(Σ(q1 + k1)) − exp(Σ(q2 + k2)) + λ_init: multiply the vectors (a dot product) instead "
        "of adding them.",
        "λ = exp(q1·k1) − exp(q2·k2) + λ_init with q·k = Σ_d q_d k_d",
        (_lambda_form(_sum_not_dot),),
    ),
)


# ---- differential_attention: the output ------------------------------------------


def _keep(t: int, mask: str) -> np.ndarray | None:
    """Which keys each query sees: j ≤ i (causal), j < i (strict), j ≥ i (upper), or all (None)."""
    below = np.arange(t)[None, :] - np.arange(t)[:, None]  # key index minus query index
    return {"causal": below <= 0, "strict": below < 0, "upper": below >= 0, "none": None}[mask]


def _logits(q: np.ndarray, k: np.ndarray, scale: float | None = None) -> np.ndarray:
    """Q Kᵀ times ``scale`` (1/√D unless given)."""
    return np.einsum("bhid,bhjd->bhij", q, k) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)


def _softmax(s: np.ndarray, keep: np.ndarray | None, axis: int = -1, uniform_empty: bool = False) -> np.ndarray:
    """Softmax along ``axis`` over the entries ``keep`` allows; a line with none is NaN, or uniform if asked."""
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=axis, keepdims=True))
        a = e / e.sum(axis=axis, keepdims=True)
    if uniform_empty and keep is not None:
        a = np.where(keep.any(axis=axis, keepdims=True), a, 1.0 / s.shape[axis])
    return a


def _branches(case: LambdaCase | AttentionCase) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(q1, k1) and (q2, k2)."""
    return (case.q1, case.k1), (case.q2, case.k2)


def _mask_of(case: AttentionCase, mask: str, omitted: bool = True) -> np.ndarray | None:
    """``mask`` when the call is causal (``omitted`` is what causal=None means), else no mask."""
    causal = omitted if case.causal is None else case.causal
    return _keep(case.q1.shape[2], mask) if causal else None


def _output(
    case: AttentionCase, p: np.ndarray, p_abs: np.ndarray, value: np.ndarray | None = None, growth: float = 1.0
) -> Prediction:
    """O = P V and its allowance, from the signed map and its absolute-value evaluation."""
    value = case.value if value is None else value
    magnitude = np.einsum("bhij,bhjc->bhic", np.abs(p_abs), np.abs(value))
    magnitude = np.nan_to_num(magnitude, nan=0.0, posinf=0.0)  # undefined rows are compared as NaN, not bounded
    return {"output": Truth(np.einsum("bhij,bhjc->bhic", p, value), expected.allowance(case, magnitude, growth))}


Weights = Callable[[float], tuple[float, float]]  # λ -> the weights (w1, w2) of the two maps


def _weighted(
    case: AttentionCase, a1: np.ndarray, a2: np.ndarray, weights: Weights, growth: float = 1.0, value: np.ndarray | None = None
) -> Prediction:
    """O = (w1 A1 + w2 A2) V with (w1, w2) = weights(λ); the true formula has weights (1, −λ)."""
    w1, w2 = weights(expected.coefficient_of(case))
    b1, b2 = weights(expected.coefficient_bound(case))
    return _output(case, w1 * a1 + w2 * a2, abs(b1) * a1 + abs(b2) * a2, value, growth)


def _true_weights(lam: float) -> tuple[float, float]:
    return 1.0, -lam


def _maps_form(
    masks: tuple[str, str] = ("causal", "causal"),
    scale: Callable[[int], float] | None = None,
    axis: int = -1,
    uniform_empty: bool = False,
    omitted: bool = True,
    weights: Weights = _true_weights,
) -> Form:
    """A form that computes each map with its own mask, a scale (of D), an axis, and mixes them with ``weights``."""

    def form(case: Case, truth: Prediction) -> Prediction:
        assert isinstance(case, AttentionCase)
        d = case.q1.shape[3]
        factor = None if scale is None else scale(d)
        maps = [
            _softmax(_logits(q, k, factor), _mask_of(case, mask, omitted), axis, uniform_empty)
            for (q, k), mask in zip(_branches(case), masks)
        ]
        growth = 1.0 if factor is None else max(1.0, factor * math.sqrt(d))
        return _weighted(case, maps[0], maps[1], weights, growth)

    return form


def _true_maps(case: AttentionCase) -> tuple[np.ndarray, np.ndarray]:
    """A1 and A2 of the true formula (numpy float64)."""
    keep = _mask_of(case, "causal")
    return _softmax(_logits(case.q1, case.k1), keep), _softmax(_logits(case.q2, case.k2), keep)


def _mask_after_softmax(case: Case, truth: Prediction) -> Prediction:
    assert isinstance(case, AttentionCase)
    keep = _mask_of(case, "causal")
    visible = 1.0 if keep is None else keep
    a1, a2 = (_softmax(_logits(q, k), None) * visible for q, k in _branches(case))
    return _weighted(case, a1, a2, _true_weights)


def _naive_map(case: AttentionCase, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """exp(s) / Σ exp(s) without the row maximum, its exponentials in the case's dtype (which may overflow)."""
    dtype = np.dtype(case.dtype)
    keep = _mask_of(case, "causal")
    s = _logits(q, k) if keep is None else np.where(keep, _logits(q, k), -np.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(s.astype(dtype))
        return (e / e.sum(axis=-1, keepdims=True, dtype=dtype)).astype(np.float64)


def _softmax_overflow(case: Case, truth: Prediction) -> Prediction:
    assert isinstance(case, AttentionCase)
    return _weighted(case, _naive_map(case, case.q1, case.k1), _naive_map(case, case.q2, case.k2), _true_weights)


def _logit_difference(case: Case, truth: Prediction) -> Prediction:
    assert isinstance(case, AttentionCase)
    lam = expected.coefficient_of(case)
    a = _softmax(_logits(case.q1, case.k1) - lam * _logits(case.q2, case.k2), _mask_of(case, "causal"))
    return _output(case, a, a, growth=1.0 + expected.coefficient_bound(case))


def _joint_normaliser(peak_over_masked_keys: bool) -> Form:
    """(E1 − λE2) / rowsum(E1 − λE2) with E_i = exp(S_i − peak) in the case's dtype, masked after exp.

    The peak is the row's largest logit of both branches, over the visible keys
    or, as some write it, over all keys; with large logits the exponentials of
    a row can then all underflow (a NaN row), so the two are different forms.
    """

    def form(case: Case, truth: Prediction) -> Prediction:
        assert isinstance(case, AttentionCase)
        lam, bound = expected.coefficient_of(case), expected.coefficient_bound(case)
        keep = _mask_of(case, "causal")
        s1, s2 = (_logits(q, k) for q, k in _branches(case))
        if keep is not None and not peak_over_masked_keys:
            s1, s2 = np.where(keep, s1, -np.inf), np.where(keep, s2, -np.inf)
        top = np.maximum(s1.max(axis=-1, keepdims=True), s2.max(axis=-1, keepdims=True))
        visible = 1.0 if keep is None else keep
        e1, e2 = (np.exp((s - top).astype(case.dtype)).astype(np.float64) * visible for s in (s1, s2))
        signed, unsigned = e1 - lam * e2, e1 + bound * e2
        total = signed.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            # the normaliser's error adds its condition number Σ|terms| / |Σ terms| to every entry's
            condition = unsigned.sum(axis=-1, keepdims=True) / np.abs(total)
            return _output(case, signed / total, unsigned * (1.0 + condition) / np.abs(total))

    return form


def _value_half_width(case: Case, truth: Prediction) -> Prediction:
    assert isinstance(case, AttentionCase)
    return _weighted(case, *_true_maps(case), _true_weights, value=case.value[..., : case.q1.shape[3]])


def _value_split(case: Case, truth: Prediction) -> Prediction:
    assert isinstance(case, AttentionCase)
    a1, a2 = _true_maps(case)
    d = case.q1.shape[3]
    first = _output(case, a1, a1, case.value[..., :d])["output"]
    lam, bound = expected.coefficient_of(case), expected.coefficient_bound(case)
    second = _output(case, -lam * a2, bound * a2, case.value[..., d:])["output"]
    values, allowed = (np.concatenate(pair, axis=-1) for pair in ((first.values, second.values), (first.allowed, second.allowed)))
    return {"output": Truth(values, allowed)}


def _over_d(d: int) -> float:
    return 1.0 / d


def _over_root_2d(d: int) -> float:
    return 1.0 / math.sqrt(2 * d)


def _unscaled(d: int) -> float:
    return 1.0


def _lambda_both(lam: float) -> tuple[float, float]:
    return lam, -lam


def _lambda_first(lam: float) -> tuple[float, float]:
    return lam, -1.0


def _swapped(lam: float) -> tuple[float, float]:
    return -lam, 1.0


ATTENTION_VARIANTS = (
    Variant(
        "causal_default_false",
        "No causal mask when causal is left out: the default must be True.",
        "def differential_attention(..., causal=True)",
        (_maps_form(omitted=False),),
    ),
    Variant(
        "mask_first_branch_only",
        "Your output matches the causal mask on the first branch only.",
        "A2 = softmax(Q2K2ᵀ/√D + M): you left out M",
        (_maps_form(masks=("causal", "none")),),
    ),
    Variant(
        "mask_second_branch_only",
        "Your output matches the causal mask on the second branch only.",
        "A1 = softmax(Q1K1ᵀ/√D + M): you left out M",
        (_maps_form(masks=("none", "causal")),),
    ),
    Variant(
        "no_mask",
        "Your output matches the formula without the causal mask: queries attend to future keys.",
        "S_i = Q_iK_iᵀ/√D + M: you left out M (−∞ where key j > query i)",
        (_maps_form(masks=("none", "none")),),
    ),
    Variant(
        "mask_after_softmax",
        "Your output matches future entries zeroed after the softmax, so the rows no longer sum to 1.",
        "A_i = softmax(S_i + M): the mask goes inside the softmax",
        (_mask_after_softmax,),
    ),
    Variant(
        "mask_hides_diagonal",
        "Your output matches a mask that hides the diagonal too: a token must see itself, and with keys j < i"
        " only the first token sees nothing.",
        "M[i, j] = −∞ only where j > i; the key j = i stays visible",
        (_maps_form(masks=("strict", "strict")), _maps_form(masks=("strict", "strict"), uniform_empty=True)),
    ),
    Variant(
        "mask_wrong_triangle",
        "Your mask is the wrong way round: queries see the future, not the past.",
        "M[i, j] = −∞ where j > i (above the diagonal), 0 where j ≤ i",
        (_maps_form(masks=("upper", "upper")),),
    ),
    Variant(
        "softmax_over_queries",
        "Your output matches a softmax over the queries (dim=-2), not the keys.",
        "A_i = softmax(S_i) row by row, over the keys (dim=-1)",
        (_maps_form(axis=-2),),
    ),
    Variant(
        "scale_inverse_d",
        "Your output matches logits scaled by 1/D instead of 1/√D: dividing by √D twice (for instance before "
        "scaled_dot_product_attention) does that.",
        "S_i = Q_iK_iᵀ/√D + M: divide by √D once",
        (_maps_form(scale=_over_d),),
    ),
    Variant(
        "scale_value_width",
        "Your output matches logits scaled by 1/√(2D) instead of 1/√D: D is the width of the queries, not of "
        "the values.",
        "S_i = Q_iK_iᵀ/√D + M with D = q1.shape[-1]",
        (_maps_form(scale=_over_root_2d),),
    ),
    Variant(
        "no_scale",
        "Your output matches unscaled logits: the 1/√D factor is missing.",
        "S_i = Q_iK_iᵀ/√D + M: you left out /√D",
        (_maps_form(scale=_unscaled),),
    ),
    Variant(
        "softmax_overflow",
        "Your softmax overflows: outputs with large logits are NaN or wrong. Subtract the row maximum before "
        "exp.",
        "softmax(s)_j = exp(s_j − max s) / Σ_k exp(s_k − max s): subtract the row maximum before exp",
        (_softmax_overflow,),
    ),
    Variant(
        "logit_difference",
        "Your output matches softmax(S1 − λS2), one softmax of the logits, instead of the difference of two "
        "softmax maps.",
        "P = softmax(S1) − λ softmax(S2), not softmax(S1 − λS2)",
        (_logit_difference,),
    ),
    Variant(
        "joint_normaliser",
        "Your output matches one normaliser for both maps together, instead of each map normalised on its own"
        " before the subtraction.",
        "P = A1 − λA2 with A_i = softmax(S_i), each normalised separately",
        (_joint_normaliser(False), _joint_normaliser(True)),
    ),
    Variant(
        "lambda_times_difference",
        "Your output matches λ(A1 − A2)V: λ scales the whole difference.",
        "P = A1 − λA2: λ multiplies A2 only",
        (_maps_form(weights=_lambda_both),),
    ),
    Variant(
        "lambda_on_first_branch",
        "Your output matches (λA1 − A2)V: λ is on the wrong branch.",
        "P = A1 − λA2: λ multiplies A2",
        (_maps_form(weights=_lambda_first),),
    ),
    Variant(
        "branches_swapped",
        "Your output matches (A2 − λA1)V: the two branches are swapped.",
        "P = A1 − λA2: the first branch is the positive one",
        (_maps_form(weights=_swapped),),
    ),
    Variant(
        "value_half_width",
        "Your output uses only the first D columns of V; it must be 2D wide.",
        "O = P V with all 2D columns of V",
        (_value_half_width,),
    ),
    Variant(
        "value_split_per_branch",
        "Your output matches each branch using its own half of V, [A1 V[:, :D], −λ A2 V[:, D:]]; both maps "
        "use all of V.",
        "O = (A1 − λA2) V",
        (_value_split,),
    ),
    Variant(
        "one_minus_lambda_init",
        "Your output is the right one times (1 − λ_init): that factor belongs to the full layer, after its "
        "normalisation, not to this function.",
        "O = (A1 − λA2) V, without a (1 − λ_init) factor",
        (scaled_output(0.8), scaled_output(0.2)),
    ),
    Variant(
        "normalised_output",
        "Your output is the right one with each row normalised: RMSNorm or GroupNorm belongs to the full "
        "layer, not to this function.",
        "O = (A1 − λA2) V, without a norm",
        tuple(normalised_output(eps) for eps in (1e-5, 1e-6, 1e-8, 0.0))
        + tuple(normalised_output(eps, centred=True) for eps in (1e-5, 0.0)),
    ),
)


# ---- differential_attention: the gradients ---------------------------------------

BRANCH_INPUTS = ("q1", "k1", "q2", "k2")


def _coefficient(name: str) -> bool:
    """The coefficient's gradient, or those of λ's vectors when differential_lambda computes it."""
    return name == "coefficient" or name.startswith("lambda_")


def _missing_scale(case: Case, truth: Prediction) -> Prediction:
    root = math.sqrt(case.q1.shape[-1])
    return {k: Truth(t.values * root, t.allowed * root) if k in BRANCH_INPUTS else t for k, t in truth.items()}


def _no_rowsum(case: Case, truth: Prediction) -> Prediction:
    assert isinstance(case, AttentionCase)
    lam = expected.coefficient_of(case)
    root = math.sqrt(case.q1.shape[-1])
    d_p = np.einsum("bhic,bhjc->bhij", case.cotangent, case.value)
    found = dict(truth)
    for (q, k, a), sign, suffix in zip(zip((case.q1, case.q2), (case.k1, case.k2), _true_maps(case)), (1.0, -lam), "12"):
        d_s = sign * a * d_p
        for name, grad in (("q", np.einsum("bhij,bhjd->bhid", d_s, k)), ("k", np.einsum("bhij,bhid->bhjd", d_s, q))):
            if name + suffix in truth:
                found[name + suffix] = replace(truth[name + suffix], values=grad / root)
    return domain.read_where_expanded(found, INPUT_NAMES, case.layouts)


GRADIENT_VARIANTS = (
    Variant(
        "value_detached",
        "No gradient reaches value: it is detached before the output (value.detach() or .data); the other "
        "gradients are right.",
        "∂L/∂V = Pᵀ G",
        (changed(("value",), zeroed),),
    ),
    Variant(
        "coefficient_detached",
        "No gradient reaches the coefficient: it is detached or made a number (float(), .item()); the other "
        "gradients are right.",
        "∂L/∂λ = −Σ A2 ⊙ (G Vᵀ)",
        (changed(_coefficient, zeroed),),
    ),
    Variant(
        "first_branch_detached",
        "q1 and k1 get no gradient: the first map is cut from autograd (detached or under torch.no_grad()); "
        "the other gradients are right.",
        "∂L/∂Q1 = dS1 K1 / √D, ∂L/∂K1 = dS1ᵀ Q1 / √D",
        (changed(("q1", "k1"), zeroed),),
    ),
    Variant(
        "second_branch_detached",
        "q2 and k2 get no gradient: the second map is cut from autograd (detached or under torch.no_grad()); "
        "the other gradients are right.",
        "∂L/∂Q2 = dS2 K2 / √D, ∂L/∂K2 = dS2ᵀ Q2 / √D",
        (changed(("q2", "k2"), zeroed),),
    ),
    Variant(
        "coefficient_gradient_sign",
        "The coefficient's gradient has the wrong sign; the rest are right.",
        "∂L/∂λ = −Σ A2 ⊙ (G Vᵀ): note the minus sign",
        (changed(_coefficient, negated),),
    ),
    Variant(
        "backward_missing_scale",
        "Gradients of q1, k1, q2, k2 are √D too large: 1/√D is missing in the backward pass.",
        "∂L/∂Q_i = dS_i K_i / √D, ∂L/∂K_i = dS_iᵀ Q_i / √D",
        (_missing_scale,),
    ),
    Variant(
        "backward_no_rowsum",
        "Gradients of q1, k1, q2, k2 miss the row-sum term of the softmax backward.",
        "dS_i = A_i ⊙ (dA_i − rowsum(dA_i ⊙ A_i)): you left out − rowsum(dA_i ⊙ A_i)",
        (_no_rowsum,),
    ),
)



# ---- the catalogue ------------------------------------------------------------------


def _lambda_of(case: Case) -> LambdaCase | None:
    """The differential_lambda call of a case: a lambda case itself, or the one that computes a composed case's coefficient."""
    return case if isinstance(case, LambdaCase) else case.lambda_case


def _lambda_truth(case: LambdaCase) -> Prediction:
    return {"output": expected.lambda_value(case)}


def _output_truth(case: AttentionCase) -> Prediction:
    return {"output": expected.attention_output(case)}


def _gradient_truth(case: AttentionCase) -> Prediction:
    return {"output": expected.attention_output(case)} | expected.attention_grads(case)


LAMBDA_FAMILY = Family("lambda", LAMBDA, LAMBDA_VARIANTS, _lambda_truth, ((suite.lambda_values, False),), subject=_lambda_of)
ATTENTION_FAMILY = Family(
    "attention",
    ATTENTION,
    ATTENTION_VARIANTS,
    _output_truth,
    tuple((case_set, False) for case_set in (
        suite.attention_causal, suite.attention_noncausal, suite.attention_coefficients, suite.attention_large_logits,
        suite.attention_strided, suite.row_sums, suite.lambda_zero, suite.identical_maps,
    )),  # fmt: skip
)
GRADIENTS_FAMILY = Family(
    "gradients", ATTENTION, GRADIENT_VARIANTS, _gradient_truth,
    ((suite.attention_gradients, True), (suite.attention_strided, True), (suite.end_to_end, True)), gradients=True,
)  # fmt: skip
FAMILIES = (LAMBDA_FAMILY, ATTENTION_FAMILY, GRADIENTS_FAMILY)

OUTPUT_DETACHED = Variant(
    "output_detached",
    "No gradient reaches any input: your output is cut off from the autograd graph.",
    "O must stay a function of Q1, K1, Q2, K2, V and λ in torch: no .detach(), .numpy(), .item() "
    "or torch.tensor(...) on the way",
    (),
)

CATALOGUE = Catalogue(
    FAMILIES,
    outcome=suite.case_outcome,
    positions=suite.gradient_positions,
    checked=(*suite.VALUE_SETS, *suite.GRADIENT_SETS, suite.lambda_values),
    symptoms=((OUTPUT_DETACHED, no_graph(GRADIENTS_FAMILY)), (FLOAT32_INSIDE, float32_accuracy(ATTENTION_FAMILY))),
    # a tensor passed for several arguments has one gradient, the sum of theirs, which the variants' formulas do not give
    readable=lambda case: not case.one_object and (not isinstance(case, AttentionCase) or domain.below_model_length(case.q1.shape[2])),
)
