"""Which softmax attention map a submission computed: a small model fitted to a map read out of it.

An exercise reads a T×T attention map out of the submission (one-hot values
turn the output into the map, see grader/exercises/diffattn/probes.py) and
asks :func:`explain` which map of the family below it is, starting from the
one the contract asks for and allowing one, then two, changes:

* the logits ``Q Kᵀ`` from which pair of the inputs (the keys of the other
  branch, queries and keys swapped);
* how future keys are treated (:data:`MASKS`);
* the axis the softmax normalises (keys or queries);
* whether the map is transposed;
* the scale of the logits, fitted by least squares on the logarithms of the
  visible entries (the ratio of two entries of a line is ``exp(s·ΔS)``) and
  named when it is one of the exercise's candidates (1/√D, 1/D, ...);
* a factor multiplying the whole map after the softmax (a scale applied to
  the weights instead of the logits), fitted by least squares.

The fit is numpy in float64 and knows nothing of the submission but the map.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

MASKS = {
    "causal": "future keys hidden (key j > query i)",
    "none": "no mask",
    "strict": "the diagonal hidden too (key j ≥ query i)",
    "upper": "the past hidden instead of the future (key j < query i)",
    "zero": "future logits set to 0 instead of −∞",
    "after": "future weights zeroed after the softmax, rows not renormalised",
}
# What each mask (or the mask applied although causal=False) means, and what to do: title, advice.
MASK_TEXT = {
    "none": ("queries see future keys: the causal mask is missing",
             "add −∞ to the logits where key j > query i, before the softmax (`masked_fill(future, float('-inf'))`)"),
    "strict": ("the mask hides the diagonal too: a token must see itself", "mask only key j > query i (`triu(diagonal=1)`), keep j = i visible"),
    "upper": ("the mask is the wrong way round: queries see the future and not the past",
              "mask key j > query i (above the diagonal), keep j ≤ i"),
    "zero": ("masked logits are set to 0 instead of −∞, so future keys still get weight",
             "fill the masked logits with −∞ (`masked_fill(future, float('-inf'))`), not 0"),
    "after": ("future weights are zeroed after the softmax, so rows no longer sum to 1",
              "apply the mask to the logits before the softmax, not to the weights after it"),
    "causal": ("the causal mask is applied although causal=False", "apply the mask only when causal is True"),
}  # fmt: skip
AXES = ("keys", "queries")
FITS = 1e-6
"""A model fits when no entry of the map is further than this from its prediction (entries are at most 1)."""
SCALE_MATCH = 1e-3
"""A fitted scale is a named candidate when within this relative distance of it."""


@dataclass(frozen=True)
class MapModel:
    """One softmax attention map: logits ``scale · (query input)(key input)ᵀ``, a mask, an axis, maybe transposed,
    times ``factor``."""

    query: str
    key: str
    mask: str
    axis: str = "keys"
    transposed: bool = False
    scale: float = 1.0
    factor: float = 1.0

    def same(self, other: MapModel) -> bool:
        """Whether two models are one: the same fields, the same scale and factor up to rounding."""
        numbers = ((self.scale, other.scale), (self.factor, other.factor))
        return self.differences(replace(other, factor=self.factor), False) == [] and all(abs(a - b) <= SCALE_MATCH * abs(b) for a, b in numbers)

    def differences(self, other: MapModel, scales_differ: bool) -> list[str]:
        """The fields in which this model differs from ``other`` (``scale`` when ``scales_differ``)."""
        fields = [name for name in ("query", "key", "mask", "axis", "transposed", "factor") if getattr(self, name) != getattr(other, name)]
        return fields + (["scale"] if scales_differ else [])


@dataclass(frozen=True)
class MapFit:
    """The model that explains a map, its scale's name (None when the fitted scale is no candidate), and its largest error."""

    model: MapModel
    scale_name: str | None
    error: float
    changes: tuple[str, ...]  # what differs from the expected model


def keep(t: int, mask: str) -> np.ndarray:
    """Which keys each query may see under ``mask`` (T×T booleans, rows are queries)."""
    below = np.arange(t)[None, :] - np.arange(t)[:, None]  # key index minus query index
    return {"none": np.ones((t, t), dtype=bool), "strict": below < 0, "upper": below >= 0}.get(mask, below <= 0)


