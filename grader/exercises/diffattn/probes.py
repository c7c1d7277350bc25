"""The probes of differential attention: what they call, on which inputs, and what the answers mean.

The harness's probes (:mod:`grader.toolkit.probes`) call a function through a
:class:`Subject`; this module declares the two subjects, draws small float64
inputs of its own (B = 1, H = 2, T = 5, D = 3, so that 2D ≥ T and the
candidate scales 1/√D, 1/D, 1/√(2D), 1/√T differ), and turns the answers into
findings (:class:`grader.toolkit.rootcause.Finding`):

* **randomness**: two identical calls must agree;
* **the maps**: with value = the identity (one-hot rows) the output *is* the
  signed map ``A1 − cA2``; at coefficients 0, ½, −½ and 2 it must be affine
  in c with the first map as intercept and minus the second as slope.
  The combination is fitted on the true maps (a sign, swapped branches, λ on
  the wrong map, an extra factor such as 1 − λ_init, a division by 1 − λ),
  and each map the submission built is explained by
  :func:`grader.toolkit.attention_maps.explain` (mask, scale, axis,
  transposition, keys of the other branch); with ``causal`` omitted and
  False the mask must be the default's and none;
* **which input matters**: the last token's key or value must not reach
  earlier queries under the causal mask, the second half of value must
  reach the output, a linear function of value must stay linear;
* **stability**: float32 logits of hundreds (all large, a future key far
  above the visible ones, branch 2 far from branch 1, every visible logit
  far below zero) against the oracle;
* **precision**: float64 results only as accurate as float32;
* **forward or backward**: the gradients against finite differences of the
  submission's own forward, also with some inputs frozen and at a zero
  coefficient;
* for differential_lambda: λ at zero vectors (lambda_init given and
  omitted) and along a line in each exponent, which must follow
  ``exp(q1·k1) − exp(q2·k2) + λ_init``; every vector must matter; exponents
  of ±60 in float32 and 100 in float64 must stay finite and right.

Every probe's inputs are the probes' own, so what they show may be shown to
students.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from grader.core.invoke import Argument, Call, Request, TensorInput
from grader.exercises.diffattn import oracle
from grader.exercises.diffattn.cases import ATTENTION, INPUT_NAMES, LAMBDA, LAMBDA_NAMES
from grader.toolkit import attention_maps, probes
from grader.toolkit.attention_maps import MapModel
from grader.toolkit.domain import exact
from grader.toolkit.probes import Built, Consistency, Perturbation, Subject, Values
from grader.toolkit.rootcause import Finding
from grader.worker.client import Worker

B, H, T, D = 1, 2, 5, 3
COEFFICIENTS = (0.0, 0.5, -0.5, 2.0)
RIGHT = 1e-9  # a float64 probe's output is right within this share of its largest true magnitude
FLOAT32_LIKE = 1e-4  # ... and only as accurate as float32 when off by at most this share
LAMBDA_INIT = 0.37
LINE = (-0.8, 0.5, 1.2)
ATTENTION_GRADS = (*INPUT_NAMES, "coefficient")
# Gradient comparisons: every input requiring grad; queries frozen; value frozen; only value and coefficient; a zero coefficient.
FROZEN_RUNS = ((ATTENTION_GRADS, None), (("k1", "k2", "value", "coefficient"), None),
               (("q1", "k1", "q2", "k2", "coefficient"), None), (("value", "coefficient"), None), (ATTENTION_GRADS, 0.0))  # fmt: skip
LAMBDA_RUNS = (LAMBDA_NAMES, ("k1", "k2"))
FORWARD_NOTE = "the forward output of these calls is already wrong, so their gradients cannot match; fix the values first"
VALUES_AND_GRADIENTS = frozenset({"values", "gradients"})
NO_GRAPH = "does not require grad"  # how torch says a backward pass found no graph: a check failing so suffers a cut path


def scales(d: int, t: int) -> dict[str, float]:
    """The logit scales students use, by name, the contract's first."""
    return {"1/√D": 1 / math.sqrt(d), "1/D": 1 / d, "1/√(2D)": 1 / math.sqrt(2 * d), "1/√T": 1 / math.sqrt(t),
            "1 (no scaling)": 1.0, "√D": math.sqrt(d), "2/√D": 2 / math.sqrt(d)}  # fmt: skip


# ---- requests ------------------------------------------------------------------------------------


def _attention_request(values: Values, grads: tuple[str, ...], cotangent: np.ndarray | None, causal: bool | None, dtype: str) -> Built:
    """differential_attention(q1, k1, q2, k2, value, coefficient[, causal=...]); a tensor coefficient when its gradient is wanted."""
    tensors = [TensorInput(exact(values[n], dtype), dtype, n in grads) for n in INPUT_NAMES]
    coefficient: Any = float(values["coefficient"])
    if "coefficient" in grads:
        coefficient = TensorInput(exact(values["coefficient"], dtype), dtype, True)
        tensors.append(coefficient)
    call = Call(ATTENTION, (*tensors[:5], coefficient), {} if causal is None else {"causal": causal})
    positions = {n: i for i, n in enumerate(ATTENTION_GRADS) if n in grads}
    if cotangent is None:
        return Built(Request((call,), inputs=tuple(tensors)), positions)
    return Built(Request((call,), backward_from=0, cotangent=exact(cotangent, dtype), inputs=tuple(tensors)), positions)


