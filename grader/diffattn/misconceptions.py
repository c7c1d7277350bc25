"""Misconception diagnosis: which known wrong formula did a failing submission compute?

When a value or gradient check fails, the grader tests hypotheses. Each
:class:`Variant` is a formula that students are known to write instead of the
right one (no causal mask, softmax over the wrong axis, λ on the wrong branch,
a detached value, ...), evaluated here in float64 numpy like the oracle, with
no torch. A variant *explains* a failed check when

* the submission's results agree with the variant's, within the same rule of
  allowance the checks use (``expected.allowance``), on every compared element
  of every call the submission answered, both in the check itself and in the
  run's other calls of the same function (so one case set cannot be explained
  by a formula that the others refute), and
* on the check's own calls the variant differs from the truth by more than
  ``FAR`` times the two allowances together somewhere. A variant that
  coincides with the truth on the inputs is never hinted, and a correct
  result (within its allowance of the truth) can never agree with a variant
  that is that far from the truth.

Variants are tried in order, most specific first; the first that explains the
check becomes its hint. Three families are tried in turn: the value of
differential_lambda, the output of differential_attention, and the gradients
of differential_attention (variants whose forward pass is right). A hint is
advice only: it never changes a verdict. See docs/diagnosis.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Union

import numpy as np

from grader.compare import Comparison
from grader.diffattn import expected, oracle, suite
from grader.diffattn.cases import AttentionCase, LambdaCase
from grader.diffattn.expected import Truth
from grader.diffattn.verdicts import tensor_result
from grader.invoke import Outcome
from grader.plugin import GradingContext

FAR = 1000.0  # how far (in allowances) a variant must be from the truth to be worth a hint

Case = Union[AttentionCase, LambdaCase]
Prediction = dict[str, Truth]  # "output", or a gradient's name, -> values and allowance
Form = Callable[[Case, Prediction], Prediction]  # (case, its truth) -> what the wrong formula gives


@dataclass(frozen=True)
class Variant:
    """A known wrong formula, its hint, and one or more ways students write it (forms)."""

    id: str
    text: str
    maths: str
    forms: tuple[Form, ...]

    def hint(self) -> dict[str, str]:
        """The JSON-safe hint of docs/report-schema.md."""
        return {"id": self.id, "text": self.text, "maths": self.maths}


@dataclass(frozen=True)
class Observation:
    """One call the submission answered: its case, what came back and the truth, per result name."""

    case: Case
    got: dict[str, np.ndarray]
    truth: Prediction


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
    e1, e2 = (np.exp(p) for p in _products(case))
    return e1 - e2 + init, e1 + e2 + abs(init)


def _sum_of_exponentials(case: LambdaCase, init: float) -> tuple[float, float]:
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


def _branches(case: AttentionCase) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
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
        return _weighted(case, *maps, weights, growth)

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


def _scaled_output(factor: float) -> Form:
    """The true output times ``factor``."""

    def form(case: Case, truth: Prediction) -> Prediction:
        right = truth["output"]
        return {"output": Truth(factor * right.values, abs(factor) * right.allowed)}

    return form


def _normalised_output(eps: float, centred: bool) -> Form:
    """Each output row divided by its RMS (or, ``centred``, standardised like a layer or group norm), plus ``eps``.

    The allowance follows by first-order propagation of the true output's allowance.
    """

    def form(case: Case, truth: Prediction) -> Prediction:
        right = truth["output"]
        o, a = right.values, right.allowed
        if centred:
            o, a = o - o.mean(axis=-1, keepdims=True), a + a.mean(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            square = (o * o).mean(axis=-1, keepdims=True)
            root = np.sqrt(square + eps)
            values = o / root
            allowed = a / root + np.abs(values) * (np.abs(o) * a).mean(axis=-1, keepdims=True) / (root * root)
        return {"output": Truth(values, allowed)}

    return form


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
        (_scaled_output(0.8), _scaled_output(0.2)),
    ),
    Variant(
        "normalised_output",
        "Your output is the right one with each row normalised: RMSNorm or GroupNorm belongs to the full "
        "layer, not to this function.",
        "O = (A1 − λA2) V, without a norm",
        tuple(_normalised_output(eps, False) for eps in (1e-5, 1e-6, 1e-8, 0.0))
        + tuple(_normalised_output(eps, True) for eps in (1e-5, 0.0)),
    ),
)


# ---- differential_attention: the gradients ---------------------------------------

BRANCH_INPUTS = ("q1", "k1", "q2", "k2")


def _changed(names: Iterable[str], change: Callable[[Truth], Truth]) -> Form:
    """The truth with ``change`` applied to the gradients ``names`` (those of λ's vectors included for "coefficient")."""
    wanted = set(names)

    def form(case: Case, truth: Prediction) -> Prediction:
        hit = {k for k in truth if k in wanted or ("coefficient" in wanted and k.startswith("lambda_"))}
        return {k: change(t) if k in hit else t for k, t in truth.items()}

    return form


def _zero(truth: Truth) -> Truth:
    return replace(truth, values=np.zeros_like(truth.values))


def _negated(truth: Truth) -> Truth:
    return replace(truth, values=-truth.values)


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
    return found


GRADIENT_VARIANTS = (
    Variant(
        "value_detached",
        "No gradient reaches value: it is detached before the output (value.detach() or .data); the other "
        "gradients are right.",
        "∂L/∂V = Pᵀ G",
        (_changed(["value"], _zero),),
    ),
    Variant(
        "coefficient_detached",
        "No gradient reaches the coefficient: it is detached or made a number (float(), .item()); the other "
        "gradients are right.",
        "∂L/∂λ = −Σ A2 ⊙ (G Vᵀ)",
        (_changed(["coefficient"], _zero),),
    ),
    Variant(
        "first_branch_detached",
        "q1 and k1 get no gradient: the first map is cut from autograd (detached or under torch.no_grad()); "
        "the other gradients are right.",
        "∂L/∂Q1 = dS1 K1 / √D, ∂L/∂K1 = dS1ᵀ Q1 / √D",
        (_changed(["q1", "k1"], _zero),),
    ),
    Variant(
        "second_branch_detached",
        "q2 and k2 get no gradient: the second map is cut from autograd (detached or under torch.no_grad()); "
        "the other gradients are right.",
        "∂L/∂Q2 = dS2 K2 / √D, ∂L/∂K2 = dS2ᵀ Q2 / √D",
        (_changed(["q2", "k2"], _zero),),
    ),
    Variant(
        "coefficient_gradient_sign",
        "The coefficient's gradient has the wrong sign; the rest are right.",
        "∂L/∂λ = −Σ A2 ⊙ (G Vᵀ): note the minus sign",
        (_changed(["coefficient"], _negated),),
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


# ---- what the submission returned --------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Variants of one kind of result, and the case sets whose calls every hint of the kind must explain."""

    name: str
    variants: tuple[Variant, ...]
    evidence: tuple[tuple[str, bool], ...]  # (case set, with gradients)


FAMILIES = (
    Family("lambda", LAMBDA_VARIANTS, (("lambda_values", False),)),
    Family(
        "attention",
        ATTENTION_VARIANTS,
        tuple((name, False) for name in (
            "attention_causal", "attention_noncausal", "attention_coefficients", "attention_large_logits",
            "attention_strided", "row_sums", "lambda_zero", "identical_maps",
        )),  # fmt: skip
    ),
    Family("gradients", GRADIENT_VARIANTS, (("attention_gradients", True), ("attention_strided", True), ("end_to_end", True))),
)


def _returned(outcome: Outcome, index: int) -> np.ndarray | None:
    """The values of call ``index`` when it returned a readable tensor."""
    result, _ = tensor_result(outcome, index)
    return None if result is None else result.value


def truth_of(family: str, case: Case) -> Prediction:
    """What a right answer for ``case`` is, for every result ``family`` compares (with allowances)."""
    if isinstance(case, LambdaCase):
        return {"output": expected.lambda_value(case)}
    truth = {"output": expected.attention_output(case)}
    return truth | expected.attention_grads(case) if family == "gradients" else truth


def observe(family: str, case: Case, outcome: Outcome) -> Observation | None:
    """What ``outcome`` tells about ``family`` for ``case`` (None when it has nothing to compare)."""
    if family == "lambda":
        lam = case if isinstance(case, LambdaCase) else case.lambda_case
        got = None if lam is None else _returned(outcome, 0)
        return None if got is None else Observation(lam, {"output": got}, truth_of(family, lam))
    if not isinstance(case, AttentionCase):
        return None
    output = _returned(outcome, len(outcome.functions) - 1)
    if output is None:
        return None
    if family == "attention":
        return Observation(case, {"output": output}, truth_of(family, case))
    if not outcome.grads or outcome.backward_error is not None:
        return None
    truth = truth_of(family, case)
    got = {"output": output}
    for name, position in suite.gradient_positions(case).items():
        if position in outcome.grads:
            grad = outcome.grads[position]
            got[name] = np.zeros_like(truth[name].values) if grad is None else grad
    return Observation(case, got, truth)


def _observations(grading: GradingContext, family: str, set_name: str, grads: bool) -> list[Observation]:
    """Every call of a case set that tells something about ``family``, made once per run."""

    def collect() -> list[Observation]:
        found = []
        for i, case in enumerate(getattr(suite, set_name)(grading.seed)):
            if isinstance(case, LambdaCase):
                outcome = suite.lambda_outcome(grading, set_name, i, case, grads)
            else:
                outcome = suite.attention_outcome(grading, set_name, i, case, grads)
            seen = observe(family, case, outcome)
            if seen is not None:
                found.append(seen)
        return found

    return grading.memo(("misconceptions", family, set_name, grads), collect)


# ---- matching ------------------------------------------------------------------------


def agrees(got: np.ndarray, predicted: Truth) -> bool:
    """Whether ``got`` equals the prediction within its allowance everywhere (NaN where it is NaN)."""
    got, v, allowed = (np.asarray(x, dtype=np.float64) for x in (got, predicted.values, predicted.allowed))
    if got.shape != v.shape:
        return False
    finite = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        close = finite & np.isfinite(got) & (np.abs(got - v) <= allowed)
    same_non_finite = ~finite & ((np.isnan(v) & np.isnan(got)) | (v == got))
    return bool((close | same_non_finite).all())


def far_apart(a: Truth, b: Truth) -> bool:
    """Whether two predictions differ somewhere by more than FAR times their allowances together."""
    (va, aa), (vb, ab) = ((np.asarray(t.values, dtype=np.float64), np.asarray(t.allowed, dtype=np.float64)) for t in (a, b))
    if va.shape != vb.shape:
        return True
    finite_a, finite_b = np.isfinite(va), np.isfinite(vb)
    if (finite_a != finite_b).any():
        return True
    with np.errstate(invalid="ignore"):
        return bool((np.abs(va - vb) > FAR * (np.broadcast_to(aa, va.shape) + np.broadcast_to(ab, vb.shape)))[finite_a].any())


_PREDICTIONS: dict[tuple[int, ...], tuple[tuple[Form, Case], Prediction]] = {}


def predict(form: Form, case: Case, truth: Prediction) -> Prediction:
    """What ``form`` gives for ``case``, computed once per form and case object (see :func:`prepare`).

    A form belongs to one family, and the family fixes which results ``truth`` holds.
    """
    return expected.remember(_PREDICTIONS, (form, case), lambda: form(case, truth))


def prepare(seed: int, until: Callable[[], bool] | None = None) -> None:
    """Compute every variant's prediction for every case a hint may look at, once for ``seed``.

    A batch calls this before it forks its grading processes, so that
    diagnosing a wrong submission costs comparisons only. It stops as soon
    as ``until()`` is true (a batch: when its fork server is warm and the
    preview drawn, so that grading never waits for it); a prediction not
    made here is made by :func:`predict` when a diagnosis first needs it.
    The first case of every set comes first, then the second, and so on: a
    form is tried on a set's answered cases in order and given up at the
    first that disagrees, so the first cases are the ones most diagnoses read.
    """
    work: list[tuple[int, Family, Case]] = []
    for family in FAMILIES:
        names = {name for name, _ in family.evidence} | set(suite.VALUE_SETS) | set(suite.GRADIENT_SETS) | {"lambda_values"}
        for name in sorted(names):
            for rank, case in enumerate(getattr(suite, name)(seed)):
                if family.name == "lambda":
                    case = case if isinstance(case, LambdaCase) else case.lambda_case
                elif not isinstance(case, AttentionCase):
                    continue
                if case is not None:
                    work.append((rank, family, case))
    for _, family, case in sorted(work, key=lambda item: item[0]):  # (a stable sort: sets and families keep their order)
        if until is not None and until():
            return
        truth = truth_of(family.name, case)
        for form in (f for variant in family.variants for f in variant.forms):
            try:
                predict(form, case, truth)
            except Exception:  # a form that cannot take this case is simply not cached
                continue


def explains(form: Form, observations: Iterable[Observation], keys: Iterable[str] | None = None) -> tuple[bool, bool]:
    """(every result agrees with ``form``, some result is far from the truth), over ``keys`` (default: all)."""
    distinct = False
    for seen in observations:
        try:
            predicted = predict(form, seen.case, seen.truth)
        except (ArithmeticError, ValueError):  # a formula that cannot be evaluated here (e.g. exp overflows) explains nothing
            return False, distinct
        for name in seen.got if keys is None else [k for k in keys if k in seen.got]:
            if not agrees(seen.got[name], predicted[name]):
                return False, distinct
            distinct = distinct or far_apart(predicted[name], seen.truth[name])
    return True, distinct


def first_match(
    variants: Iterable[Variant], evidence: list[Observation], own: list[Observation], keys: tuple[str, ...],
    known: dict[Form, bool] | None = None, known_own: dict[Form, tuple[bool, bool]] | None = None,
) -> Variant | None:  # fmt: skip
    """The first variant one of whose forms agrees with all the evidence and is far from the truth on ``own``.

    ``known``: whether each form agrees with the evidence, as found by earlier
    calls with the same evidence; ``known_own``: what :func:`explains` found
    for each form on the same ``own`` and ``keys`` (both filled in).
    """
    for variant in variants:
        for form in variant.forms:
            if known_own is None:
                agreed, distinct = explains(form, own, keys)
            elif form in known_own:
                agreed, distinct = known_own[form]
            else:
                agreed, distinct = known_own[form] = explains(form, own, keys)
            if not (agreed and distinct):
                continue
            if known is None:
                fits = explains(form, evidence)[0]
            elif form in known:
                fits = known[form]
            else:
                fits = known[form] = explains(form, evidence)[0]
            if fits:
                return variant
    return None


def diagnose(grading: GradingContext, set_name: str, grads: bool = False, keys: tuple[str, ...] = ()) -> dict[str, str] | None:
    """The hint for a failed check on ``set_name`` (its compared gradients ``keys``), or None.

    Families are tried in turn: differential_lambda's value, the attention
    output, then (for gradient checks) the attention gradients; then two
    symptoms: no graph behind any output (gradient checks), and float64
    outputs with float32's accuracy.
    """
    for family in FAMILIES:
        if family.name == "gradients" and not grads:
            continue
        own = _observations(grading, family.name, set_name, grads)
        if not own:
            continue
        evidence = [
            seen for name, with_grads in family.evidence for seen in _observations(grading, family.name, name, with_grads)
        ]
        compared = ("output", *keys) if family.name == "gradients" else ("output",)
        # The evidence is the same for every check of a run, and several checks compare the same results of one set.
        known = grading.memo(("misconceptions", "evidence", family.name), dict)
        known_own = grading.memo(("misconceptions", "own", family.name, set_name, grads, compared), dict)
        found = first_match(family.variants, evidence, own, compared, known, known_own)
        if found is not None:
            return found.hint()
    if grads and _detached(grading, set_name):
        return OUTPUT_DETACHED.hint()
    if _float32_accurate(_observations(grading, "attention", set_name, grads)):
        return FLOAT32_INSIDE.hint()
    return None


# ---- symptoms: bugs known by what they do to every result, not by a formula -----------

OUTPUT_DETACHED = Variant(
    "output_detached",
    "No gradient reaches any input: your output is cut off from the autograd graph.",
    "O must stay a function of Q1, K1, Q2, K2, V and λ in torch: no .detach(), .numpy(), .item() "
    "or torch.tensor(...) on the way",
    (),
)
FLOAT32_INSIDE = Variant(
    "float32_inside",
    "Your float64 results are only as accurate as float32: something inside computes in float32.",
    "compute in the inputs' dtype throughout: no .float(), no float32 constants or tensors made without dtype=",
    (),
)
FLOAT32_WIDER = 2.0**29  # float32's unit roundoff over float64's: the allowances scale with it
NO_GRAPH = "does not require grad"


def _detached(grading: GradingContext, set_name: str) -> bool:
    """Whether the backward pass of every answered call of a gradient check found no graph at all."""
    answered = []
    for i, case in enumerate(getattr(suite, set_name)(grading.seed)):
        if isinstance(case, LambdaCase):
            continue
        outcome = suite.attention_outcome(grading, set_name, i, case, True)
        if outcome.failure is None and _returned(outcome, len(outcome.functions) - 1) is not None:
            answered.append(outcome)
    no_graph = [o for o in answered if NO_GRAPH in (o.backward_error or "") or (o.grads and all(g is None for g in o.grads.values()))]
    return bool(answered) and len(no_graph) == len(answered)


def _float32_accurate(observations: list[Observation]) -> bool:
    """Whether float64 outputs miss their allowance but meet float32's, while float32 outputs are right."""
    if not any(seen.case.dtype == "float64" for seen in observations):
        return False
    missed = False
    for seen in observations:
        truth = seen.truth["output"]
        if seen.case.dtype == "float64":
            missed = missed or not agrees(seen.got["output"], truth)
            truth = Truth(truth.values, np.asarray(truth.allowed) * FLOAT32_WIDER)
        if not agrees(seen.got["output"], truth):
            return False
    return missed


def attach_hint(
    grading: GradingContext, verdict: Comparison, set_name: str, grads: bool = False, keys: tuple[str, ...] = ()
) -> None:
    """Give a failed check on ``set_name`` the hint :func:`diagnose` finds; leave a passed one alone.

    A hint is advice: if working it out fails, the check goes without one
    rather than turning its verdict into an internal error.
    """
    if verdict.ok:
        return
    try:
        hint = diagnose(grading, set_name, grads, keys)
    except Exception:  # see the docstring: the verdict stands whatever happens here
        hint = None
    grading.explain(hint=hint)
