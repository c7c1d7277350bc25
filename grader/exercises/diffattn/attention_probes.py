"""The forward probes of differential_attention, and what their answers mean.

* **the maps**: with value = the identity (one-hot rows) the output *is* the
  signed map ``A1 − cA2``; at coefficients 0, ½, 2 and −½ it must be affine
  in c with the first map as intercept and minus the second as slope, and
  linear in value with one map for every column. The combination is fitted
  on the true maps (a sign, swapped branches, λ on the wrong map, an extra
  factor such as 1 − λ_init), a map that is not affine in c is matched
  against the ways λ gets into the logits or the normaliser, and each map
  the submission built is explained by
  :func:`grader.toolkit.attention_maps.explain` (mask, scale, axis,
  transposition, queries and keys of the other branch);
* **the causal flag**: with ``causal`` omitted the map must be masked, with
  False it must not be (nor normalised across heads or batch), and a
  causal=False map whose mask is right must be right in every other way;
* **which input matters**: the last token's key or value must not reach
  earlier queries under the causal mask, the second half of value must
  reach the output, each batch element's and head's value its own output
  and no other, and one head's keys no other head's output;
* **coefficient dtypes**: a 0-dim coefficient of float16, bfloat16, float32,
  int8, int16 and int32, at values whose neighbours its dtype may not hold,
  must give what the same number as a Python float gives;
* **long sequences**: float64 outputs at the probes' own T, 17, 33, 65, 100 and 300, causal and
  not, against the oracle: a computation that is right for short sequences
  only (key blocks, chunks, a fixed buffer) says from which length, and
  whether only one causal mode;
* **wide heads**: the first map at head widths 3, 40 and 72 against the
  oracle: maps that are still distributions but wrong past some width have
  logits scaled from part of the head;
* **stability**: float32 logits of hundreds (all large, a future key far
  above the visible ones, branch 2 far from branch 1, every visible logit
  far below zero), at the probes' length and at 300 tokens, against the
  oracle.

:func:`run` runs them in that order, after randomness and before the
gradients (:mod:`grader.toolkit.findings`), and stops looking at the
forward once one has localised it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from grader.exercises.diffattn import oracle
from grader.exercises.diffattn.cases import ATTENTION, EDGE_FLOATING, EDGE_INTEGER, EXPANSIONS, INPUT_NAMES
from grader.exercises.diffattn.probes import (
    ATTENTION_GRADS, HANDLED_INPUTS, OWN_SIZES, PARAMETER_COMPONENTS, ProbeSizes, attention_subject, attention_values, coefficients_as, identity_values, probed_at,
    scales, sizes, truth,
)  # fmt: skip
from grader.toolkit import attention_maps, domain, findings, probes
from grader.toolkit.findings import (
    FLOAT32_LIKE, Found, GradientRun, gradients_probe, is_right, layout_probe, listed, precision_finding, randomness_probe, unexplained_maps,
    half_precision_finding, causal_nan_finding, causal_path_first, rounding_probe,
)  # fmt: skip
from grader.toolkit.attention_maps import MapModel
from grader.toolkit.domain import exact
from grader.toolkit.probes import Layout, Perturbation, Values
from grader.worker.client import Worker

COEFFICIENTS = (0.0, 0.5, 2.0, -0.5)  # the readouts' coefficients: that the map is affine in c, negative c (a clamp) included
_SPOKEN = [{0.5: "½", -0.5: "−½"}.get(c, f"{c:g}".replace("-", "−")) for c in COEFFICIENTS]
AT_COEFFICIENTS = f"λ = {', '.join(_SPOKEN[:-1])} and {_SPOKEN[-1]}"  # how the messages name the readouts' coefficients
SHARED_OFFSET = 3.0  # added to every value of the offset readout: the output must move by (1 − λ) times it
UNROUNDED = 0.3  # a coefficient float32 cannot hold: a readout at it tells a coefficient rounded to float32
# The gradient comparisons, in turn: every input requiring grad; queries frozen; value frozen; only value and
# the coefficient; a Python-float coefficient; a zero coefficient.
FROZEN_RUNS = ((ATTENTION_GRADS, None), (("k1", "k2", "value", "coefficient"), None), (("q1", "k1", "q2", "k2", "coefficient"), None),
               (("value", "coefficient"), None), (INPUT_NAMES, None), (ATTENTION_GRADS, 0.0))  # fmt: skip
SOURCE_TEXT = {  # the logits from other inputs than q_i, k_i: component, title, what is right
    "roles": ("softmax", "Queries and keys are swapped in the logits (K Qᵀ instead of Q Kᵀ)", "the queries' rows and the keys' must not change roles"),
    "keys": ("branch", "The keys of the two branches are swapped", "each branch uses its own keys (q1 with k1, q2 with k2)"),
    "mixed": ("branch", "The two branches' queries and keys are mixed up", "each branch uses its own queries and keys (q1 with k1, q2 with k2)"),
}  # fmt: skip
SCALE_WORDS = {
    "1/D": "1/D: divided by sqrt(D) twice", "1/√(2D)": "1/sqrt(2D): D taken from value's width 2D", "1/√T": "1/sqrt(T): T is the sequence length",
    "1 (no scaling)": "no division by sqrt(D) at all", "√D": "sqrt(D): multiplied instead of divided", "2/√D": "2/sqrt(D)",
}  # fmt: skip


def _output_shape() -> tuple[int, int, int, int]:
    """The shape [B, H, T, 2D] of the output for the probes' inputs."""
    b, h, t, d = sizes()
    return (b, h, t, 2 * d)


def _read_map(out: np.ndarray | None) -> np.ndarray | None:
    """The map an output for one-hot values holds (its first T columns), or None when there is no output of the right shape."""
    return None if out is None or out.shape != _output_shape() else out[..., : sizes().t]


def _branch_words(branches: Sequence[int]) -> str:
    """"both branches" or "branch i"."""
    return "both branches" if len(branches) == 2 else f"branch {branches[0]}"


def _map_findings(found: Found, fits: Mapping[int, attention_maps.MapFit], condition: str = "") -> bool:
    """Findings for what the fitted maps of each branch change from the contract's; whether there was any. ``condition``:
    the kind of call whose maps alone are wrong (", with causal=False"), said with the branches."""
    d, t = sizes().d, sizes().t
    changes: dict[tuple[str, Any], list[int]] = {}
    for branch, fit in fits.items():
        for name in fit.changes:
            value = (fit.model.query, fit.model.key) if name in ("query", "key") else getattr(fit.model, name)
            key = ("source" if name in ("query", "key") else name, value if name != "scale" else fit.scale_name or f"{fit.model.scale:.4g}")
            if branch not in changes.setdefault(key, []):
                changes[key].append(branch)
    for (name, value), branches in changes.items():
        where = _branch_words(branches) + condition
        if name == "mask":
            title, advice = attention_maps.MASK_TEXT[value]
            found.add(ATTENTION, "mask", "forward", f"{title[0].upper()}{title[1:]} ({where})",
                      f"The map read out of your output ({where}) has {attention_maps.MASKS[value]}.", advice)
        elif name == "factor":
            named = attention_maps.named_scale(value, scales(d, t))
            component, title = ("scale", f"The weights are scaled by {named} after the softmax{condition}") if named else \
                ("coefficient", f"The map is multiplied by {value:.4g}{condition}")  # fmt: skip
            found.add(ATTENTION, component, "forward", title,
                      f"The map read out of your output ({where}) is {named or f'{value:.4g}'} times a softmax: its rows sum to that, not to 1.",
                      "scale the logits Q Kᵀ by 1/√D before the softmax, and leave the weights as the softmax gives them")  # fmt: skip
        elif name == "scale":
            said = f" ({SCALE_WORDS[value]})" if value in SCALE_WORDS else ""
            found.add(ATTENTION, "scale", "forward", f"The logits are scaled by {value} instead of 1/√D{condition}",
                      f"The map read out of your output ({where}) fits softmax(s·QKᵀ) with s = {value}{said}, not 1/√D = 1/sqrt(D) "
                      f"(D = {d}, the width of q and k).", "divide Q Kᵀ by √D once, with D = q1.shape[-1]")  # fmt: skip
        elif name == "axis":
            found.add(ATTENTION, "softmax", "forward", f"The softmax normalises over the queries, not the keys{condition}",
                      f"In the map read out of your output ({where}) the columns sum to 1, not the rows.", "use softmax(..., dim=-1), over the key axis")  # fmt: skip
        elif name == "transposed":
            # the exact transpose of a row-softmax map (columns summing to 1) comes from how the map meets value, Pᵀ V:
            # transposed logits or a softmax over another axis give other maps, which the model tells apart
            found.add(ATTENTION, "value", "forward", f"The map is applied to value transposed (Pᵀ V instead of P V){condition}",
                      f"The map read out of your output ({where}) is the transpose of the right one: its columns are the rows of softmax(QKᵀ/√D + M).",
                      "multiply the map (queries × keys) by value as it is, map @ value, with no transpose of the map in that product")  # fmt: skip
        elif name == "source":
            query, key = value
            own = {query, key} in ({"q1", "k1"}, {"q2", "k2"})
            component, title, uses = SOURCE_TEXT["roles" if own else "keys" if (query, key) in (("q1", "k2"), ("q2", "k1")) else "mixed"]
            found.add(ATTENTION, component, "forward", title + condition, f"The map read out of your output for {where} is built from {query} and {key}: {uses}.",
                      "compute the logits as q @ k.transpose(-2, -1), A1 from q1 and k1, A2 from q2 and k2")  # fmt: skip
    return bool(changes)


@dataclass(frozen=True)
class Combination:
    """How the readouts at several coefficients are made of the true maps: R(c) = a + c·b, with a = w·A, b = v·A."""

    weights: tuple[float, float, float, float]  # (a's A1 and A2 weights, b's A1 and A2 weights)
    fits: bool