def attention_subject(causal: bool | None = True, dtype: str = "float64") -> Subject:
    """differential_attention with ``causal`` given (None: omitted), inputs in ``dtype``."""
    return Subject(ATTENTION, lambda values, grads, cotangent: _attention_request(values, grads, cotangent, causal, dtype))


def _lambda_request(values: Values, grads: tuple[str, ...], cotangent: np.ndarray | None, dtype: str) -> Built:
    """differential_lambda(q1, k1, q2, k2[, lambda_init=...]): lambda_init passed when the values hold one."""
    tensors = tuple(TensorInput(exact(values[n], dtype), dtype, n in grads) for n in LAMBDA_NAMES)
    kwargs: dict[str, Argument] = {"lambda_init": float(values["lambda_init"])} if "lambda_init" in values else {}
    call = Call(LAMBDA, tensors, kwargs)
    positions = {n: i for i, n in enumerate(LAMBDA_NAMES) if n in grads}
    if cotangent is None:
        return Built(Request((call,), inputs=tensors), positions)
    return Built(Request((call,), backward_from=0, cotangent=exact(cotangent, dtype), inputs=tensors), positions)


def lambda_subject(dtype: str = "float64") -> Subject:
    """differential_lambda with vectors in ``dtype``."""
    return Subject(LAMBDA, lambda values, grads, cotangent: _lambda_request(values, grads, cotangent, dtype))


# ---- inputs --------------------------------------------------------------------------------------


def attention_values(rng: np.random.Generator, spread: float = 1.2) -> dict[str, np.ndarray]:
    """Queries and keys of logits about ``spread`` in size, values, and a coefficient of 0.6."""
    found = {n: rng.standard_normal((B, H, T, D)) * spread for n in INPUT_NAMES[:4]}
    return {**found, "value": rng.standard_normal((B, H, T, 2 * D)), "coefficient": np.asarray(0.6)}


def identity_values() -> np.ndarray:
    """Value whose token t is the one-hot row e_t: the output is then the signed map (its first T columns)."""
    value = np.zeros((B, H, T, 2 * D))
    value[..., np.arange(T), np.arange(T)] = 1.0
    return value


def truth(values: Values, causal: bool) -> np.ndarray:
    """The oracle's output for probe inputs."""
    q1, k1, q2, k2, value = (values[n] for n in INPUT_NAMES)
    return oracle.differential_attention(q1, k1, q2, k2, value, float(values["coefficient"]), causal)


def is_right(got: np.ndarray | None, expected: np.ndarray, share: float = RIGHT) -> bool:
    """Whether ``got`` equals ``expected`` within ``share`` of its largest magnitude."""
    if got is None or got.shape != expected.shape or not np.isfinite(got).all():
        return False
    return bool(np.max(np.abs(got - expected)) <= share * max(1.0, float(np.max(np.abs(expected)))))


@dataclass
class Found:
    """What the probes of one run found: findings, the probes that ran, maps to show."""

    findings: list[Finding] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)
    maps: list[dict[str, Any]] = field(default_factory=list)

    def add(self, function: str, component: str, stage: str, title: str, evidence: str, advice: str, **extra: Any) -> None:
        """Record a finding of the probes (forward ones explain value and, as a consequence, gradient checks)."""
        if stage == "forward":
            extra = {"aspect": "values", "explains": VALUES_AND_GRADIENTS, "note": FORWARD_NOTE, **extra}
        elif stage == "gradients":
            extra = {"aspect": "gradients", "explains": frozenset({"gradients"}), **extra}
        self.findings.append(Finding(function, component, stage, title, evidence, advice, **extra))


# ---- the attention maps --------------------------------------------------------------------------

MASK_TEXT = {
    "none": ("queries see future keys: the causal mask is missing", "add −∞ to the logits where key j > query i, before the softmax"),
    "strict": ("the mask hides the diagonal too: a token must see itself", "mask only key j > query i (`triu(diagonal=1)`), keep j = i visible"),
    "upper": ("the mask is the wrong way round: queries see the future and not the past",
              "mask key j > query i (above the diagonal), keep j ≤ i"),
    "zero": ("masked logits are set to 0 instead of −∞, so future keys still get weight",
             "fill the masked logits with −∞ (`masked_fill(future, float('-inf'))`), not 0"),
    "after": ("future weights are zeroed after the softmax, so rows no longer sum to 1",
              "apply the mask to the logits before the softmax, not to the weights after it"),
    "causal": ("the causal mask is applied although causal=False", "apply the mask only when causal is True"),
}  # fmt: skip


def _branch_words(branches: Sequence[int]) -> str:
    return "both branches" if len(branches) == 2 else f"branch {branches[0]}"