def softmax_rows(logits: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """Softmax of each row (the last axis) over its visible entries (0 elsewhere; NaN for a row with none)."""
    masked = np.where(visible, logits, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(masked - masked.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def predict(model: MapModel, tensors: Mapping[str, np.ndarray]) -> np.ndarray:
    """The map ``model`` gives for the [T, D] inputs ``tensors``."""
    logits = model.scale * (tensors[model.query] @ tensors[model.key].T)
    t = logits.shape[0]
    visible = keep(t, model.mask)
    if model.mask == "zero":
        logits, visible = np.where(visible, logits, 0.0), np.ones((t, t), dtype=bool)
    elif model.mask == "after":
        visible = np.ones((t, t), dtype=bool)
    found = softmax_rows(logits, visible) if model.axis == "keys" else softmax_rows(logits.T, visible.T).T
    if model.mask == "after":
        found = found * keep(t, "causal")
    return model.factor * (found.T if model.transposed else found)


ZERO_SCALE = 1e-9
"""A fitted scale smaller than this in magnitude is 0: rows uniform over their visible keys (an integer division 1 // √D)."""
READABLE = 1e-9
"""The smallest weight whose logarithm the scale fits read (see :func:`_fitted_scale`)."""


def _fitted_scale(got: np.ndarray, logits: np.ndarray, visible: np.ndarray) -> float | None:
    """The s that best explains log got = s·logits + (a constant per row) over the visible entries, or None. Weights below
    :data:`READABLE` are left out of the fit (a map read out of outputs carries rounding errors of about 1e-16, which make
    the logarithm of a weight that small meaningless); :func:`error` still judges them."""
    xs, ys = [], []
    for row, (g, s, v) in enumerate(zip(got, logits, visible)):
        usable = v & np.isfinite(g) & (g > READABLE)
        if usable.sum() >= 2:
            x, y = s[usable], np.log(g[usable])
            xs.append(x - x.mean())
            ys.append(y - y.mean())
    if not xs:
        return None
    x, y = np.concatenate(xs), np.concatenate(ys)
    spread = float(x @ x)
    if spread < 1e-12:
        return None
    scale = float(x @ y) / spread
    return 0.0 if abs(scale) < ZERO_SCALE else scale  # uniform rows: the rounding of their logarithms, not a scale


def _scale_of(structure: MapModel, got: np.ndarray, tensors: Mapping[str, np.ndarray]) -> float | None:
    """The scale that fits ``got`` best for the other fields of ``structure``."""
    frame = got.T if structure.transposed else got
    logits = tensors[structure.query] @ tensors[structure.key].T
    visible = keep(len(got), "causal" if structure.mask in ("zero", "after") else structure.mask)
    if structure.axis == "queries":
        frame, logits, visible = frame.T, logits.T, visible.T
    return _fitted_scale(frame, logits, visible)


def fitted_scale(structure: MapModel, got: np.ndarray, tensors: Mapping[str, np.ndarray]) -> float | None:
    """The logit scale that explains ``got`` best for the other fields of ``structure`` (unrounded: a scale rounded to
    float32 shows), or None when no line has two usable entries."""
    return _scale_of(structure, got, tensors)


def rounded_scale(maps: Sequence[tuple[np.ndarray, Mapping[str, np.ndarray]]], structure: MapModel, right: float) -> float | None:
    """The one logit scale every map fits when it is ``right`` slightly off (by 1e-11 to 1e-6 relative, as a scale computed
    in float32 or from a constant written with too few digits is), or None. ``maps``: each map with its tensors. Maps
    computed in float32 throughout fit no one scale exactly."""
    fitted = [fitted_scale(structure, got, tensors) for got, tensors in maps]
    if not fitted or any(scale is None for scale in fitted):
        return None
    scales = [float(scale) for scale in fitted if scale is not None]
    off = max(abs(scale - right) / right for scale in scales)
    return scales[0] if 1e-11 < off < 1e-6 and max(scales) - min(scales) <= 1e-12 * right else None


def scale_slip(scale: float, right: float, operands: str) -> tuple[str, str, str]:
    """Title, evidence and advice for maps that fit softmax(s·``operands``) with ``scale`` slightly off ``right`` = 1/√D
    (:func:`rounded_scale`): rounded to float32 when it is one of float32's roundings of 1/√D or of √D, else a constant
    written with too few digits."""
    root = float(np.float32(1.0 / right))
    float32_scales = (float(np.float32(right)), 1.0 / root, float(np.float32(1.0 / np.float32(root))))
    relative = abs(scale - right) / right
    if any(abs(scale - candidate) <= 1e-12 * right for candidate in float32_scales):
        return ("The scale 1/√D is computed in float32",
                f"For float64 inputs your maps are softmax(s·{operands}) with s = {scale:.12g}: 1/√D = {right:.12g} rounded to float32 "
                f"(off by {relative:.1g} relative). A tensor made from D without a dtype (torch.tensor(d)) is float32.",
                "compute the scale as a Python float (1 / math.sqrt(D)) or in the inputs' dtype")  # fmt: skip
    return ("The logit scale is slightly off 1/√D",
            f"For float64 inputs your maps are softmax(s·{operands}) with s = {scale:.12g}, where 1/√D = {right:.12g}: off by "
            f"{relative:.1g} relative, which is not float32's rounding either, so a constant on the way to the logits has too "
            "few digits (log2(e) for exp2, √D or 1/√D written out by hand?).",
            "compute every constant in full precision: 1 / math.sqrt(D), math.log2(math.e)")  # fmt: skip


def row_scales(maps: Sequence[tuple[np.ndarray, Mapping[str, np.ndarray]]], structure: MapModel) -> np.ndarray | None:
    """The logit scale of each row of each map (``maps``: each with its tensors; [maps, T]) when every row is exactly
    ``structure``'s row at a scale of its own (softmax(s_t · q_t kᵀ) over its visible keys), or None. A row with fewer
    than two visible keys fits any scale: NaN."""
    found = []
    for got, tensors in maps:
        logits = tensors[structure.query] @ tensors[structure.key].T
        visible = keep(len(got), structure.mask)
        scales = np.full(len(got), np.nan)
        for t, (row, x, seen) in enumerate(zip(got, logits, visible)):
            if seen.sum() < 2:
                continue
            if not np.all(np.isfinite(row)) or np.any(row[seen] <= 0.0):
                return None
            scale = _fitted_scale(row[None, :], x[None, :], seen[None, :])
            if scale is None or not np.allclose(softmax_rows(scale * x[None, :], seen[None, :])[0], row, rtol=0.0, atol=FITS):
                return None
            scales[t] = scale
        found.append(scales)
    return np.array(found)


EPSILON_SPREAD = 1e-3
"""The most the ε of :func:`denominator_epsilon` may differ between rows (relative) and still be one constant."""
RENORM_EPSILON = 1e-7  # what Tensor.renorm adds to a row's norm before dividing by it
MACHINE_EPSILONS = {str(np.dtype(name)): float(np.finfo(name).eps) for name in ("float16", "float32")} | {"bfloat16": 2.0**-7}


@dataclass(frozen=True)
class DenominatorEpsilon:
    """An ε added to a softmax's sum of exponentials: its value, whether the sum was taken before subtracting the row's
    maximum (ε then shrinks with exp(−maximum)), and the largest shortfall of a row's sum from 1."""

    epsilon: float
    unshifted: bool
    shortfall: float
    exact_rows: int = 0  # rows with one key of weight, left exact


def denominator_epsilon(maps: Sequence[tuple[np.ndarray, Mapping[str, np.ndarray]]], structure: MapModel) -> DenominatorEpsilon | None:
    """The one ε that explains every map as ``structure``'s map with ε added to each row's sum of exponentials, or None.

    ``maps``: each map with its tensors. Such a map is the right one times
    S/(S + ε) in every row (S the row's sum of exponentials after its maximum
    m is subtracted; ε·e^(−m) in place of ε when the sum is taken before): rows
    proportional to the right ones, each summing to less than 1 by an amount
    that gives the same ε in every row. Rounding gives neither a shortfall of
    1e-12 nor one ε for every row. A row whose sum of exponentials is 1 (one
    key of weight) may be left exact: a normaliser that divides only rows of
    mass above 1 (``Tensor.renorm``'s maxnorm) leaves it so.
    """
    shifted, unshifted, shortfall, exact = [], [], 0.0, 0
    for got, tensors in maps:
        logits = structure.scale * (tensors[structure.query] @ tensors[structure.key].T)
        visible = keep(len(got), structure.mask)
        if got.shape != logits.shape or not np.isfinite(got).all():
            return None
        peaks = np.where(visible, logits, -np.inf).max(axis=1, keepdims=True)
        weights = np.where(visible, np.exp(np.minimum(logits - peaks, 0.0)), 0.0)
        sums = weights.sum(axis=1)
        right = weights / sums[:, None]
        rows = got.sum(axis=1)
        alone = (sums == 1.0) & (np.abs(rows - 1.0) <= 1e-12)
        short = ~alone
        if not (rows[short] < 1.0 - 1e-12).all() or np.abs(got - rows[:, None] * right).max() > 1e-12:
            return None
        exact += int(alone.sum())
        shortfall = max(shortfall, float((1.0 - rows[short]).max(initial=0.0)))
        per_row = sums[short] * (1.0 / rows[short] - 1.0)
        shifted.append(per_row)
        unshifted.append(per_row * np.exp(peaks[short, 0]))
    for found, before in ((np.concatenate(shifted), False), (np.concatenate(unshifted), True)):
        if len(found) > 1 and np.ptp(found) <= EPSILON_SPREAD * found.mean():
            return DenominatorEpsilon(float(found.mean()), before, shortfall, exact)
    return None


def epsilon_slip(found: DenominatorEpsilon, dtype: str) -> tuple[str, str, str, str]:
    """Component, title, evidence and advice for maps whose softmax adds ``found``'s ε to its sum (:func:`denominator_epsilon`)
    in ``dtype`` inputs: the component is the dtype's when ε is the machine epsilon of a coarser dtype, else the softmax's."""
    where = "before subtracting the row's maximum (so ε·e^(−max) in effect)" if found.unshifted else "after subtracting the row's maximum"
    evidence = (f"Read out of your output with one-hot values ({dtype} inputs), every row of the map is the softmax's times S/(S + ε), "
                f"S the row's sum of exponentials taken {where}, with one ε = {found.epsilon:.3g} for every row: the weights of a row sum "
                f"to less than 1, by up to {found.shortfall:.2g}.")  # fmt: skip
    if found.exact_rows:
        evidence += (f" {found.exact_rows} row{'s' if found.exact_rows > 1 else ''} with a single key of weight (a sum of 1) "
                     f"{'are' if found.exact_rows > 1 else 'is'} left exact: only rows of larger sums are divided.")
        if abs(found.epsilon - RENORM_EPSILON) <= EPSILON_SPREAD * RENORM_EPSILON:
            evidence += " Tensor.renorm does both: it divides by the norm + 1e-7, and only rows whose norm exceeds maxnorm."
    coarser = [name for name, eps in MACHINE_EPSILONS.items() if name != dtype and abs(found.epsilon - eps) <= EPSILON_SPREAD * eps]
    if coarser and not found.unshifted:
        return ("dtype", f"The softmax adds {coarser[0]}'s machine epsilon to its sums for {dtype} inputs",
                evidence + f" That ε is torch.finfo(torch.{coarser[0]}).eps: a constant taken from another dtype than the inputs'.",
                "take any such constant from the inputs' dtype (torch.finfo(q.dtype)), or drop the guard: once the row's maximum is "
                "subtracted, the sum is at least 1")  # fmt: skip
    return ("softmax", f"The softmax's denominator has ε = {found.epsilon:.3g} added",
            evidence + " An ε guarding the division changes every weight: after subtracting the row's maximum the sum is at least 1 and needs no guard.",
            "divide by the sum of exponentials alone (after subtracting the row's maximum), or use torch.softmax")  # fmt: skip


def value_rows(maps: np.ndarray, read: np.ndarray) -> np.ndarray | None:
    """The column σ(j) of one-hot values (token σ(j)'s, when below T) that each key j's weight meets, when ``read`` (an
    output read out with one-hot values, [..., T, W], W ≥ T) is ``maps`` (the true maps, [..., T, T]) with its columns moved
    so: read = maps · P, P[j, σ(j)] = 1, one σ for every leading index. None when no such σ explains it (P solved per map
    is not a one-hot row per key, or differs between maps).

    A map that is wrong in its weights (a mask, a scale, a softmax over another axis) gives no one-hot P: its rows are
    other distributions, not the true ones with weights moved to other tokens. Maps too ill-conditioned to solve tell nothing.
    """
    t = maps.shape[-1]
    flat_maps, flat_read = maps.reshape(-1, t, t), read.reshape(-1, t, read.shape[-1])
    if not (np.isfinite(flat_maps).all() and np.isfinite(flat_read).all()) or np.linalg.cond(flat_maps).max() > 1e8:
        return None
    moved = np.linalg.solve(flat_maps, flat_read)
    rows = np.rint(moved)
    if np.abs(moved - rows).max() > 1e-5 or not ((rows == 0) | (rows == 1)).all() or not (rows.sum(axis=-1) == 1).all():
        return None
    sigma = rows.argmax(axis=-1)
    return sigma[0] if (sigma == sigma[0]).all() else None


def _factor(got: np.ndarray, predicted: np.ndarray) -> float:
    """The factor f that best makes f·predicted equal got (1.0 when within FITS of it, or nothing to fit)."""
    both = np.isfinite(got) & np.isfinite(predicted)
    spread = float(predicted[both] @ predicted[both])
    if spread < 1e-12:
        return 1.0
    factor = float(got[both] @ predicted[both]) / spread
    return 1.0 if abs(factor - 1.0) <= FITS else factor


def error(model: MapModel, got: np.ndarray, tensors: Mapping[str, np.ndarray]) -> float:
    """The largest distance between ``got`` and the model's map (lines the model leaves empty are not compared)."""
    expected = predict(model, tensors)
    compared = np.isfinite(expected)
    if got.shape != expected.shape or not compared.any():
        return float("inf")
    with np.errstate(invalid="ignore"):
        gaps = np.abs(got - expected)[compared]
    return float("inf") if not np.isfinite(gaps).all() else float(gaps.max())


def normalised_axes(maps: np.ndarray) -> list[int]:
    """The axes of a stack of maps (any leading axes, then queries and keys) along which every line sums to 1.

    An axis of length 1 counts only when the maps are all ones along it (a
    softmax over it makes every weight 1).
    """
    found = []
    for axis in range(maps.ndim):
        with np.errstate(invalid="ignore"):
            sums = maps.sum(axis=axis)
        if np.isfinite(sums).all() and np.allclose(sums, 1.0, rtol=0.0, atol=FITS):
            found.append(axis)
    return found


def named_scale(scale: float, scales: Mapping[str, float]) -> str | None:
    """The name of the candidate scale within :data:`SCALE_MATCH` of ``scale``, or None."""
    for name, value in scales.items():
        if abs(scale - value) <= SCALE_MATCH * abs(value):
            return name
    return None


def explain(
    got: np.ndarray, tensors: Mapping[str, np.ndarray], expected: MapModel, sources: Sequence[tuple[str, str]],
    scales: Mapping[str, float], changes: int = 2,
) -> MapFit | None:  # fmt: skip
    """The model with the fewest changes from ``expected`` (at most ``changes``) that fits ``got``, or None.

    ``sources`` are the (query, key) input pairs the logits may come from;
    ``scales`` the candidate scales by name (the expected one among them).
    """
    if got.ndim != 2 or got.shape[0] != got.shape[1] or not np.isfinite(got).any():
        return None
    wanted = (expected.query, expected.key, expected.mask, expected.axis, expected.transposed)
    candidates = []
    for (query, key), mask, axis, transposed in itertools.product(sources, MASKS, AXES, (False, True)):
        fields = (query, key, mask, axis, transposed)
        changed = sum(a != b for a, b in zip(fields, wanted))
        if changed <= changes:
            candidates.append((changed, fields))
    for _, (query, key, mask, axis, transposed) in sorted(candidates, key=lambda pair: pair[0]):
        structure = MapModel(query, key, mask, axis, transposed, expected.scale)
        scale = _scale_of(structure, got, tensors)
        if scale is None:
            continue
        name = named_scale(scale, scales)
        model = replace(structure, scale=scales[name] if name else scale)
        model = replace(model, factor=_factor(got, predict(model, tensors)))
        changed_fields = model.differences(expected, model.scale != expected.scale)
        if len(changed_fields) > changes:
            continue
        gap = error(model, got, tensors)
        if gap <= FITS:
            return MapFit(model, name, gap, tuple(changed_fields))
    return None