def _combination(a: np.ndarray, b: np.ndarray, maps: tuple[np.ndarray, np.ndarray]) -> Combination:
    """Least squares a ≈ w1 A1 + w2 A2 and b ≈ v1 A1 + v2 A2 over every head (the finite entries of a and b)."""
    finite = np.isfinite(a.ravel()) & np.isfinite(b.ravel())
    if not finite.any():
        return Combination((0.0, 0.0, 0.0, 0.0), False)
    basis = np.stack([m.ravel()[finite] for m in maps], axis=1)
    solved = [np.linalg.lstsq(basis, x.ravel()[finite], rcond=None)[0] for x in (a, b)]
    residual = max(float(np.max(np.abs(basis @ s - x.ravel()[finite]))) for s, x in zip(solved, (a, b)))
    (w1, w2), (v1, v2) = ((float(round(w, 6)) for w in s) for s in solved)
    return Combination((w1, w2, v1, v2), residual <= attention_maps.FITS)


CONTRACT_WEIGHTS = (1.0, 0.0, 0.0, -1.0)  # a combination's weights for A1 − c·A2
NO_WEIGHTS = (0.0, 0.0, 0.0, 0.0)  # ... for a map of zeros
COMBINATIONS = {
    (1.0, 0.0, 0.0, 1.0): ("sign", "The second map is added instead of subtracted (A1 + λA2)",
                           "Read out of your output, the signed map is A1 + λ·A2: the sign of λ·A2 is wrong.", "compute (A1 − λ·A2) V"),
    (-1.0, 0.0, 0.0, 1.0): ("sign", "The signed map has the wrong sign (λA2 − A1)",
                            "Read out of your output, the signed map is λ·A2 − A1, the negative of A1 − λ·A2.", "compute (A1 − λ·A2) V"),
    (0.0, 1.0, -1.0, 0.0): ("branch", "The branches are swapped (A2 − λA1)",
                            "Read out of your output, the signed map is A2 − λ·A1: the first map is the second branch's.", "compute (A1 − λ·A2) V: λ multiplies the second map"),
    (0.0, -1.0, 1.0, 0.0): ("coefficient", "λ multiplies the first map (λA1 − A2)",
                            "Read out of your output, the signed map is λ·A1 − A2.", "compute (A1 − λ·A2) V: λ multiplies the second map only"),
    (0.0, 0.0, 1.0, -1.0): ("coefficient", "λ multiplies the whole difference (λ(A1 − A2))",
                            "Read out of your output, the signed map is λ·(A1 − A2): at λ = 0 the output is 0, not ordinary attention.", "compute (A1 − λ·A2) V: λ multiplies the second map only"),
    (1.0, 0.0, 0.0, 0.0): ("coefficient", "The second map is never subtracted",
                           "Read out of your output, the signed map is A1 whatever λ is.", "compute (A1 − λ·A2) V"),
    (1.0, 0.0, -1.0, 0.0): ("branch", "Both maps come from the first branch (A1 − λA1)",
                            "Read out of your output, the signed map is A1 − λ·A1: the second map is built from q1 and k1 too.",
                            "compute A2 from q2 and k2"),
    (0.0, 1.0, 0.0, -1.0): ("branch", "Both maps come from the second branch (A2 − λA2)",
                            "Read out of your output, the signed map is A2 − λ·A2: the first map is built from q2 and k2 too.",
                            "compute A1 from q1 and k1"),
}  # fmt: skip


def _per_element_finding(found: Found, intercept: np.ndarray, slope: np.ndarray, maps: tuple[np.ndarray, np.ndarray]) -> bool:
    """A finding when the signed map of each batch element and head is its own true maps combined, but with weights that
    differ between them (weights such as [1, −λ] broadcast along the wrong axis of maps stacked over the batch); whether it
    is. Only the weighting of the maps gives each head's own maps, exactly, with weights of its own."""
    pairs = [(b, h) for b in range(sizes().b) for h in range(sizes().h)]
    combinations = [_combination(intercept[b, h], slope[b, h], (maps[0][b, h], maps[1][b, h])) for b, h in pairs]
    weights = list(dict.fromkeys(c.weights for c in combinations))
    if not all(c.fits for c in combinations) or len(weights) < 2:
        return False
    if set(weights) == {CONTRACT_WEIGHTS, NO_WEIGHTS}:
        zero = [pair for pair, c in zip(pairs, combinations) if c.weights == NO_WEIGHTS]
        found.add(ATTENTION, "value", "forward", "Some batch elements and heads get no output: their rows are zeros",
                  f"Read out of your output, the signed maps of {len(zero)} of the {len(pairs)} (batch, head) pairs are all zeros "
                  f"(the first: batch element {zero[0][0]}, head {zero[0][1]}), and every other pair's is A1 − λ·A2: those pairs are "
                  "never computed (a loop over heads, or blocks of them, that stops before the last; an output buffer left as it "
                  "was made).",
                  "compute every (batch, head) pair: a loop in blocks needs range(0, n, block), whose last block may be partial")  # fmt: skip
        return True
    said = "; ".join(f"({w1:.3g}·A1 + {w2:.3g}·A2) + λ·({v1:.3g}·A1 + {v2:.3g}·A2)" for w1, w2, v1, v2 in weights[:2])
    found.add(ATTENTION, "coefficient", "forward", "The maps of different batch elements or heads are weighted differently",
              f"Read out of your output, each batch element's and head's signed map is made of its own two maps, but with weights "
              f"that differ between them ({said}), where every one must be A1 − λ·A2: the weights [1, −λ] reach the wrong maps "
              "(repeat where repeat_interleave is meant, or a view that interleaves the batch and the branches?).",
              "compute A1 − λ·A2 for every batch element and head, e.g. by subtracting the two maps directly")  # fmt: skip
    return True


def _combination_finding(found: Found, combination: Combination) -> bool:
    """A finding when the signed map mixes the true maps the wrong way; whether there was one."""
    w1, w2, v1, v2 = combination.weights
    if not combination.fits or combination.weights == CONTRACT_WEIGHTS:
        return False
    named = COMBINATIONS.get(combination.weights)
    if named is not None:
        component, title, evidence, advice = named
    elif w2 == 0.0 and v1 == 0.0 and abs(w1 + v2) < 1e-6 and abs(w1 - 1.0) < 1e-4:
        return False  # off by less than a real factor: rows that do not quite sum to 1 (an epsilon in a normaliser)
    elif w2 == 0.0 and v1 == 0.0 and abs(w1 + v2) < 1e-6:
        component, title = "coefficient", f"The output is multiplied by {w1:.4g}"
        factor = " (1 − λ_init, a step that belongs after the head norm, outside this function)" if round(w1, 6) in (0.8, 0.2) else ""
        evidence = f"Read out of your output, the signed map is {w1:.4g}·(A1 − λ·A2){factor}."
        advice = "return (A1 − λ·A2) V itself, with no extra factor"
    else:
        component, title = "coefficient", "The two maps are combined with the wrong weights"
        evidence = f"Read out of your output, the signed map is ({w1:.3g}·A1 + {w2:.3g}·A2) + λ·({v1:.3g}·A1 + {v2:.3g}·A2), not A1 − λ·A2."
        advice = "compute (A1 − λ·A2) V"
    found.add(ATTENTION, component, "forward", title, evidence, advice)
    return True


# How students let λ into the map other than as A1 − λA2: name, component, title, evidence, advice.
NOT_AFFINE = (
    ("divided", "softmax", "The signed map is normalised again: its rows sum to 1, not to 1 − λ",
     "the signed map is (A1 − λ·A2)/(1 − λ), the difference divided by its row sums (or by 1 − λ)",
     "return (A1 − λ·A2) V with no further normalisation or division: the rows of the signed map sum to 1 − λ by design"),
    ("logits", "branch", "One softmax of the logits' difference instead of the difference of two softmax maps",
     "the signed map is softmax(S1 − λ·S2): λ enters the logits, before one softmax", "normalise each branch on its own: A1 − λ·A2 with A_i = softmax(S_i)"),
    ("joint", "softmax", "The two maps are normalised together instead of each on its own",
     "the signed map is (E1 − λ·E2)/rowsum(E1 − λ·E2) with E_i = exp(S_i)", "apply a softmax to each branch separately, then subtract: A1 − λ·A2"),
)  # fmt: skip


def _not_affine_maps(kind: str, values: Values, c: float) -> np.ndarray:
    """The signed map of head-wise inputs when λ enters as ``kind`` says (see :data:`NOT_AFFINE`)."""
    s1, s2 = ((values[q] @ np.swapaxes(values[k], -1, -2)) / math.sqrt(sizes().d) for q, k in (("q1", "k1"), ("q2", "k2")))
    visible = attention_maps.keep(sizes().t, "causal")
    if kind == "divided":
        return (oracle.attention_maps(values["q1"], values["k1"], True) - c * oracle.attention_maps(values["q2"], values["k2"], True)) / (1.0 - c)
    if kind == "logits":
        return attention_maps.softmax_rows(s1 - c * s2, visible)
    top = np.maximum(np.where(visible, s1, -np.inf).max(axis=-1, keepdims=True), np.where(visible, s2, -np.inf).max(axis=-1, keepdims=True))
    e1, e2 = (np.where(visible, np.exp(x - top), 0.0) for x in (s1, s2))
    return (e1 - c * e2) / (e1 - c * e2).sum(axis=-1, keepdims=True)


def _in_maps(w1: float, w2: float) -> str:
    """w1·A1 + w2·A2 in words, with true minus signs."""
    return f"{w1:.4g}·A1 {'−' if w2 < 0 else '+'} {abs(w2):.4g}·A2".replace("-", "−")