def _map_findings(found: Found, fits: Mapping[int, attention_maps.MapFit]) -> bool:
    """Findings for what the fitted maps of each branch change from the contract's; whether there was any."""
    changes: dict[tuple[str, Any], list[int]] = {}
    for branch, fit in fits.items():
        for name in fit.changes:
            value = (fit.model.query, fit.model.key) if name in ("query", "key") else getattr(fit.model, name)
            key = ("source" if name in ("query", "key") else name, value if name != "scale" else fit.scale_name or f"{fit.model.scale:.4g}")
            if branch not in changes.setdefault(key, []):
                changes[key].append(branch)
    for (name, value), branches in changes.items():
        where = _branch_words(branches)
        if name == "mask":
            title, advice = MASK_TEXT[value]
            found.add(ATTENTION, "mask", "forward", f"{title[0].upper()}{title[1:]} ({where})",
                      f"The map read out of your output ({where}) has {attention_maps.MASKS[value]}.", advice)
        elif name == "scale":
            found.add(ATTENTION, "scale", "forward", f"The logits are scaled by {value} instead of 1/√D",
                      f"The map read out of your output ({where}) fits softmax(s·QKᵀ) with s = {value}, not 1/√D (D = {D}, the width of q and k).",
                      "divide Q Kᵀ by √D once, with D = q1.shape[-1]")  # fmt: skip
        elif name == "axis":
            found.add(ATTENTION, "softmax", "forward", "The softmax normalises over the queries, not the keys",
                      f"In the map read out of your output ({where}) the columns sum to 1, not the rows.", "use softmax(..., dim=-1), over the key axis")  # fmt: skip
        elif name == "transposed":
            found.add(ATTENTION, "softmax", "forward", "The attention map is transposed",
                      f"The map read out of your output ({where}) is the transpose of the right one: its columns are the rows of softmax(QKᵀ/√D + M).",
                      "multiply the map (queries × keys) by value without transposing it, and compute Q Kᵀ, not K Qᵀ")  # fmt: skip
        elif name == "source":
            query, key = value
            if {query, key} == {"q1", "k1"} or {query, key} == {"q2", "k2"}:
                found.add(ATTENTION, "softmax", "forward", "Queries and keys are swapped in the logits (K Qᵀ instead of Q Kᵀ)",
                          f"The map read out of your output ({where}) is built from {query}·{key}ᵀ.", "compute the logits as q @ k.transpose(-2, -1)")  # fmt: skip
            else:
                found.add(ATTENTION, "branch", "forward", "The two branches' queries and keys are mixed up",
                          f"The map read out of your output for {where} is built from {query} and {key}: each branch uses its own queries and keys (q1 with k1, q2 with k2).",
                          "compute A1 from q1 and k1, and A2 from q2 and k2")  # fmt: skip
    return bool(changes)


@dataclass(frozen=True)
class Combination:
    """How the readouts at several coefficients are made of the true maps: R(c) = a + c·b, with a = w·A, b = v·A."""

    weights: tuple[float, float, float, float]  # (a's A1 and A2 weights, b's A1 and A2 weights)
    fits: bool


def _combination(a: np.ndarray, b: np.ndarray, maps: tuple[np.ndarray, np.ndarray]) -> Combination:
    """Least squares a ≈ w1 A1 + w2 A2 and b ≈ v1 A1 + v2 A2 over every head."""
    basis = np.stack([m.ravel() for m in maps], axis=1)
    solved = [np.linalg.lstsq(basis, x.ravel(), rcond=None)[0] for x in (a, b)]
    residual = max(float(np.max(np.abs(basis @ s - x.ravel()))) for s, x in zip(solved, (a, b)))
    weights = tuple(float(round(w, 6)) for s in solved for w in s)
    return Combination(weights, residual <= attention_maps.FITS)  # type: ignore[arg-type]


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
}  # fmt: skip


def _combination_finding(found: Found, combination: Combination) -> bool:
    """A finding when the signed map mixes the true maps the wrong way; whether there was one."""
    w1, w2, v1, v2 = combination.weights
    if not combination.fits or combination.weights == (1.0, 0.0, 0.0, -1.0):
        return False
    named = COMBINATIONS.get(combination.weights)
    if named is not None:
        component, title, evidence, advice = named
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
    ("divided", "coefficient", "The output is divided by (1 − λ)",
     "the signed map is (A1 − λ·A2)/(1 − λ)", "return (A1 − λ·A2) V with no division: the rows of the signed map sum to 1 − λ by design"),
    ("logits", "branch", "One softmax of the logits' difference instead of the difference of two softmax maps",
     "the signed map is softmax(S1 − λ·S2): λ enters the logits, before one softmax", "normalise each branch on its own: A1 − λ·A2 with A_i = softmax(S_i)"),
    ("joint", "softmax", "The two maps are normalised together instead of each on its own",
     "the signed map is (E1 − λ·E2)/rowsum(E1 − λ·E2) with E_i = exp(S_i)", "apply a softmax to each branch separately, then subtract: A1 − λ·A2"),
)  # fmt: skip


def _not_affine_maps(kind: str, values: Values, c: float) -> np.ndarray:
    """The signed map of head-wise inputs when λ enters as ``kind`` says (see :data:`NOT_AFFINE`)."""
    s1, s2 = ((values[q] @ np.swapaxes(values[k], -1, -2)) / math.sqrt(D) for q, k in (("q1", "k1"), ("q2", "k2")))
    visible = attention_maps.keep(T, "causal")
    if kind == "divided":
        return (oracle.attention_maps(values["q1"], values["k1"], True) - c * oracle.attention_maps(values["q2"], values["k2"], True)) / (1.0 - c)
    if kind == "logits":
        logits = np.where(visible, s1 - c * s2, -np.inf)
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    top = np.maximum(np.where(visible, s1, -np.inf).max(axis=-1, keepdims=True), np.where(visible, s2, -np.inf).max(axis=-1, keepdims=True))
    e1, e2 = (np.where(visible, np.exp(x - top), 0.0) for x in (s1, s2))
    return (e1 - c * e2) / (e1 - c * e2).sum(axis=-1, keepdims=True)


def _not_affine(found: Found, values: Values, read: Sequence[np.ndarray]) -> None:
    """A finding for a signed map that is not affine in λ: one of :data:`NOT_AFFINE`, else that it is not."""
    for kind, component, title, formula, advice in NOT_AFFINE:
        with np.errstate(all="ignore"):
            if all(is_right(r, _not_affine_maps(kind, values, c), attention_maps.FITS) for r, c in zip(read, COEFFICIENTS)):
                found.add(ATTENTION, component, "forward", title, f"Read out of your output at λ = 0, ½, −½ and 2, {formula}, which is not affine in λ.", advice)
                return
    found.add(ATTENTION, "coefficient", "forward", "The output is not affine in the coefficient",
              "Read out of your output at λ = 0, ½, −½ and 2, the signed map does not change linearly with λ, as A1 − λ·A2 does.",
              "use the coefficient exactly once, as the factor of the second map")  # fmt: skip


def _readout(worker: Worker, subject: Subject, values: Values, value: np.ndarray) -> list[np.ndarray | None]:
    """The outputs at :data:`COEFFICIENTS` with ``value``, cut to the first T columns (None where a call gave no [B, H, T, 2D] output)."""
    points = [{**values, "value": value, "coefficient": np.asarray(c)} for c in COEFFICIENTS]
    return [None if out is None or out.shape != (B, H, T, 2 * D) else out[..., :T] for out in probes.sweep(worker, subject, points)]


def _heads(values: Values, h: int) -> dict[str, np.ndarray]:
    """The [T, D] queries and keys of head ``h``."""
    return {n: np.asarray(values[n][0, h]) for n in INPUT_NAMES[:4]}


def _explain_maps(found: Found, values: Values, maps: Mapping[int, np.ndarray], causal: bool) -> dict[int, attention_maps.MapFit] | None:
    """Each branch's map explained on every head (the same model), or None when one cannot be."""
    fits: dict[int, attention_maps.MapFit] = {}
    sources = [(q, k) for q in ("q1", "q2", "k1", "k2") for k in ("k1", "k2", "q1", "q2") if q != k]
    for branch, got in maps.items():
        expected = MapModel(f"q{branch}", f"k{branch}", "causal" if causal else "none", scale=1 / math.sqrt(D))
        per_head = [attention_maps.explain(got[0, h], _heads(values, h), expected, sources, scales(D, T)) for h in range(H)]
        if any(f is None for f in per_head) or len({(f.model, f.changes) for f in per_head if f}) != 1:
            return None
        fits[branch] = per_head[0]  # type: ignore[assignment]
    return fits


def _show(found: Found, title: str, expected: np.ndarray, got: np.ndarray) -> None:
    """Keep a map of head 0 for the report, next to the expected one."""
    found.maps.append({"function": ATTENTION, "title": title, "expected": expected[0, 0].tolist(), "got": got[0, 0].tolist()})


def attention_maps_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """Read the signed map out at several coefficients, explain it; whether the forward was localised."""
    values = attention_values(rng)
    found.probes.append(f"{ATTENTION}: maps read out with one-hot values")
    read = _readout(worker, attention_subject(True), values, identity_values())
    if any(r is None for r in read):
        return False
    true_maps = (oracle.attention_maps(values["q1"], values["k1"], True), oracle.attention_maps(values["q2"], values["k2"], True))
    intercept, slope, residual = probes.affine_fit(COEFFICIENTS, read)  # type: ignore[arg-type]
    if residual > attention_maps.FITS:
        _not_affine(found, values, read)  # type: ignore[arg-type]
        return True
    combination = _combination(intercept, slope, true_maps)
    if _combination_finding(found, combination):
        return True
    if combination.fits:
        return False
    fits = _explain_maps(found, values, {1: intercept, 2: -slope}, causal=True)
    if fits is None:
        return False
    _show(found, "First map A1 (read at λ = 0)", true_maps[0], intercept)
    return _map_findings(found, fits)


def causal_flag_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """The map with causal omitted must be the causal one, with causal=False the unmasked one; whether either is not."""
    values = attention_values(rng)
    found.probes.append(f"{ATTENTION}: the maps with causal omitted and False")
    localised = False
    for causal, words in ((None, "causal is left out"), (False, "causal=False")):
        out = probes.sweep(worker, attention_subject(causal), [{**values, "value": identity_values(), "coefficient": np.asarray(0.0)}])[0]
        if out is None or out.shape != (B, H, T, 2 * D):
            continue
        masked = causal is None
        if is_right(out[..., :T], oracle.attention_maps(values["q1"], values["k1"], masked)):
            continue
        fits = _explain_maps(found, values, {1: out[..., :T]}, causal=masked)
        if fits is None or fits[1].changes != ("mask",):
            continue
        got = fits[1].model.mask
        if masked and got == "none":
            found.add(ATTENTION, "mask", "forward", "causal defaults to False: a call without it is not masked",
                      "When causal is left out, the map read out of your output has no mask; with causal=True it is masked.",
                      "declare `causal: bool = True`, as the contract's signature does")  # fmt: skip
            localised = True
        elif not masked:
            title, advice = MASK_TEXT["causal"] if got == "causal" else MASK_TEXT[got]
            found.add(ATTENTION, "mask", "forward", title[0].upper() + title[1:], f"With {words}, the map read out of your output has {attention_maps.MASKS[got]}.", advice)
            localised = True
    return localised