def _piecewise_coefficient(found: Found, read: Sequence[np.ndarray], maps: tuple[np.ndarray, np.ndarray]) -> bool:
    """A finding when the map read at each coefficient is some combination of the true maps, A1 − c·A2 at some coefficients
    and another at the others (a coefficient handled apart by its sign or size: an abs, a clamp, a swap); whether it is.
    Negative coefficients alone wrong are the sign's fault when A1's weight changes with them, else the coefficient's."""
    fitted = [_combination(r, np.zeros_like(r), maps) for r in read]
    if not all(f.fits for f in fitted):
        return False
    right = [abs(f.weights[0] - 1.0) <= 1e-6 and abs(f.weights[1] + c) <= 1e-6 for f, c in zip(fitted, COEFFICIENTS)]
    if all(right) or not any(right):
        return False
    wrong = [(spoken, f.weights[:2], c) for f, c, spoken, ok in zip(fitted, COEFFICIENTS, _SPOKEN, right) if not ok]
    negative = {c for *_, c in wrong} == {c for c in COEFFICIENTS if c < 0}
    # the first map's weight changed too: the subtraction itself is rearranged for such λ (the branches swapped), not λ alone
    rearranged = any(abs(w1 - 1.0) > 1e-6 for _, (w1, _), _ in wrong)
    said = "; ".join(f"at λ = {spoken} it is {_in_maps(w1, w2)}, where "
                     f"{_in_maps(1.0, -c)} is right" for spoken, (w1, w2), c in wrong)
    found.add(ATTENTION, "sign" if negative and rearranged else "coefficient", "forward",
              "Negative coefficients give the wrong map" if negative else "Some coefficients give the wrong map",
              f"Read out of your output, the signed map is A1 − λ·A2 at λ = {', '.join(s for s, ok in zip(_SPOKEN, right) if ok)}; {said}: "
              + ("the sign of λ is handled apart (an abs, a clamp at 0, the branches swapped when λ < 0?), but a negative λ is valid "
                 "and adds |λ|·A2." if negative else "some values of λ are handled apart (a clamp, a special case?)."),
              "use the coefficient as it is, whatever its sign and size: (A1 − λ·A2) V")  # fmt: skip
    return True


def _not_affine(found: Found, values: Values, read: Sequence[np.ndarray], maps: tuple[np.ndarray, np.ndarray]) -> None:
    """A finding for a signed map that is not affine in λ: one of :data:`NOT_AFFINE`, a coefficient handled apart for some
    values (:func:`_piecewise_coefficient`, ``maps`` the true maps), else that it is not affine."""
    for kind, component, title, formula, advice in NOT_AFFINE:
        with np.errstate(all="ignore"):
            if all(is_right(r, _not_affine_maps(kind, values, c), attention_maps.FITS) for r, c in zip(read, COEFFICIENTS)):
                found.add(ATTENTION, component, "forward", title, f"Read out of your output at {AT_COEFFICIENTS}, {formula}, which is not affine in λ.", advice)
                return
    if _piecewise_coefficient(found, read, maps):
        return
    with np.errstate(all="ignore"):
        absolute = all(np.allclose(np.abs(r).sum(axis=-1), 1.0, atol=attention_maps.FITS) for r in read)
    if absolute:
        found.add(ATTENTION, "softmax", "forward", "The signed map is normalised by the sum of its absolute values",
                  f"Read out of your output at {AT_COEFFICIENTS}, every row of the signed map has absolute values summing to 1: it was "
                  "divided by the sum of its absolute values, where its rows must sum to 1 − λ.",
                  "return (A1 − λ·A2) V with no further normalisation: the signed map is not a probability distribution")  # fmt: skip
        return
    found.add(ATTENTION, "coefficient", "forward", "The output is not affine in the coefficient",
              f"Read out of your output at {AT_COEFFICIENTS}, the signed map does not change linearly with λ, as A1 − λ·A2 does.",
              "use the coefficient exactly once, as the factor of the second map")  # fmt: skip


def _added_coefficient(found: Found, slope: np.ndarray) -> bool:
    """A finding when λ moves every entry of the map by the same amount, future keys included: it is added, not a factor of A2."""
    finite = slope[np.isfinite(slope)]
    if finite.size == 0 or float(np.ptp(finite)) > attention_maps.FITS or abs(float(finite.mean())) <= attention_maps.FITS:
        return False
    found.add(ATTENTION, "coefficient", "forward", "λ is added to the map instead of multiplying the second map",
              f"Read out of your output, each change of λ by 1 moves every entry of the signed map by {float(finite.mean()):.4g}, "
              "for every query and key alike (masked future keys too): λ enters as a constant term, not as λ·A2.",
              "compute A1 − λ·A2: multiply the second map by λ, do not add λ to it")  # fmt: skip
    return True


def _heads(values: Values, h: int) -> dict[str, np.ndarray]:
    """The [T, D] queries and keys of head ``h``."""
    return {n: np.asarray(values[n][0, h]) for n in INPUT_NAMES[:4]}


def _explain_maps(values: Values, maps: Mapping[int, np.ndarray], causal: bool) -> dict[int, attention_maps.MapFit] | None:
    """Each branch's map explained on every head (the same model), or None when one cannot be."""
    _, h_count, t, d = sizes()
    fits: dict[int, attention_maps.MapFit] = {}
    sources = [(q, k) for q in ("q1", "q2", "k1", "k2") for k in ("k1", "k2", "q1", "q2") if q != k]
    for branch, got in maps.items():
        expected = MapModel(f"q{branch}", f"k{branch}", "causal" if causal else "none", scale=1 / math.sqrt(d))
        per_head = [attention_maps.explain(got[0, h], _heads(values, h), expected, sources, scales(d, t)) for h in range(h_count)]
        first = per_head[0]
        if first is None or any(f is None or f.changes != first.changes or not f.model.same(first.model) for f in per_head):
            return None
        fits[branch] = first
    return fits


def _show(found: Found, title: str, expected: np.ndarray, got: np.ndarray) -> None:
    """Keep a map of head 0 for the report, next to the expected one."""
    found.maps.append({"function": ATTENTION, "title": title, "expected": expected[0, 0].tolist(), "got": got[0, 0].tolist()})


def _value_finding(found: Found, plain: np.ndarray, doubled: np.ndarray, moved: np.ndarray) -> bool:
    """A finding when the output does not move when value doubles (a norm after the aggregation: not linear in value, and
    scale-free) or mixes some columns of value with another map; whether there was one."""
    t, d = sizes().t, sizes().d
    read_again = moved[..., (np.arange(t) + d) % (2 * d)]
    linear = np.allclose(doubled, 2.0 * plain, rtol=1e-6, atol=1e-9, equal_nan=True)
    return found.first(
        ATTENTION,
        (not linear and findings.scale_free(doubled, plain), "softmax", "The output is normalised after the aggregation",
         "Doubling value left the output almost as it was: (A1 − λA2)V is linear in V, so something scale-free (an RMSNorm, a layer norm) "
         "rescales the output.",
         "return (A1 − λ·A2) V itself; the head normalisation is outside this function"),
        (not np.allclose(read_again, plain[..., :t], rtol=1e-6, atol=1e-9, equal_nan=True), "value", "Different columns of value are weighted by different maps",
         "The same tokens placed in other columns of value came out with other weights: every column of value must be mixed by the one signed map.",
         "compute (A1 − λ·A2) @ value with the whole of value, not each branch with its own half"),
    )  # fmt: skip


def _offset_finding(found: Found, plain: np.ndarray, offset_out: np.ndarray) -> bool:
    """A finding when a value offset shared by every token (:data:`SHARED_OFFSET`, λ = ½) moves the output by one common
    factor other than 1 − λ, the row sum of the signed map; whether there was one. A factor of 0 is the second map
    weighted 1 (the coefficient cancels or is ignored); any other, a term outside the signed map."""
    coefficient = COEFFICIENTS[1]
    factor = probes.common_factor(plain, offset_out, SHARED_OFFSET)
    if factor is None or abs(factor - (1.0 - coefficient)) <= 1e-6:
        return False
    moved = (f"Adding {SHARED_OFFSET:g} to every token's value at λ = {coefficient:g} moved your output by {round(factor * SHARED_OFFSET, 9) + 0.0:.4g} "
             f"everywhere; each row of A1 − λ·A2 sums to 1 − λ = {1.0 - coefficient:g}, so it must move by {(1.0 - coefficient) * SHARED_OFFSET:g}")
    if abs(factor) <= 1e-6:
        return found.first(ATTENTION, (True, "coefficient", "The coefficient has no effect: the second map is weighted 1, not λ",
                                       f"{moved}: the rows of your signed map sum to 0, as A1 − A2's do (λ folded where a softmax "
                                       "cancels it, such as + log λ in the logits, or never applied).",
                                       "multiply the second branch's map by the coefficient after its softmax: A1 − λ·A2"))  # fmt: skip
    if abs(factor - (2.0 - coefficient)) <= 1e-6:  # one more than the signed map's row sum: value itself is added
        return found.first(ATTENTION, (True, "value", "The value itself is added to the output, as a residual",
                                       f"{moved}: one more than the signed map's rows give, so value reaches the output once more "
                                       "unweighted (a residual, or value passed where a zero bias or output buffer belongs, as in "
                                       "torch.baddbmm(value, P, value)).",
                                       "return (A1 − λ·A2) applied to value, and nothing else"))  # fmt: skip
    return found.first(ATTENTION, (True, "value", f"A value offset shared by every token comes out scaled by {factor:.4g}, not 1 − λ",
                                   f"{moved}: a term added or removed outside the signed map (a mean taken out of value and put back "
                                   "afterwards?) is not scaled with it.",
                                   "everything that reaches the output goes through (A1 − λ·A2) applied to value"))  # fmt: skip


def coefficients_probe(worker: Worker, rng: np.random.Generator, found: Found, coefficients: Sequence[float]) -> bool:
    """Read the signed map out at the ``coefficients`` of the value checks' wrong calls (values a rule of the file may treat
    apart: snapped to an integer, bounded, rounded): a coefficient finding when the map there is A1 − λ'·A2 with another
    λ'; whether there was one."""
    found.probes.append(f"{ATTENTION}: maps read out at the coefficients of wrong calls")
    values, t = attention_values(rng), sizes().t
    outputs = probes.sweep(worker, attention_subject(True), [{**values, "value": identity_values(), "coefficient": np.asarray(c)} for c in coefficients])
    first, second = oracle.attention_maps(values["q1"], values["k1"], True), oracle.attention_maps(values["q2"], values["k2"], True)
    for c, out in zip(coefficients, outputs):
        if out is None or out.shape[-2] != t or not np.isfinite(out).all():
            continue
        rest = out[..., :t] - first
        used = round(-float(np.sum(rest * second)) / float(np.sum(second * second)), 12) + 0.0  # (the fit's rounding off; no −0)
        if np.abs(rest + used * second).max() > attention_maps.FITS or abs(used - c) <= 1e-9 * max(1.0, abs(c)):
            continue  # not A1 − λ'·A2 (the other read-outs' to explain), or λ' = λ
        found.add(ATTENTION, "coefficient", "forward", f"The coefficient {c:.6g} is used as {used:.6g}".replace("-", "−"),
                  f"Read out of your output at λ = {c:.10g}, a coefficient a value check passed, the signed map is A1 − λ'·A2 with "
                  f"λ' = {used:.10g}: that coefficient is changed before it is used (snapped to a nearby integer, rounded, bounded?).".replace("-", "−"),
                  "use the coefficient exactly as it comes: every finite value is valid, however close to an integer or however large")  # fmt: skip
        return True
    return False


def _rounded_coefficient(found: Found, read: Sequence[np.ndarray], unrounded: np.ndarray) -> bool:
    """A coefficient finding when the map read at λ = 0.3 is A1 − λ'·A2 with λ' = 0.3 rounded to float32; whether it is."""
    a, b = read[0], (read[2] - read[0]) / (COEFFICIENTS[2] - COEFFICIENTS[0])  # λ = 0 and 2 are exact in float32
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(unrounded)
    spread = float(np.sum(b[finite] ** 2))
    if spread < 1e-12:
        return False
    used = float(np.sum((unrounded[finite] - a[finite]) * b[finite])) / spread
    rounded = float(np.float32(UNROUNDED))
    if abs(used - UNROUNDED) < 1e-11 or abs(used - rounded) > 1e-11:
        return False
    found.add(ATTENTION, "coefficient", "forward", "The coefficient is rounded to float32",
              f"For float64 inputs and λ = {UNROUNDED}, your signed map is A1 − λ'·A2 with λ' = {used:.12g}: {UNROUNDED} rounded to "
              "float32. A tensor made from the coefficient without a dtype (torch.tensor(c), torch.as_tensor(c)) is float32.",
              "use the coefficient as it is (c * A2 works for a Python float and a tensor alike), or make it a tensor with the "
              "inputs' dtype (torch.as_tensor(c, dtype=q1.dtype))")  # fmt: skip
    return True


def _with_tensors(values: Values, first_map: np.ndarray) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Each head's first map of batch element 0 with the queries and keys it comes from."""
    return [(first_map[0, h], {"q": np.asarray(values["q1"][0, h]), "k": np.asarray(values["k1"][0, h])}) for h in range(sizes().h)]


def _rounded_scale(found: Found, maps: Sequence[tuple[np.ndarray, dict[str, np.ndarray]]]) -> bool:
    """A scale finding when the first map (:func:`_with_tensors`) fits softmax(s·q1 k1ᵀ) with s slightly off 1/√D; whether it does."""
    right = 1 / math.sqrt(sizes().d)
    scale = attention_maps.rounded_scale(maps, MapModel("q", "k", "causal"), right)
    if scale is None:
        return False
    found.add(ATTENTION, "scale", "forward", *attention_maps.scale_slip(scale, right, "q1 k1ᵀ"))
    return True


def _denominator_epsilon(found: Found, maps: Sequence[tuple[np.ndarray, dict[str, np.ndarray]]]) -> bool:
    """A finding when the first map (:func:`_with_tensors`) is softmax(q1 k1ᵀ/√D + M) with an ε added to each row's sum of
    exponentials; whether it is."""
    epsilon = attention_maps.denominator_epsilon(maps, MapModel("q", "k", "causal", scale=1 / math.sqrt(sizes().d)))
    if epsilon is None:
        return False
    component, *said = attention_maps.epsilon_slip(epsilon, "float64")
    found.add(ATTENTION, component, "forward", *said)
    return True


def _first_tokens(values: Values, n: int) -> Values:
    """``values`` cut to their first ``n`` tokens (the coefficient as it is)."""
    return {name: x[:, :, :n] if x.ndim == 4 else x for name, x in values.items()}


def maps_probe(worker: Worker, rng: np.random.Generator, found: Found, layout: Layout = "contiguous") -> bool:
    """Read the signed map out at several coefficients (and value doubled, its tokens moved to other columns, and shifted
    by an offset shared by every token), the inputs in memory ``layout``, explain it; whether the forward was localised."""
    b, h, t, d = sizes()
    values = attention_values(rng)
    shifted = np.zeros((b, h, t, 2 * d))
    shifted[..., np.arange(t), (np.arange(t) + d) % (2 * d)] = 1.0
    points = [{**values, "value": identity_values(), "coefficient": np.asarray(c)} for c in COEFFICIENTS]
    points += [{**values, "value": v, "coefficient": np.asarray(COEFFICIENTS[1])} for v in (2.0 * identity_values(), shifted)]
    points.append({**values, "value": identity_values(), "coefficient": np.asarray(UNROUNDED)})
    points.append({**values, "value": identity_values() + SHARED_OFFSET, "coefficient": np.asarray(COEFFICIENTS[1])})
    found.probes.append(f"{ATTENTION}: maps read out with one-hot values, linear in value")
    outputs = [out for out in probes.sweep(worker, attention_subject(True, layout=layout), points) if out is not None and out.shape == (b, h, t, 2 * d)]
    if len(outputs) < len(points):
        return False
    doubled, shifted_out, unrounded, offset_out = outputs[len(COEFFICIENTS):]
    if _value_finding(found, outputs[1], doubled, shifted_out):
        return True
    read = [out[..., :t] for out in outputs[: len(COEFFICIENTS)]]
    if _coefficient_not_finite(found, read) or _maps_not_finite(found, read):
        return True
    true_maps = (oracle.attention_maps(values["q1"], values["k1"], True), oracle.attention_maps(values["q2"], values["k2"], True))
    intercept, slope, residual = probes.affine_fit(COEFFICIENTS, read)
    if residual > attention_maps.FITS:
        _not_affine(found, values, read, true_maps)
        return True
    if _added_coefficient(found, slope):
        return True
    combination = _combination(intercept, slope, true_maps)
    if _combination_finding(found, combination) or (not combination.fits and (
            _per_element_finding(found, intercept, slope, true_maps) or _value_rows_finding(found, outputs[: len(COEFFICIENTS)], true_maps))):
        return True
    how = f"one-hot values at {AT_COEFFICIENTS}"
    if combination.fits and combination.weights != CONTRACT_WEIGHTS:
        return _offset_finding(found, outputs[1], offset_out) or unexplained_maps(found, ATTENTION, np.stack([intercept, -slope]), how, np.stack(true_maps))
    if combination.fits:
        first = _with_tensors(values, intercept)
        return _rounded_coefficient(found, read, unrounded[..., :t]) or _rounded_scale(found, first) or _denominator_epsilon(found, first)
    fits = _explain_maps(values, {1: intercept, 2: -slope}, causal=True)
    if fits is None:
        return _offset_finding(found, outputs[1], offset_out) or \
            findings.row_scale_finding(found, ATTENTION, _with_tensors(values, intercept), MapModel("q", "k", "causal"), 1 / math.sqrt(d)) or \
            _heads_share_a_map(found, values, (intercept, -slope)) or _branches_apart(worker, values, rng, found, (intercept, -slope)) or \
            unexplained_maps(found, ATTENTION, np.stack([intercept, -slope]), how, np.stack(true_maps))  # fmt: skip
    _show(found, "First map A1 (read at λ = 0)", true_maps[0], intercept)
    return _map_findings(found, fits)


def _summed_maps(values: Values, query: str, key: str, over: tuple[int, ...]) -> list[np.ndarray]:
    """Causal softmax maps of q kᵀ summed over the axes ``over`` of (batch, head), at the scales 1/√D, 1/√(n·D) and
    1/√(B·H·D) (n the pairs summed), each broadcast back to [B, H, T, T]."""
    b, h, t, d = sizes()
    logits = (values[query] @ np.swapaxes(values[key], -1, -2)).sum(axis=over, keepdims=True)
    summed = int(np.prod([(b, h)[axis] for axis in over]))
    visible = attention_maps.keep(t, "causal")
    return [np.broadcast_to(attention_maps.softmax_rows(logits * scale, visible), (b, h, t, t))
            for scale in {1 / math.sqrt(d), 1 / math.sqrt(summed * d), 1 / math.sqrt(b * h * d)}]


def _heads_share_a_map(found: Found, values: Values, read: tuple[np.ndarray, np.ndarray]) -> bool:
    """A finding when both maps read out are softmaxes of q kᵀ summed over the heads of each batch element (``layout``:
    the heads folded into the width) or over every (batch, head) pair (``strided``: each pair's logits accumulated into one
    tensor expanded with stride 0); whether so."""
    if sizes().h < 2 or not all(np.isfinite(m).all() for m in read):
        return False

    def made(over: tuple[int, ...]) -> bool:
        return all(any(np.allclose(m, model, rtol=0.0, atol=attention_maps.FITS) for model in _summed_maps(values, q, k, over))
                   for m, (q, k) in zip(read, (("q1", "k1"), ("q2", "k2"))))  # fmt: skip

    how = f"Read out of your output with one-hot values at {AT_COEFFICIENTS}, each map is the softmax of q kᵀ summed over"
    return found.first(ATTENTION, (made((0, 1)), "strided", "Every (batch, head) pair gets the same maps: their logits share one buffer",
                                   f"{how} every batch element and head, where each pair's queries and keys must make its own: the "
                                   "logits are accumulated into memory all pairs share (an out= or an in-place baddbmm_ into a tensor "
                                   "expanded with stride 0?).",
                                   "give every (batch, head) pair memory of its own: repeat or clone an expanded tensor before writing "
                                   "into it, or compute out of place (torch.baddbmm, not baddbmm_)"),
                       (made((1,)), "layout", "Every head gets the same map: the heads are folded into the features",
                        f"{how} the heads of its batch element, where each head's queries and keys must make its own: the logits take "
                        "q·k over the features of every head at once (shapes [B, T, H·D] of the paper's pseudo-code, or heads "
                        "reshaped into the width?).",
                        "keep the heads apart: q1 @ k1.transpose(-2, -1) on [B, H, T, D] gives each head its own [T, T] logits"))  # fmt: skip