def dependence_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """Perturb one input at a time: future keys and values must not reach earlier queries, all of value must matter."""
    values = attention_values(rng)
    last, earlier = (..., T - 1, slice(None)), (..., slice(0, T - 1), slice(None))
    perturbations = [
        Perturbation("k1", last, "the last token's key of branch 1", forbidden=earlier),
        Perturbation("k2", last, "the last token's key of branch 2", forbidden=earlier),
        Perturbation("value", last, "the last token's value", forbidden=earlier),
        Perturbation("q1", last, "the last query of branch 1", forbidden=earlier),
        Perturbation("value", (..., slice(D, 2 * D)), "the second half of value (columns D to 2D)", required=(...,)),
    ]
    found.probes.append(f"{ATTENTION}: which input matters")
    effects = probes.dependence(worker, attention_subject(True), values, perturbations, rng)
    if effects is None:
        return False
    leaks = [e.perturbation.label for e in effects if e.leaked]
    localised = False
    if leaks[:1] == ["the last query of branch 1"]:
        found.add(ATTENTION, "softmax", "forward", "Each query's output depends on the other queries",
                  "Changing the last query of branch 1 changed the outputs of earlier queries: the softmax normalises across queries.",
                  "use softmax(..., dim=-1), over the key axis of each query's row")  # fmt: skip
        localised = True
    elif leaks:
        found.add(ATTENTION, "mask", "forward", "Queries see future tokens: the causal mask does not hold",
                  f"Under causal=True, changing {' and '.join(leaks)} changed the outputs of earlier queries.",
                  "add −∞ to the logits of both branches where key j > query i, before the softmax")  # fmt: skip
        localised = True
    if any(e.ignored for e in effects):
        found.add(ATTENTION, "value", "forward", "The second half of value never reaches the output",
                  "Changing columns D to 2D of value left the output unchanged: the output must use all 2D columns of value.",
                  "multiply the signed map by the whole of value, shape [B, H, T, 2D]")  # fmt: skip
        localised = True
    return localised


def value_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """The output must be linear in value, with one map for every column; whether it is not."""
    values = attention_values(rng)
    shifted = np.zeros((B, H, T, 2 * D))
    shifted[..., np.arange(T), (np.arange(T) + D) % (2 * D)] = 1.0
    points = [{**values, "value": v} for v in (identity_values(), 2.0 * identity_values(), shifted)]
    plain, doubled, moved = probes.sweep(worker, attention_subject(True), points)
    found.probes.append(f"{ATTENTION}: linear in value, one map for every column")
    if plain is None or doubled is None or moved is None or not plain.shape == doubled.shape == moved.shape == (B, H, T, 2 * D):
        return False
    if not is_right(doubled, 2.0 * plain, 1e-6):
        found.add(ATTENTION, "softmax", "forward", "The output is normalised after the aggregation",
                  "Doubling value did not double the output: (A1 − λA2)V is linear in V, so something (an RMSNorm, a layer norm) rescales the output.",
                  "return (A1 − λ·A2) V itself; the head normalisation is outside this function")  # fmt: skip
        return True
    read_again = moved[..., (np.arange(T) + D) % (2 * D)]
    if not is_right(read_again, plain[..., :T], 1e-6):
        found.add(ATTENTION, "value", "forward", "Different columns of value are weighted by different maps",
                  "The same tokens placed in other columns of value came out with other weights: every column of value must be mixed by the one signed map.",
                  "compute (A1 − λ·A2) @ value with the whole of value, not each branch with its own half")  # fmt: skip
        return True
    return False


# ---- stability, precision, randomness --------------------------------------------------------------


def _large(rng: np.random.Generator, kind: str) -> dict[str, np.ndarray]:
    """float32-exact inputs whose scaled logits reach hundreds, arranged as ``kind`` says."""
    values = attention_values(rng)
    root = math.sqrt(D)
    direction = rng.standard_normal(D)
    direction /= np.linalg.norm(direction)
    if kind == "all":
        values["q1"], values["q2"] = values["q1"] * 120.0, values["q2"] * 120.0
    elif kind == "future":  # the last key aligned with every query: far above the visible logits of earlier queries
        for n in ("q1", "q2"):
            values[n] = np.broadcast_to(direction * 20.0, (B, H, T, D)) + values[n] * 0.1
        for n in ("k1", "k2"):
            values[n] = values[n] * 0.1
            values[n][..., T - 1, :] = direction * 300.0 * root / 20.0
    elif kind == "branches":
        values["q2"] = values["q2"] * 150.0
    else:  # every logit far below zero
        for n, m in (("q1", "k1"), ("q2", "k2")):
            values[n] = np.broadcast_to(-direction * 20.0, (B, H, T, D)) + values[n] * 0.1
            values[m] = np.broadcast_to(direction * 8.0 * root, (B, H, T, D)) + values[m] * 0.1
    return {n: exact(v, "float32") for n, v in values.items()}