def _branches_apart(worker: Worker, values: Values, rng: np.random.Generator, found: Found, read: tuple[np.ndarray, np.ndarray]) -> bool:
    """A branch finding when both maps ``read`` out are distributions (rows that sum to 1) and a branch's map moves with the
    other branch's queries or keys: the output at λ = 0 (the first branch's alone) with q2 or k2 changed, and its change
    from λ = 0 to λ = 1 (the second branch's) with q1 or k1 changed, must stay as they were; whether one did not. (Rows
    that do not sum to 1 are a normaliser's fault, one shared by both branches' keys included.)"""
    if not all(np.allclose(m.sum(axis=-1), 1.0, rtol=0.0, atol=attention_maps.FITS) for m in read):
        return False
    changed = {name: probes.perturb(values, Perturbation(name, (...,), name), rng) for name in ("q1", "k1", "q2", "k2")}
    points = [{**point, "coefficient": np.asarray(c)} for point in (values, *changed.values()) for c in (0.0, 1.0)]
    shape = np.shape(values["value"])
    outputs = [out for out in probes.sweep(worker, attention_subject(True), points) if out is not None and out.shape == shape and np.isfinite(out).all()]
    if len(outputs) < len(points):
        return False
    first = {name: outputs[2 * i] for i, name in enumerate(("", *changed))}
    second = {name: outputs[2 * i + 1] - outputs[2 * i] for i, name in enumerate(("", *changed))}
    crossing = [f"the first map moves with {name}" for name in ("q2", "k2") if probes.moved(first[""], first[name]).any()]
    crossing += [f"the second map moves with {name}" for name in ("q1", "k1") if probes.moved(second[""], second[name]).any()]
    return found.first(ATTENTION, (bool(crossing), "branch", "A branch's map depends on the other branch's queries or keys",
                                   f"Changing one branch's queries or keys, with the other branch's left as they were: {'; '.join(crossing)} "
                                   "(the first map read at λ = 0, the second as the change from λ = 0 to λ = 1). Each map must be made of its "
                                   "own branch alone: the features of the two branches are mixed (split from a joint tensor along another "
                                   "axis, or interleaved?).",
                                   "compute A1 from q1 and k1 only and A2 from q2 and k2 only: softmax(q1 k1ᵀ/√D) and softmax(q2 k2ᵀ/√D)"))  # fmt: skip


def _value_rows_finding(found: Found, outputs: Sequence[np.ndarray], maps: tuple[np.ndarray, np.ndarray]) -> bool:
    """A value finding when both maps read out of ``outputs`` (at :data:`COEFFICIENTS`, every column of one-hot values) are
    the true ones with each key's weight moved onto another column of value (:func:`grader.toolkit.attention_maps.value_rows`),
    one way for every batch element and head; whether they are."""
    intercept, slope, residual = probes.affine_fit(COEFFICIENTS, outputs)
    if residual > attention_maps.FITS:
        return False
    moves = [attention_maps.value_rows(true, read) for true, read in zip(maps, (intercept, -slope))]
    if any(m is None for m in moves) or all((m == np.arange(len(m))).all() for m in moves if m is not None):
        return False
    width = outputs[0].shape[-1]
    halves = [m is not None and (m == (np.arange(len(m)) + width // 2) % width).all() for m in moves]
    said = [f"in the {which} map " + ("each key's weight meets the other half of value (column j ± D)" if swapped else _moved_keys(m))
            for which, m, swapped in zip(("first", "second"), moves, halves) if m is not None and not (m == np.arange(len(m))).all()]  # fmt: skip
    found.add(ATTENTION, "value", "forward", "The maps' weights meet other columns of value" if any(halves) else "The maps' weights meet other tokens' values",
              f"Read out of your output with one-hot values at {AT_COEFFICIENTS} (key j's value is 1 in column j), both maps have the right "
              f"weights, but a key's weight meets another column of value: {'; '.join(said)}. Each output row is Σ_j A[i, j]·value[σ(j)] "
              "instead of value[j]: " + ("the two halves of value (V1 and V2 of the paper's FlashDiffAttn) are swapped for that map." if any(halves)
              else "the rows of value are re-indexed before the product (a repeat_interleave where a repeat was meant, an unsqueeze on "
              "the wrong axis, a shift by one token?)."),
              "multiply each map by value as it is: the weight of key j must meet value[..., j, :], both halves in place")  # fmt: skip
    return True


def _moved_keys(sigma: np.ndarray) -> str:
    """"key 1 meets token 0's value, key 2 token 1's, …" for the keys that ``sigma`` moves (column T or later of one-hot
    values: no token's)."""
    t = len(sigma)
    moved = [(j, int(s)) for j, s in enumerate(sigma) if s != j]
    (j, s), rest = moved[0], [f"key {k} {f'token {c}' if c < t else f'column {c}'}'s" for k, c in moved[1:4]]
    more = f" and {len(moved) - 4} more" if len(moved) > 4 else ""
    return f"key {j} meets {f'token {s}' if s < t else f'column {s}'}'s value" + (f", {', '.join(rest)}" if rest else "") + more


def _coefficient_not_finite(found: Found, read: Sequence[np.ndarray]) -> bool:
    """A coefficient finding when the maps read at some of :data:`COEFFICIENTS` hold NaN or infinity and at others do not;
    whether there was one: A1 − λ·A2 is finite for every λ, so the coefficient goes through an operation defined for some
    of its values only."""
    finite = [bool(np.isfinite(r).all()) for r in read]
    if all(finite) or not any(finite):
        return False
    bad, good = ([f"{c:g}" for c, ok in zip(COEFFICIENTS, finite) if ok is wanted] for wanted in (False, True))
    found.add(ATTENTION, "coefficient", "forward", f"The output is NaN or infinite at λ = {listed(bad)}",
              f"With the same inputs, your output holds NaN or infinity at λ = {listed(bad)} and is finite at λ = {listed(good)}: "
              "the coefficient goes through an operation defined for some of its values only (a logarithm, a square root, a "
              "division by it), while A1 − λ·A2 is defined for every λ.",
              "use the coefficient only as the factor of the second map (A1 − λ·A2), for any sign and for 0")  # fmt: skip
    return True


def _maps_not_finite(found: Found, read: Sequence[np.ndarray]) -> bool:
    """A softmax finding when the maps read at every one of :data:`COEFFICIENTS` hold NaN or infinity in the same rows, and
    only in some batch elements or heads; whether there was one. The probe's logits are of ordinary size, so nothing
    overflows: the normaliser of those rows is 0 or not finite, computed from a sum or an index that does not cover every
    batch element or head (a row hidden wholly, or an overflow, would show in every map)."""
    broken = [~np.isfinite(r).all(axis=-1) for r in read]  # [B, H, T]: the rows that hold NaN or infinity
    per_map = broken[0].any(axis=-1)  # [B, H]
    if not per_map.any() or per_map.all() or any(not np.array_equal(rows, broken[0]) for rows in broken[1:]):
        return False
    batches, heads = (sorted({int(i) for i in np.flatnonzero(per_map.any(axis=axis))}) for axis in (1, 0))
    b, h = per_map.shape
    where = (f"batch element{'s' if len(batches) > 1 else ''} {listed([str(i) for i in batches])} of {b}" if per_map[batches].all() and len(batches) < b
             else f"head{'s' if len(heads) > 1 else ''} {listed([str(i) for i in heads])} of {h}" if per_map[:, heads].all() and len(heads) < h
             else f"{int(per_map.sum())} of the {b * h} (batch element, head) pairs")  # fmt: skip
    found.add(ATTENTION, "softmax", "forward", f"The attention weights are NaN or infinite in {where}",
              f"Read out of your output with one-hot values at {AT_COEFFICIENTS}, the weights of some queries in {where} are NaN or "
              "infinite, and every other map is finite, though every logit is of ordinary size: the normaliser of those rows is 0 or "
              "not finite, made from a sum or an index that does not cover every batch element and head (an index tensor shaped for "
              "the first batch element, a sum over the wrong axis?).",
              "normalise each row by the sum of its own exponentials: keep the batch and head axes in every sum and index")  # fmt: skip
    return True


def _unmasked_finding(found: Found, values: Values, read: np.ndarray) -> bool:
    """A finding for a map read with causal=False that no softmax over the keys gives: a softmax over the heads or
    the batch, or log-probabilities; whether there was one."""
    axes = [axis for axis in attention_maps.normalised_axes(read) if axis < 2]  # the batch or the heads
    axis = axes[0] if axes else 0
    logarithms = np.isfinite(read).all() and (read <= 0).all() and is_right(np.exp(read), oracle.attention_maps(values["q1"], values["k1"], False), FLOAT32_LIKE)
    return found.first(
        ATTENTION,
        (bool(axes), "softmax", f"The softmax normalises over the {('batch', 'heads')[axis]} axis (dim={axis}), not the keys",
         f"With causal=False, the map read out of your output sums to 1 across {('the batch', 'the heads')[axis]}, not along each query's row.",
         "use softmax(..., dim=-1), over the key axis"),
        (bool(logarithms), "softmax", "The map holds log-probabilities (log_softmax instead of softmax)",
         "With causal=False, the map read out of your output is the logarithm of the right one: every weight is at most 0.",
         "use torch.softmax, not torch.log_softmax"),
    )  # fmt: skip


def _second_unmasked_finding(found: Found, values: Values, first: np.ndarray | None, both: np.ndarray | None) -> bool:
    """A mask finding when, with causal=False, the first map (``first``: read at coefficient 0) is right and the second (the
    first minus ``both``, read at coefficient 1) fits the right map with another mask; whether there was one."""
    if first is None or both is None:
        return False
    if not is_right(first, oracle.attention_maps(values["q1"], values["k1"], False)):
        return False
    second = first - both
    if is_right(second, oracle.attention_maps(values["q2"], values["k2"], False)):
        return False
    fits = _explain_maps(values, {2: second}, causal=False)
    if fits is None or fits[2].changes != ("mask",):
        return False
    title, advice = attention_maps.MASK_TEXT[fits[2].model.mask]
    found.add(ATTENTION, "mask", "forward", f"With causal=False, the second branch: {title}",
              f"With causal=False, the first branch's map read out of your output is right, and the second's has "
              f"{attention_maps.MASKS[fits[2].model.mask]}: the flag does not reach the second branch (a helper's default used?).",
              f"pass causal to both branches: {advice}")  # fmt: skip
    return True


def causal_flag_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """The map with causal omitted must be the causal one, also right after a call with causal=False, and with causal=False
    the unmasked one (the second branch's too, read as the change from coefficient 0 to 1); whether any is not."""
    values = attention_values(rng)
    found.probes.append(f"{ATTENTION}: the maps with causal omitted, False, and omitted again")
    point = {**values, "value": identity_values(), "coefficient": np.asarray(0.0)}
    outcomes = probes.ask(worker, [attention_subject(causal).request(point) for causal in (None, False, None)] +
                          [attention_subject(False).request({**point, "coefficient": np.asarray(1.0)})])  # fmt: skip
    read = [_read_map(probes.output(outcome)) for outcome in outcomes]
    if _second_unmasked_finding(found, values, read[1], read[3]):
        return True
    causal_map, plain_map = (oracle.attention_maps(values["q1"], values["k1"], masked) for masked in (True, False))
    first, again = read[0], read[2]
    if first is not None and again is not None and is_right(first, causal_map) and not is_right(again, causal_map):
        found.add(ATTENTION, "mask", "forward", "A call without causal takes the flag of an earlier call",
                  "Called without causal first, the map read out of your output is the causal one; called without it again "
                  "right after a call with causal=False, it is not.",
                  "let the signature's default (causal=True) apply whenever the argument is left out: keep no flag between calls")  # fmt: skip
        return True
    localised = False
    for causal, read_map in zip((None, False), read):
        if read_map is None:
            continue
        masked = causal is None
        if is_right(read_map, causal_map if masked else plain_map):
            continue
        if findings.hidden_rows_finding(found, ATTENTION, read_map, read[1 if masked else 0], "causal omitted" if masked else "causal=False",
                                        "the map read out of your output") or (not masked and _unmasked_finding(found, values, read_map)):  # fmt: skip
            return True
        fits = _explain_maps(values, {1: read_map}, causal=masked)
        # rows summing past 1 lack keys in their normaliser (the softmax's); below 1 they may hold keys the output never
        # weighs (padding hidden only by the causal mask) as well as a wrong normaliser: that tells no part
        sums = read_map.sum(axis=-1)
        if fits is None and not masked and bool((sums > 1.0 - 1e-9).all() and (sums > 1.0 + 1e-9).any()) and \
                unexplained_maps(found, ATTENTION, read_map, "one-hot values, coefficient 0 and causal=False",
                                 plain_map, causal=False):  # fmt: skip
            return True
        if fits is not None and not masked and "mask" not in fits[1].changes:  # the mask is right, something else is not
            return _map_findings(found, fits, ", with causal=False")
        if fits is None or fits[1].changes != ("mask",):
            continue
        got = fits[1].model.mask
        if masked and got == "none":
            found.add(ATTENTION, "mask", "forward", "causal defaults to False: a call without it is not masked",
                      "When causal is left out, the map read out of your output has no mask; with causal=True it is masked.",
                      "declare `causal: bool = True`, as the contract's signature does")  # fmt: skip
            localised = True
        elif not masked:
            title, advice = attention_maps.MASK_TEXT["causal"] if got == "causal" else attention_maps.MASK_TEXT[got]
            found.add(ATTENTION, "mask", "forward", title[0].upper() + title[1:], f"With causal=False, the map read out of your output has {attention_maps.MASKS[got]}.", advice)
            localised = True
    # NaN or infinity that no fitted mask explained (a mask that hides every key, −∞ times the flag)
    return localised or causal_nan_finding(found, ATTENTION, read[0], causal_map, read[1], plain_map)


def _future(name: str, label: str) -> Perturbation:
    """The last token of ``name`` changed: under causal=True nothing of it may reach an earlier query."""
    t = sizes().t
    return Perturbation(name, (..., t - 1, slice(None)), label, forbidden=(..., slice(0, t - 1), slice(None)))


def _pairs_apart() -> tuple[Perturbation, ...]:
    """Each (batch, head) pair's values reach its own output and no other's (of the pairs the probes' sizes have)."""
    b, h = sizes().b, sizes().h
    batches = (Perturbation("value", (b - 1, 0), f"the value of batch element {b - 1}, head 0", required=(b - 1, 0), forbidden=(0,)),)
    heads = (Perturbation("value", (0, h - 1), f"the value of head {h - 1} in batch element 0", required=(0, h - 1), forbidden=(0, 0)),
             Perturbation("value", (0, 0), "the value of head 0 in batch element 0", required=(0, 0), forbidden=(0, h - 1)))  # fmt: skip
    return (batches if b > 1 else ()) + (heads if h > 1 else ())


def _keys_apart() -> tuple[Perturbation, ...]:
    """One head's keys reach no other head's output (with two heads or more)."""
    h = sizes().h
    return (Perturbation("k1", (0, 0), "the keys of branch 1 in head 0 of batch element 0", forbidden=(0, h - 1)),) if h > 1 else ()


def dependence_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """Perturb one input at a time: future keys and values must not reach earlier queries, all of value must matter."""
    values, d, h = attention_values(rng), sizes().d, sizes().h
    pairs, keys, future_value = _pairs_apart(), _keys_apart(), _future("value", "the last token's value")
    apart = pairs + keys
    perturbations = [
        _future("k1", "the last token's key of branch 1"),
        _future("k2", "the last token's key of branch 2"),
        future_value,
        _future("q1", "the last query of branch 1"),
        Perturbation("value", (..., slice(d, 2 * d)), "the second half of value (columns D to 2D)", required=(...,)),
        *apart,
    ]
    found.probes.append(f"{ATTENTION}: which input matters")
    effects = probes.dependence(worker, attention_subject(True), values, perturbations, rng)
    if effects is None:
        return False
    if any(e.perturbation in keys and e.leaked for e in effects):
        found.add(ATTENTION, "softmax", "forward", "The maps mix heads: attention runs over another axis than the tokens",
                  f"Changing {keys[0].label} changed the output of head {h - 1}: each (batch, head) pair's map must be its own "
                  "softmax over its T keys, e.g. not a map over the heads from inputs transposed as if they were [B, T, H, D].",
                  "the inputs are [B, H, T, D]: compute Q Kᵀ over their last two axes as they come, and the softmax over the keys (dim=-1)")  # fmt: skip
        return True
    crossing = [e.perturbation.label for e in effects if e.perturbation in pairs and e.leaked]
    if crossing:
        unused = [e.perturbation.label for e in effects if e.perturbation in pairs and e.ignored]
        found.add(ATTENTION, "value", "forward", "Values reach other batch elements or heads",
                  f"Changing {crossing[0]} changed the output of another batch element or head"
                  + (f", and changing {unused[0]} left its own output unchanged" if unused else "") + ": the maps are applied to "
                  "the values of other (batch, head) pairs, e.g. one head's values broadcast to all, or queries and keys flattened "
                  "heads-first and value batch-first.",
                  "keep [B, H, T, ·] for every tensor (flatten B and H the same way for all of them, or use batched matmul on 4-D tensors)")  # fmt: skip
        return True
    leaks = [e.perturbation.label for e in effects if e.perturbation not in apart and e.leaked]
    localised = False
    if leaks[:1] == ["the last query of branch 1"]:
        found.add(ATTENTION, "softmax", "forward", "Each query's output depends on the other queries",
                  "Changing the last query of branch 1 changed the outputs of earlier queries: the softmax normalises across queries.",
                  "use softmax(..., dim=-1), over the key axis of each query's row")  # fmt: skip
        localised = True
    elif leaks == [future_value.label] and _first_map_right(worker, values):
        found.add(ATTENTION, "value", "forward", "Value is mixed across tokens outside the map",
                  f"Under causal=True, changing {future_value.label} changed the outputs of earlier queries, while changing its keys "
                  "did not, and the map read out of your output with one-hot values is the right, causal one: value's rows reach "
                  "other tokens by another way than the map (value transposed or reshaped as if it were [B, H, 2D, T]?).",
                  "multiply the map by value as it comes, [B, H, T, 2D], with no transpose or reshape of value")  # fmt: skip
        localised = True
    elif leaks:
        found.add(ATTENTION, "mask", "forward", "Queries see future tokens: the causal mask does not hold",
                  f"Under causal=True, changing {' and '.join(leaks)} changed the outputs of earlier queries.",
                  "add −∞ to the logits of both branches where key j > query i, before the softmax")  # fmt: skip
        localised = True
    if any(e.ignored for e in effects if e.perturbation not in apart):
        found.add(ATTENTION, "value", "forward", "The second half of value never reaches the output",
                  "Changing columns D to 2D of value left the output unchanged: the output must use all 2D columns of value.",
                  "multiply the signed map by the whole of value, shape [B, H, T, 2D]")  # fmt: skip
        localised = True
    return localised or _pairs_mixed_unmasked(worker, rng, values, found)


def _first_map_right(worker: Worker, values: Values) -> bool:
    """Whether the first map read out of the output (one-hot values, coefficient 0, causal) at ``values``' queries and keys
    is the right one."""
    point = {**values, "value": identity_values(), "coefficient": np.asarray(0.0)}
    got = _read_map(probes.output(probes.ask(worker, [attention_subject(True).request(point)])[0]))
    return got is not None and is_right(got, oracle.attention_maps(values["q1"], values["k1"], True))


def _pairs_mixed_unmasked(worker: Worker, rng: np.random.Generator, values: Values, found: Found) -> bool:
    """A mask finding when, with causal=False, one (batch, head) pair's keys or values reach another's output, as they do not
    under causal=True (:func:`dependence_probe`); whether they do."""
    effects = probes.dependence(worker, attention_subject(False), values, [*_pairs_apart(), *_keys_apart()], rng)
    crossing = [e.perturbation.label for e in effects or () if e.leaked]
    if not crossing:
        return False
    found.add(ATTENTION, "mask", "forward", "With causal=False, tokens attend to other batch elements or heads",
              f"With causal=False, changing {crossing[0]} changed the output of another batch element or head, while under "
              "causal=True each (batch, head) pair is apart: what keeps the pairs apart (such as the mask between sequences packed "
              "into one axis) is made for causal calls only.",
              "keep each (batch, head) pair's keys to itself in both modes: build the mask between packed sequences whether or not causal is set")  # fmt: skip
    return True


STABLE_LENGTH = 300  # the stability probe's long calls: past key tiles of 32, 64, 128 and 256, a multiple of none
# after the probes' own length: past the block sizes 16, 32 and 64, a length no power of two is near, past 256, 512, 1024
# and 2048
LENGTHS = (17, 33, 65, 100, 300, *domain.PROBED_PAST_BUFFERS)


def _long_values(rng: np.random.Generator, tokens: int) -> dict[str, np.ndarray]:
    """Inputs of ``tokens`` tokens with one batch element and one head, of the probes' head width."""
    d = sizes().d
    values = {n: rng.standard_normal((1, 1, tokens, d)) * 1.2 for n in INPUT_NAMES[:4]}
    return {**values, "value": rng.standard_normal((1, 1, tokens, 2 * d)), "coefficient": np.asarray(0.6)}


def length_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """float64 outputs at the probes' own length and :data:`LENGTHS`, causal and not, against the oracle; whether long
    sequences alone are wrong."""
    lengths = domain.offshoot(rng, "long sequences")
    tokens = (sizes().t, *LENGTHS)
    points = [_long_values(lengths, t) for t in tokens]
    return findings.length_probe(worker, ATTENTION, attention_subject, points, tokens, truth, found, findings.TokenAxes("value", 2, 2, "value"))


WIDTHS = (8, 32, 40, 72, 192)  # after the probes' own head width: odd powers of two, where √D is none; past the slab widths 32 and 64 and the wide-head path at 128


def width_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """The first map read out (coefficient 0, one-hot values, causal=False) at the probes' own head width and :data:`WIDTHS`,
    against the oracle (:func:`~grader.toolkit.findings.width_probe`); those at least T/2 wide, for the read-out."""
    points, t = [], sizes().t
    widths = (sizes().d, *(w for w in WIDTHS if 2 * w >= t))
    for d in widths:
        value = np.zeros((1, 1, t, 2 * d))
        value[..., np.arange(t), np.arange(t)] = 1.0
        points.append({**{n: rng.standard_normal((1, 1, t, d)) for n in INPUT_NAMES[:4]}, "value": value, "coefficient": np.asarray(0.0)})
    return findings.width_probe(worker, ATTENTION, attention_subject(False), points, widths, lambda point: truth(point, False), t,
                                "coefficient 0, one-hot values and causal=False", found)


def coefficient_dtypes_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """The probes' float64 inputs with a 0-dim coefficient of each other dtype the contract allows, at values that dtype holds
    but whose neighbours it may not: float16, bfloat16 and float32 at a value whose 1 − c and 1 + c they cannot hold
    (:func:`domain.inexact_complement`), int8, int16 and int32 at both ends of their range (:func:`domain.integer_ends`),
    each also as a Python float; a coefficient finding when some dtypes are wrong where their Python floats are right (the
    coefficient's own dtype used for arithmetic that it cannot hold). Whether there was one."""
    values = attention_values(rng)
    tried = [(dtype, domain.inexact_complement(rng, dtype)) for dtype in EDGE_FLOATING]
    tried += [(dtype, float(end)) for dtype in EDGE_INTEGER for end in domain.integer_ends(dtype)]
    found.probes.append(f"{ATTENTION}: 0-dim coefficients of every dtype the contract allows")
    requests = []
    for dtype, c in tried:
        point = {**values, "coefficient": np.asarray(c)}
        for kind in (dtype, "float"):
            with coefficients_as(kind):
                requests.append(attention_subject(True).request(point, ()))
    outs = [probes.output(o) for o in probes.ask(worker, requests)]
    expected = [truth({**values, "coefficient": np.asarray(c)}, True) for _, c in tried]
    wrong = [(dtype, c) for n, ((dtype, c), truth_n) in enumerate(zip(tried, expected))
             if not is_right(outs[2 * n], truth_n) and is_right(outs[2 * n + 1], truth_n)]
    if not wrong:
        return False
    right = [(dtype, c) for dtype, c in tried if (dtype, c) not in wrong]

    def said(pairs: Sequence[tuple[str, float]]) -> str:
        """Coefficients in words: "int8 -127, int16 -32767"."""
        return ", ".join(f"{dtype} {c:.10g}" for dtype, c in pairs)

    found.add(ATTENTION, "coefficient", "forward", "A coefficient of another dtype than the inputs' gives wrong values",
              f"With float64 inputs your output is wrong for a 0-dim coefficient tensor of {said(wrong)}, and right for the same "
              f"numbers passed as Python floats" + (f", and right for tensors of {said(right)}" if right else "") + ": a "
              "coefficient tensor of those dtypes is not taken as the number it holds (arithmetic on it in its own dtype, such as "
              "1 − c or −c, rounds or wraps around where the inputs' dtype would not; or a path taken for such tensors is wrong).",
              "convert the coefficient to the inputs' dtype before any arithmetic on it: torch.as_tensor(coefficient, dtype=q1.dtype)")  # fmt: skip
    return True


def zero_rows_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """:func:`~grader.toolkit.findings.padding_probe` on the maps: every key of each branch equal, the first key and one
    query of each branch all zeros, then the first token's value all zeros, against ordinary queries and keys with one-hot
    values."""
    values = attention_values(rng)
    ordinary = {**values, "value": identity_values(), "coefficient": np.asarray(0.0)}
    zero_logits = dict(ordinary)
    for n, token in (("q1", sizes().t // 2), ("q2", sizes().t // 2), ("k1", 0), ("k2", 0)):
        zero_logits[n] = domain.padded(values[n], [token], axis=2)
    zero_value = {**ordinary, "value": domain.padded(identity_values(), [0], axis=2)}
    tied = {**ordinary, **{n: domain.tied(values[n], axis=2) for n in ("k1", "k2")}}
    return findings.padding_probe(worker, ATTENTION, attention_subject(True), ordinary, zero_logits, zero_value, tied,
                                  lambda v: truth(v, True), found)  # fmt: skip


def _large(rng: np.random.Generator, kind: str, tokens: int | None = None) -> dict[str, np.ndarray]:
    """float32-exact inputs whose scaled logits reach hundreds, arranged as ``kind`` says (a kind of
    :data:`~grader.toolkit.probes.LARGE_LOGITS`, both branches alike, or "branches": branch 2's far from branch 1's): the
    probes' own inputs, or with ``tokens``, those of :func:`_long_values`."""
    values = attention_values(rng) if tokens is None else _long_values(rng, tokens)
    direction = rng.standard_normal(sizes().d)
    direction /= np.linalg.norm(direction)
    if kind == "branches":
        values["q2"] = values["q2"] * 150.0
    else:
        for q, k in (("q1", "k1"), ("q2", "k2")):
            values[q], values[k] = probes.large_logits(values[q], values[k], kind, direction, -2, 120.0)
    return {n: exact(v, "float32") for n, v in values.items()}


def _far_future(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs whose last key's logit, hidden from every earlier query, is about 900 above their visible ones: exp of it
    overflows even in float64, so a backward pass that meets it anywhere (a mask applied after the exponential) is not finite."""
    values = _large(rng, "future")
    for n in ("k1", "k2"):
        values[n][..., -1, :] *= 3.0
    return values


FALLING = 100  # tokens: blocks of 32 or 64 keys whose largest logits lie hundreds apart


def _falling_logits_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """float32 logits that fall from about 300 to −300 along :data:`FALLING` keys, against the oracle; whether the output is
    wrong there (an online softmax whose running maximum is replaced by each block's own: exp(old − new) overflows) and
    right for ordinary logits of the same shape."""
    d = sizes().d
    direction = rng.standard_normal(d)
    direction /= np.linalg.norm(direction)
    heights = (300.0 - 6.0 * np.arange(FALLING)) * math.sqrt(d) / 20.0  # query·key/√D ≈ 20·height/√D
    values = {n: (np.broadcast_to(direction * 20.0, (1, 1, FALLING, d)) + 0.1 * rng.standard_normal((1, 1, FALLING, d))
                  if n.startswith("q") else heights[:, None] * direction + 0.1 * rng.standard_normal((1, 1, FALLING, d)))
              for n in INPUT_NAMES[:4]}  # fmt: skip
    values |= {"value": rng.standard_normal((1, 1, FALLING, 2 * d)), "coefficient": np.asarray(0.6)}
    values = {n: exact(v, "float32") for n, v in values.items()}
    ordinary = {n: exact(v, "float32") for n, v in _long_values(rng, FALLING).items()}
    found.probes.append(f"{ATTENTION}: float32 logits falling from 300 to −300 along {FALLING} keys, and ordinary ones")
    out, plain = probes.sweep(worker, attention_subject(True, "float32"), [values, ordinary])
    if is_right(out, truth(values, True), FLOAT32_LIKE) or not is_right(plain, truth(ordinary, True), FLOAT32_LIKE):
        return False  # (ordinary logits of this shape wrong too: the fault is not the large logits')
    bad = findings.failure_words(out)
    found.add(ATTENTION, "stability", "forward", "The softmax is not numerically stable when the logits fall along the keys",
              f"With float32 logits that fall from about 300 to −300 along {FALLING} keys, your output is {bad}, while logits of hundreds "
              f"over a few keys and ordinary logits along {FALLING} keys give the right output: blocks of keys whose largest logits lie far apart (an online "
              "softmax's running maximum replaced by each block's own maximum?).",
              "keep the running maximum m = max(m, block maximum) and rescale by exp(old m − new m), which is then at most 1")  # fmt: skip
    return True


def stability_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """float32 calls with logits of hundreds (a future one of ten thousands) against the oracle, at the probes' length and
    at :data:`STABLE_LENGTH` tokens (past key tiles whose partial results a tiled softmax merges), then, where all are
    right, a float64 call whose visible logits lie below finite mask constants
    (:func:`~grader.toolkit.findings.below_masks_finding`); whether one fails."""
    kinds, tokens = {**probes.LARGE_LOGITS, "branches": "branch 2's logits are far from branch 1's"}, sizes().t
    future = Perturbation("value", (..., tokens - 1, 0), "the first feature of the last token's value", forbidden=(..., slice(0, tokens - 1), slice(None)))
    cases = {(kind, tokens): _large(rng, kind) for kind in kinds} | {(kind, STABLE_LENGTH): _large(rng, kind, STABLE_LENGTH) for kind in kinds}
    ordinary, ordinary_long = ({n: exact(x, "float32") for n, x in point.items()} for point in (attention_values(rng), _long_values(rng, STABLE_LENGTH)))
    found.probes.append(f"{ATTENTION}: float32 logits of hundreds, and of ordinary size, at {tokens} and {STABLE_LENGTH} tokens")
    *outputs, plain, plain_long = probes.sweep(worker, attention_subject(True, "float32"), [*cases.values(), ordinary, ordinary_long])
    if half_precision_finding(worker, attention_subject(True, "float32"), ordinary, found, plain, truth(ordinary, True)):
        return True
    if not is_right(plain, truth(ordinary, True), FLOAT32_LIKE):
        return False  # (ordinary float32 logits wrong too, or raising: large ones tell nothing of stability)
    judged = [tokens] + ([STABLE_LENGTH] if is_right(plain_long, truth(ordinary_long, True), FLOAT32_LIKE) else [])  # likewise per length
    wrong, failing, bad = findings.large_logit_failures(kinds, cases, outputs, judged, tokens, lambda out, values: not is_right(out, truth(values, True), FLOAT32_LIKE))
    if not failing:
        return findings.unmasked_large_logits_finding(worker, attention_subject(False, "float32"), kinds, cases, [ordinary, ordinary_long], tokens,
                                                      lambda point: truth(point, False), found, STABLE) or \
            findings.below_masks_finding(worker, attention_subject(True), below := _below_masks(rng), truth(below, True),
                                         lambda point: probes.leaks(worker, attention_subject(True, "float64"), [point], future, rng), found, STABLE) or \
            _falling_logits_probe(worker, rng.spawn(1)[0], found)  # fmt: skip
    leaked = bad == "wrong" and probes.leaks(worker, attention_subject(True, "float32"), [cases[key] for key in wrong if key[1] == tokens], future, rng)
    findings.large_logit_finding(found, ATTENTION, failing, bad, leaked, STABLE)
    return True


STABLE = "subtract each row's maximum over its visible keys, per branch, before exp (or use torch.softmax)"


def _below_masks(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The probes' inputs with every scaled logit about −:data:`~grader.toolkit.findings.BELOW_MASKS` (float64)."""
    values = attention_values(rng)
    for q, k in (("q1", "k1"), ("q2", "k2")):
        values[q], values[k] = domain.far_below(values[q], values[k], findings.BELOW_MASKS)
    return values


REARRANGED = ("return [B, H, T, 2D] as (A1 − λ·A2) @ value gives it: move axes with transpose or permute, not reshape or view, "
              "and put value's halves back in their order")
"""What to do when the output holds the right numbers in other places."""
PERMUTED = " with inputs, and so the incoming gradient, stored heads and tokens swapped (an output read through transpose(1, 2))"
LONG = findings.LONG_RUN_TOKENS
TIED = " with q2 equal to q1 and k2 to k1 in value (tied branches, as from one initialisation)"


def _long_run(rng: np.random.Generator, tokens: int = LONG, causal: bool = True) -> GradientRun:
    """The gradients at ``tokens`` tokens (one batch element and head): a backward pass computed in blocks of queries or
    keys goes wrong only past its first block (without the mask, past :data:`domain.ONE_PAST_BLOCKS` tokens, one that
    recomputes each block of queries against the keys before its end only). Drawn from a generator spawned from ``rng``,
    which leaves ``rng``'s own draws (the earlier runs' directions) as they were."""
    rng = rng.spawn(1)[0]
    d = sizes().d
    values = {n: rng.standard_normal((1, 1, tokens, d)) for n in INPUT_NAMES[:4]}
    values |= {"value": rng.standard_normal((1, 1, tokens, 2 * d)), "coefficient": np.asarray(0.6)}
    return findings.long_run(values, ATTENTION_GRADS, rng.standard_normal((1, 1, tokens, 2 * d)), tokens, causal, attention_subject(False), truth)


STALE_PARTS = {"coefficient": "coefficient", "value": "value"}
"""The inputs whose part of the answer is named when a call answers with that input of an earlier call (stale_input_probe)."""


def run(worker: Worker, rng: np.random.Generator, found: Found, forward: bool, gradients: bool, source: str | None,
        replayed: Sequence[tuple[str, ...]] = ()) -> None:  # fmt: skip
    """The attention probes: randomness first (it spoils the others), then the forward (``forward``: a value check failed),
    then the gradients (``gradients``: a gradient check failed; also with each set of inputs requiring grad of ``replayed``,
    those of the checks' calls whose output came back cut off from autograd)."""
    values = attention_values(rng)
    base = randomness_probe(worker, attention_subject(True), values, ATTENTION_GRADS, found, source)
    if base is None:
        return
    if forward and not is_right(base, truth(values, True)) and rounding_probe(worker, attention_subject(True), values, base, found):
        return  # rounded to a lower precision: what the other probes would read out of the output, or differentiate, is its noise
    if forward and is_right(base, truth(values, True)) and findings.stale_input_probe(
            worker, attention_subject(True), values, attention_values(rng.spawn(1)[0]), lambda v: truth(v, True), STALE_PARTS, found):
        forward = False  # the rest would read the kept part's answers
    if forward:
        right = is_right(base, truth(values, True))
        # made as the base is (inputs requiring grad): a fault of one kind of call must not read as one of the causal flag
        unmasked = None if right else probes.output(probes.ask(worker, [attention_subject(False).request(values, ATTENTION_GRADS)])[0])
        since = len(found.findings)
        localised = findings.rearranged_finding(found, ATTENTION, base, truth(values, True), "value", REARRANGED) or \
            causal_nan_finding(found, ATTENTION, base, truth(values, True), unmasked, truth(values, False)) or maps_probe(worker, rng, found)  # fmt: skip
        localised = causal_path_first(found, ATTENTION, since, base, truth(values, True), unmasked, truth(values, False), lambda n: probes.output(
            probes.ask(worker, [attention_subject(False).request(_first_tokens(values, n), ATTENTION_GRADS)])[0]), 2) or localised  # fmt: skip
        localised = localised or causal_flag_probe(worker, rng, found) or dependence_probe(worker, rng, found)
        if right and not localised:
            coefficient_dtypes_probe(worker, domain.offshoot(rng, "coefficient dtypes"), found) or length_probe(worker, rng, found) or \
                width_probe(worker, rng.spawn(1)[0], found) or stability_probe(worker, rng, found) or zero_rows_probe(worker, rng, found) or \
                findings.value_edges_probe(worker, attention_subject(True, "float32"), {n: exact(x, "float32") for n, x in values.items()}, "value", 1,
                                           lambda v: truth(v, True), rng, found) or \
                layout_probe(worker, attention_subject, values, found, EXPANSIONS, PARAMETER_COMPONENTS[ATTENTION],
                             within=functools.partial(maps_probe, worker, domain.offshoot(rng, "maps in a layout"), found))  # fmt: skip
        elif not localised:
            precision_finding(found, ATTENTION, base, truth(values, True)) or precision_finding(found, ATTENTION, unmasked, truth(values, False))
    if gradients:
        # a fault first shown at coefficient 0 is how the function treats that coefficient (a shortcut, a division by it); one
        # first shown past exp's range, how it keeps exp finite
        runs = [GradientRun(values, grads) if c is None else
                GradientRun({**values, "coefficient": np.asarray(c)}, grads, f" at coefficient {c:g}", "coefficient") for grads, c in FROZEN_RUNS]
        runs += findings.replayed_runs(values, replayed, (grads for grads, _ in FROZEN_RUNS))
        runs.append(GradientRun(_far_future(rng), ATTENTION_GRADS, " when a future key's logit is about 900 above the visible ones", "stability"))
        runs += [GradientRun(values, ATTENTION_GRADS, " with causal=False", subject=attention_subject(False)), _long_run(rng),
                 GradientRun(values, ATTENTION_GRADS, PERMUTED, subject=attention_subject(True, layout="heads_permuted")),
                 GradientRun({**values, "q2": values["q1"], "k2": values["k1"]}, ATTENTION_GRADS, TIED),
                 _long_run(rng, domain.ONE_PAST_BLOCKS, causal=False)]
        runs += findings.expanded_runs(values, ATTENTION_GRADS, lambda layout: attention_subject(True, layout=layout), EXPANSIONS)
        gradients_probe(worker, attention_subject(True), runs, rng.standard_normal(_output_shape()), rng, found, source, HANDLED_INPUTS)


def resized_run(worker: Worker, rng: np.random.Generator, found: Found, called: ProbeSizes, chosen: ProbeSizes, public: bool) -> None:
    """The forward probes again with inputs of ``chosen`` sizes: those of a value check's call that failed (``called``) where
    the probes' own sizes show nothing wrong (a path taken for one batch element, for many heads, ...), with the head width
    raised where the read-out needs it. Each finding says at which sizes; when they are a hidden check's (not ``public``),
    students see neither the findings nor the sizes in the probes' list, and no map is kept to show."""
    since, probes_before, maps_before = len(found.findings), len(found.probes), len(found.maps)
    with probed_at(chosen):
        run(worker, rng, found, forward=True, gradients=False, source=None)
    at = f"[B, H, T, D] = [{', '.join(map(str, chosen))}]"
    found.probes[probes_before:] = [f"{probe}, at {at if public else 'the sizes of a hidden check'}" for probe in found.probes[probes_before:]]
    if not public:
        del found.maps[maps_before:]
    raised = f" with the head width raised from {called.d} to {chosen.d} for the one-hot read-out" if called != chosen else ""
    said = (f"These probes ran at {at}, the sizes of a call a value check failed on{raised} (at the probes' own sizes, "
            f"[{', '.join(map(str, OWN_SIZES))}], nothing is wrong). ")
    found.findings[since:] = [replace(f, title=f"{f.title}, at {at}", evidence=said + f.evidence, public=f.public and public)
                              for f in found.findings[since:]]