def stability_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """float32 calls with logits of hundreds against the oracle; whether one fails."""
    kinds = {"all": "every logit is large", "future": "a future key's logit is far above the visible ones",
             "branches": "branch 2's logits are far from branch 1's", "below": "every visible logit is far below zero"}  # fmt: skip
    cases = {kind: _large(rng, kind) for kind in kinds}
    found.probes.append(f"{ATTENTION}: float32 logits of hundreds")
    outputs = probes.sweep(worker, attention_subject(True, "float32"), list(cases.values()))
    failing = [kinds[k] for (k, values), out in zip(cases.items(), outputs) if not is_right(out, truth(values, True), FLOAT32_LIKE)]
    if not failing:
        return False
    bad = "NaN or infinite" if any(out is not None and not np.isfinite(out).all() for out in outputs) else "wrong"
    found.add(ATTENTION, "stability", "forward", "The softmax is not numerically stable in float32",
              f"With float32 logits of several hundred, your output is {bad} when {' / '.join(failing)}; ordinary logits give the right output.",
              "subtract each row's maximum over its visible keys, per branch, before exp (or use torch.softmax)")  # fmt: skip
    return True


def precision_finding(found: Found, function: str, got: np.ndarray | None, expected: np.ndarray) -> bool:
    """A dtype finding when a float64 result is right only to float32's accuracy; whether there was one."""
    if got is None or is_right(got, expected) or not is_right(got, expected, FLOAT32_LIKE):
        return False
    found.add(function, "dtype", "forward", "float64 inputs are computed in float32",
              f"For float64 inputs your result is off by about {float(np.max(np.abs(got - expected))):.1g}, the accuracy of float32, not of float64.",
              "compute in the inputs' dtype throughout: no .float(), no float32 constants or tensors created without dtype=")  # fmt: skip
    return True


def randomness_probe(worker: Worker, subject: Subject, values: Values, grads: tuple[str, ...], found: Found) -> bool:
    """A finding when two identical calls disagree; whether they did."""
    found.probes.append(f"{subject.function}: two identical calls")
    gap = probes.determinism(worker, subject, values, grads)
    if not gap:
        return False
    found.add(subject.function, "randomness", "forward", "Two identical calls give different outputs",
              f"Called twice with the same inputs, your function returned outputs up to {gap:.3g} apart: dropout or other randomness is left on.",
              "remove dropout and any random step: the function must be deterministic")  # fmt: skip
    return True


# ---- gradients -----------------------------------------------------------------------------------


def _uses_custom_backward(source: str | None) -> bool:
    """Whether the submission defines its own backward pass (an autograd.Function)."""
    return bool(source) and "def backward" in (source or "")


def gradient_finding(found: Found, function: str, condition: str, result: Consistency, source: str | None) -> bool:
    """A finding from one gradient comparison: inputs without gradient (graph) or with a wrong one (backward); whether there was one."""
    if result.problem is not None:
        if "does not require grad" in result.problem or "grad" not in result.problem.lower():
            return False  # a detached output is a contract slip; a forward that fails is not the backward's fault
        found.add(function, "backward", "gradients", "The backward pass fails",
                  f"Differentiating your output raised {result.problem}{condition}.", "make the backward pass return one gradient per input, of its shape")  # fmt: skip
        return True
    missing, differs = result.named("missing"), result.named("differs") + result.named("not_finite")
    agree = result.named("agrees")
    rest = f"; {', '.join(agree)} agree" if agree else ""
    if missing:
        component = "backward" if _uses_custom_backward(source) else "graph"
        found.add(function, component, "gradients", f"No gradient reaches {', '.join(missing)}",
                  f"Your output changes with {', '.join(missing)}{condition}, yet no gradient reaches {'it' if len(missing) == 1 else 'them'}{rest}.",
                  "return a gradient for every input that requires grad" if component == "backward" else
                  "keep the path from every input to the output in torch: no .detach(), .item(), float(), torch.no_grad() or torch.tensor(...)",
                  inputs=tuple(missing), signature=NO_GRAPH)  # fmt: skip
        return True
    if differs:
        found.add(function, "backward", "gradients", f"The gradient for {', '.join(differs)} is wrong",
                  f"Your gradient for {', '.join(differs)} disagrees with finite differences of your own forward{condition}{rest}.",
                  "fix the backward pass for those inputs (a hand-written backward, or a detach that cuts part of the graph)",
                  inputs=tuple(differs))  # fmt: skip
        return True
    return False


def gradients_probe(worker: Worker, subject: Subject, runs: Sequence[tuple[Values, tuple[str, ...]]], cotangent: np.ndarray,
                    rng: np.random.Generator, found: Found, source: str | None) -> None:  # fmt: skip
    """The gradients against finite differences of the forward, run after run (inputs, which require grad) until one finds a fault.

    When the forward is already known to be wrong, the first run alone tells
    whether the backward is wrong too; the others look for faults that only
    some inputs left without requires_grad bring out.
    """
    found.probes.append(f"{subject.function}: gradients against finite differences of its own forward")
    everything = runs[0][1]
    if any(f.function == subject.function and f.stage == "forward" for f in found.findings):
        runs = runs[:1]
    for values, grads in runs:
        frozen = [n for n in everything if n not in grads]
        condition = f" when {', '.join(frozen)} do{'es' if len(frozen) == 1 else ''} not require grad" if frozen else ""
        if "coefficient" in values and float(values["coefficient"]) == 0.0:
            condition += " at coefficient 0"
        if gradient_finding(found, subject.function, condition, probes.consistency(worker, subject, values, grads, cotangent, rng), source):
            return


def attention_gradients_probe(worker: Worker, rng: np.random.Generator, found: Found, source: str | None) -> None:
    """Gradients against finite differences of the forward: all inputs, some frozen, a zero coefficient."""
    values = attention_values(rng)
    runs = [(values if c is None else {**values, "coefficient": np.asarray(c)}, grads) for grads, c in FROZEN_RUNS]
    gradients_probe(worker, attention_subject(True), runs, rng.standard_normal((B, H, T, 2 * D)), rng, found, source)


def lambda_values(rng: np.random.Generator, init: float | None = LAMBDA_INIT, length: int = 3) -> dict[str, np.ndarray]:
    """Four λ vectors of dot products about ±0.5 (lambda_init given unless None)."""
    found = {n: rng.uniform(0.3, 1.0, length) * rng.choice([-1.0, 1.0], length) / math.sqrt(length) for n in LAMBDA_NAMES}
    return found if init is None else {**found, "lambda_init": np.asarray(init)}


def lambda_truth(values: Values) -> float:
    """The oracle's λ for probe vectors (lambda_init as given, else the default 0.2)."""
    q1, k1, q2, k2 = (values[n] for n in LAMBDA_NAMES)
    return oracle.scalar_lambda(q1, k1, q2, k2, float(values.get("lambda_init", 0.2)))


def _line(direction: np.ndarray, branch: int, t: float) -> dict[str, np.ndarray]:
    """Vectors with q_branch·k_branch = t and the other pair zero."""
    zero = np.zeros_like(direction)
    pair = {f"q{branch}": t * direction, f"k{branch}": direction}
    return {n: pair.get(n, zero) for n in LAMBDA_NAMES} | {"lambda_init": np.asarray(LAMBDA_INIT)}


def lambda_structure_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """λ at zero vectors and along a line in each exponent; whether it strays from exp(q1·k1) − exp(q2·k2) + λ_init."""
    direction = rng.standard_normal(3)
    direction /= np.linalg.norm(direction)
    zero = {n: np.zeros(3) for n in LAMBDA_NAMES}
    points = [{**zero, "lambda_init": np.asarray(LAMBDA_INIT)}, zero] + [_line(direction, b, t) for b in (1, 2) for t in LINE]
    found.probes.append(f"{LAMBDA}: at zero vectors and along a line")
    answers = probes.sweep(worker, lambda_subject(), points)
    if any(g is None or g.size != 1 for g in answers):
        return False
    got = [float(np.asarray(g).reshape(())) for g in answers]
    at_zero, default = got[0], got[1]
    first, second = (np.array(got[2 + 3 * i : 5 + 3 * i]) - at_zero for i in range(2))
    grow = np.expm1(np.array(LINE))
    close = lambda a, b: bool(np.allclose(a, b, rtol=1e-6, atol=1e-9))  # noqa: E731
    lam = LAMBDA
    if close(at_zero, LAMBDA_INIT) and not close(default, 0.2):
        found.add(lam, "lambda", "forward", f"The default lambda_init is {default:.4g}, not 0.2",
                  f"With lambda_init left out and all four vectors zero, λ is {default:.4g}; it must be the default 0.2.",
                  "declare `lambda_init: float = 0.2`")  # fmt: skip
    elif close(at_zero, 0.0):
        found.add(lam, "lambda", "forward", "lambda_init is not added",
                  f"With all four vectors zero and lambda_init = {LAMBDA_INIT}, λ is 0: exp(0) − exp(0) + λ_init is λ_init.", "add lambda_init to the difference of exponentials")  # fmt: skip
    elif close(first, -grow) and close(second, grow):
        found.add(lam, "sign", "forward", "The two exponentials are swapped (exp(q2·k2) − exp(q1·k1))",
                  "Along a line, λ decreases as q1·k1 grows and increases as q2·k2 grows: the difference has the wrong sign.",
                  "λ = exp(q1·k1) − exp(q2·k2) + λ_init")  # fmt: skip
    elif close(first, np.array(LINE)) and close(second, -np.array(LINE)):
        found.add(lam, "lambda", "forward", "The exponentials are missing",
                  "Along a line, λ changes by exactly q1·k1 (and −q2·k2), not by exp(q1·k1) − 1.", "λ = exp(q1·k1) − exp(q2·k2) + λ_init")  # fmt: skip
    elif close(first, grow) and close(second, grow):
        found.add(lam, "lambda", "forward", "The second exponential is added, not subtracted",
                  "Along a line, λ grows with q2·k2 as it does with q1·k1.", "λ = exp(q1·k1) − exp(q2·k2) + λ_init: subtract exp(q2·k2)")  # fmt: skip
    elif max(got) <= 1.0 + 1e-12 and min(got) >= -1e-12 and not close(first, grow):
        found.add(lam, "lambda", "forward", "λ is clamped to [0, 1]",
                  "Along a line, λ stays within [0, 1] where exp(q1·k1) − exp(q2·k2) + λ_init leaves it.", "do not clamp λ: any real value is valid")  # fmt: skip
    elif not (close(at_zero, LAMBDA_INIT) and close(first, grow) and close(second, -grow)):
        found.add(lam, "lambda", "forward", "λ does not follow exp(q1·k1) − exp(q2·k2) + λ_init",
                  f"At zero vectors λ is {at_zero:.4g} (λ_init = {LAMBDA_INIT}); along a line where q1·k1 goes from {LINE[0]} to {LINE[-1]} it changes by "
                  f"{', '.join(f'{x:.3g}' for x in first)} instead of {', '.join(f'{x:.3g}' for x in grow)}.",
                  "λ = exp(q1·k1) − exp(q2·k2) + λ_init, with dot products q·k = Σ_d q_d k_d")  # fmt: skip
    else:
        return False
    return True


def lambda_dependence_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """Each of the four vectors must change λ; whether one does not."""
    values = lambda_values(rng)
    found.probes.append(f"{LAMBDA}: which input matters")
    effects = probes.dependence(worker, lambda_subject(), values, [Perturbation(n, (...,), n, required=(...,)) for n in LAMBDA_NAMES], rng)
    ignored = [e.perturbation.label for e in effects or () if e.ignored]
    if not ignored:
        return False
    found.add(LAMBDA, "lambda", "forward", f"λ does not depend on {', '.join(ignored)}",
              f"Changing {', '.join(ignored)} left λ unchanged.", "λ = exp(q1·k1) − exp(q2·k2) + λ_init uses all four vectors")  # fmt: skip
    return True


def lambda_range_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """Exponents of ±60 in float32 and 100 in float64 must give finite, right λ; whether they do not."""
    direction = rng.standard_normal(3)
    direction /= np.linalg.norm(direction)
    pairs = {"float32": ((60.0, -60.0), (-60.0, 60.0)), "float64": ((100.0, 5.0),)}
    found.probes.append(f"{LAMBDA}: large exponents")
    for dtype, exponents in pairs.items():
        points = [{"q1": a * direction, "k1": direction, "q2": b * direction, "k2": direction, "lambda_init": np.asarray(LAMBDA_INIT)}
                  for a, b in exponents]  # fmt: skip
        points = [{n: exact(v, dtype) for n, v in p.items()} for p in points]
        for point, got in zip(points, probes.sweep(worker, lambda_subject(dtype), points)):
            expected = np.asarray(lambda_truth(point))
            if got is None or got.size != 1 or is_right(got.reshape(()), expected, FLOAT32_LIKE):
                continue
            a, b = (float(point[f"q{i}"] @ point[f"k{i}"]) for i in (1, 2))
            shown = f"{float(got.reshape(())):.4g}"
            if dtype == "float64":
                found.add(LAMBDA, "dtype", "forward", "float64 inputs are computed in float32",
                          f"With float64 vectors and q1·k1 = {a:.4g}, λ is {shown}: it overflows where float64 does not, so the computation runs in float32.",
                          "compute in the inputs' dtype throughout")  # fmt: skip
            else:
                found.add(LAMBDA, "stability", "forward", "λ overflows for large exponents",
                          f"With float32 vectors, q1·k1 = {a:.4g} and q2·k2 = {b:.4g}, λ is {shown} although exp of each is finite in float32.",
                          "compute exp(q1·k1) − exp(q2·k2) directly: factorings such as exp(b)·expm1(a − b) overflow")  # fmt: skip
            return True
    return False


def lambda_gradients_probe(worker: Worker, rng: np.random.Generator, found: Found, source: str | None) -> None:
    """λ's gradients against finite differences of its own forward, all vectors and only the keys requiring grad."""
    values = lambda_values(rng)
    gradients_probe(worker, lambda_subject(), [(values, grads) for grads in LAMBDA_RUNS], np.asarray(1.3), rng, found, source)


# ---- the probes of each function, in order ---------------------------------------------------------


def attention(worker: Worker, rng: np.random.Generator, found: Found, forward: bool, gradients: bool, source: str | None) -> None:
    """The attention probes: randomness first (it spoils the others), then the forward, then the gradients."""
    values = attention_values(rng)
    if randomness_probe(worker, attention_subject(True), values, ATTENTION_GRADS, found):
        return
    if forward:
        base = probes.sweep(worker, attention_subject(True), [values])[0]
        right = is_right(base, truth(values, True))
        localised = value_probe(worker, rng, found) or attention_maps_probe(worker, rng, found)
        localised = localised or causal_flag_probe(worker, rng, found) or dependence_probe(worker, rng, found)
        if right and not localised:
            stability_probe(worker, rng, found)
        elif not localised:
            unmasked = probes.sweep(worker, attention_subject(False), [values])[0]
            precision_finding(found, ATTENTION, base, truth(values, True)) or precision_finding(found, ATTENTION, unmasked, truth(values, False))
    if gradients:
        attention_gradients_probe(worker, rng, found, source)


def differential_lambda(worker: Worker, rng: np.random.Generator, found: Found, forward: bool, gradients: bool, source: str | None) -> None:
    """The λ probes: randomness, structure, dependence, range and precision, then the gradients."""
    values = lambda_values(rng)
    if randomness_probe(worker, lambda_subject(), values, LAMBDA_NAMES, found):
        return
    if forward:
        base = probes.sweep(worker, lambda_subject(), [values])[0]
        expected = np.asarray(lambda_truth(values))
        localised = lambda_structure_probe(worker, rng, found) or lambda_dependence_probe(worker, rng, found)
        localised = localised or lambda_range_probe(worker, rng, found)
        if not localised and base is not None and base.size == 1:
            precision_finding(found, LAMBDA, base.reshape(()), expected)
    if gradients:
        lambda_gradients_probe(worker, rng, found, source)
