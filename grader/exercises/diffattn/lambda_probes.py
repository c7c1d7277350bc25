"""The forward probes of differential_lambda, and what their answers mean.

λ at zero vectors (lambda_init given, 0 and omitted) and along a line in each
exponent must follow ``exp(q1·k1) − exp(q2·k2) + λ_init`` (which names a
missing λ_init, a changed default, missing exponentials, swapped or added
terms, a clamp, a lambda_init transformed so that a negative one fails); each
of the four vectors must matter; exponents of ±60 in float32 and 100 in
float64 must give finite, right values; vectors of 1 to 257 elements, on
both sides of block and lane sizes, must give the right λ; and when none of
that finds a fault, λ's structure again with float32 vectors (a path taken
for one dtype alone). :func:`run` runs them after randomness and before the
gradients
(:mod:`grader.toolkit.findings`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grader.exercises.diffattn import oracle
from grader.exercises.diffattn.cases import LAMBDA, LAMBDA_NAMES
from grader.exercises.diffattn.probes import PARAMETER_COMPONENTS, lambda_subject
from grader.toolkit.findings import (
    FLOAT32_LIKE, Found, GradientRun, gradients_probe, is_right, layout_probe, listed, precision_finding, randomness_probe, replayed_runs,
    rounding_probe,
)  # fmt: skip
from grader.toolkit import domain, probes
from grader.toolkit.domain import exact
from grader.toolkit.probes import Perturbation, Values
from grader.worker.client import Worker

LAMBDA_INIT = 0.37  # given to the probes' calls: not the default 0.2, nor 0.8
LINE = (-0.8, 0.5, 1.2)  # the values of q·k along the line
LAMBDA_RUNS = (LAMBDA_NAMES, ("k1", "k2"))  # the gradient comparisons: every vector requiring grad, then only the keys
RANGE_TEXT = {  # what a wrong λ for large exponents means, by the vectors' dtype (or finite but wrong): component, title, evidence, advice
    "float64": ("dtype", "float64 inputs are computed in float32",
                "With float64 vectors and q1·k1 = {a:.4g}, λ is {got:.4g}: it overflows where float64 does not, so the computation runs in float32.",
                "compute in the inputs' dtype throughout"),
    "float32": ("stability", "λ overflows for large exponents",
                "With float32 vectors, q1·k1 = {a:.4g} and q2·k2 = {b:.4g}, λ is {got:.4g} although exp of each is finite in float32.",
                "compute exp(q1·k1) − exp(q2·k2) directly: factorings such as exp(b)·expm1(a − b) overflow"),
    "elementwise": ("lambda", "λ overflows although the dot products are small",
                    "With float32 vectors whose elementwise products reach ±100 but whose dot products are q1·k1 = {a:.4g} and "
                    "q2·k2 = {b:.4g}, λ is {got:.4g}: the exponential is taken before the products are summed (a product of "
                    "exp(q·k) terms, exp(q) with exp(k), ...).", "sum first, then take one exponential: exp(torch.dot(q, k))"),
    "finite": ("lambda", "λ is wrong for large exponents",
               "With q1·k1 = {a:.4g} and q2·k2 = {b:.4g}, λ is {got:.4g}: finite, but not exp(q1·k1) − exp(q2·k2) + λ_init (a clamp of "
               "the dot products or of the exponentials?).", "do not clamp: exp of any dot product whose exponential is finite is valid"),
}  # fmt: skip


def lambda_values(rng: np.random.Generator, init: float | None = LAMBDA_INIT, length: int = 3) -> dict[str, np.ndarray]:
    """Four λ vectors of dot products about ±0.5 (lambda_init given unless None)."""
    found = {n: rng.uniform(0.3, 1.0, length) * rng.choice([-1.0, 1.0], length) / math.sqrt(length) for n in LAMBDA_NAMES}
    return found if init is None else {**found, "lambda_init": np.asarray(init)}


EXPONENTS = (20.0, 15.0)
LARGE_EXPONENTS = f" with q1·k1 = {EXPONENTS[0]:g} and q2·k2 = {EXPONENTS[1]:g}"
TIED = " with q1·k1 = q2·k2 (q2 = q1, k2 = k1)"
UPSTREAM = 1.3  # the incoming gradient of λ in the probe's runs
NEGATIVE_UPSTREAM = f" with a negative incoming gradient ({-UPSTREAM:g})"  # a backward working with log(grad) fails only there
# Found first at a tie, after ordinary inputs: the formula's own derivative there, not a cut graph or a hand-written backward.
AT_THE_TIE = ("λ's gradients are wrong where q1·k1 = q2·k2",
              "differentiate exp(q1·k1) − exp(q2·k2) + lambda_init as written: a form through sign(a − b), |a − b|, max(a, b) or "
              "log|e^a − e^b| has a derivative of 0, or none, where the two exponents are equal")


def _large_exponents(values: Values) -> dict[str, np.ndarray]:
    """``values`` with the queries moved along their keys so that q1·k1 and q2·k2 are :data:`EXPONENTS`: exp of each is
    large but finite, where a backward pass that clips or approximates the exponential is wrong."""
    moved = dict(values)
    for (q, k), exponent in zip((("q1", "k1"), ("q2", "k2")), EXPONENTS):
        moved[q] = values[k] * (exponent / float(values[k] @ values[k]))
    return moved


def lambda_truth(values: Values) -> float:
    """The oracle's λ for probe vectors (lambda_init as given, else the default 0.2)."""
    q1, k1, q2, k2 = (values[n] for n in LAMBDA_NAMES)
    return oracle.scalar_lambda(q1, k1, q2, k2, float(values.get("lambda_init", 0.2)))


def _line(direction: np.ndarray, branch: int, t: float) -> dict[str, np.ndarray]:
    """Vectors with q_branch·k_branch = t and the other pair zero."""
    zero = np.zeros_like(direction)
    pair = {f"q{branch}": t * direction, f"k{branch}": direction}
    return {n: pair.get(n, zero) for n in LAMBDA_NAMES} | {"lambda_init": np.asarray(LAMBDA_INIT)}


ROUNDING = {"float64": (1e-6, 1e-9), "float32": (1e-5, 1e-6)}
"""What each dtype's rounding allows the structure probe's answers (relative, absolute)."""


def lambda_structure_probe(worker: Worker, rng: np.random.Generator, found: Found, dtype: str = "float64") -> bool:
    """λ at zero vectors and along a line in each exponent (vectors of ``dtype``); whether it strays from
    exp(q1·k1) − exp(q2·k2) + λ_init. With float32 vectors the findings say that float64 ones are right."""
    direction = rng.standard_normal(3)
    direction /= np.linalg.norm(direction)
    zero = {n: np.zeros(3) for n in LAMBDA_NAMES}
    points = [{**zero, "lambda_init": np.asarray(LAMBDA_INIT)}, zero] + [_line(direction, b, t) for b in (1, 2) for t in LINE]
    points += [{**zero, "lambda_init": np.asarray(0.0)}, {**zero, "lambda_init": np.asarray(-LAMBDA_INIT)}]
    found.probes.append(f"{LAMBDA}: at zero vectors and along a line" + ("" if dtype == "float64" else f", {dtype} vectors"))
    answers = probes.sweep(worker, lambda_subject(dtype), [{n: exact(v, dtype) if n in LAMBDA_NAMES else v for n, v in p.items()} for p in points])
    if any(g is None or g.size != 1 for g in answers):
        return False
    got = [float(np.asarray(g).reshape(())) for g in answers]
    rtol, atol = ROUNDING[dtype]

    def close(a: np.ndarray | float, b: np.ndarray | float) -> bool:
        """Equal but for rounding."""
        return bool(np.allclose(a, b, rtol=rtol, atol=atol))

    return found.first(LAMBDA, *(_for_dtype(dtype, candidate) for candidate in _structure_candidates(got, close)))


def _for_dtype(dtype: str, candidate: tuple[bool, str, str, str, str]) -> tuple[bool, str, str, str, str]:
    """A finding of the structure probe as it reads for vectors of ``dtype``: for float32, said to hold for float32 only."""
    if dtype == "float64":
        return candidate
    holds, component, title, evidence, advice = candidate
    return (holds, component, f"{title}, for {dtype} vectors only",
            f"With {dtype} vectors (float64 ones give the right λ): {evidence[0].lower()}{evidence[1:]}",
            f"{advice}; the same computation for every dtype (a path taken for {dtype} alone holds the fault)")


def _structure_candidates(got: list[float], close: Callable[[Any, Any], bool]) -> tuple[tuple[bool, str, str, str, str], ...]:
    """The structure probe's findings from its answers ``got`` (λ at zero vectors, with lambda_init omitted, along the line in
    each exponent, with lambda_init 0 and negative), most specific first: (condition, component, title, evidence, advice)."""
    at_zero, default, given_zero, negative = got[0], got[1], got[-2], got[-1]
    first, second = (np.array(got[2 + 3 * i : 5 + 3 * i]) - at_zero for i in range(2))
    grow, line = np.expm1(np.array(LINE)), np.array(LINE)
    right = close(at_zero, LAMBDA_INIT) and close(first, grow) and close(second, -grow)
    formula = "λ = exp(q1·k1) − exp(q2·k2) + λ_init"
    times = round(at_zero / LAMBDA_INIT)
    truth = np.array([LAMBDA_INIT, 0.2, *(LAMBDA_INIT + grow), *(LAMBDA_INIT - grow), 0.0, -LAMBDA_INIT])
    return (
        (close(at_zero, LAMBDA_INIT) and not close(default, 0.2), "lambda", f"The default lambda_init is {default:.4g}, not 0.2",
         f"With lambda_init left out and all four vectors zero, λ is {default:.4g}; it must be the default 0.2.", "declare `lambda_init: float = 0.2`"),
        (close(at_zero, LAMBDA_INIT) and close(default, 0.2) and not close(given_zero, 0.0), "lambda", "lambda_init = 0 is not used as given",
         f"With all four vectors zero, λ is {LAMBDA_INIT} for lambda_init = {LAMBDA_INIT} but {given_zero:.4g} for lambda_init = 0: a test of "
         "its truth (`lambda_init or 0.2`, `if lambda_init:`) treats 0 as missing.", "use lambda_init as given: test `is None` if you need to"),
        (close(at_zero, 0.0), "lambda", "lambda_init is not added",
         f"With all four vectors zero and lambda_init = {LAMBDA_INIT}, λ is 0: exp(0) − exp(0) + λ_init is λ_init.", "add lambda_init to the difference of exponentials"),
        (close(first, -grow) and close(second, grow), "sign", "The two exponentials are swapped (exp(q2·k2) − exp(q1·k1))",
         "Along a line, λ decreases as q1·k1 grows and increases as q2·k2 grows: the difference has the wrong sign.", formula),
        (close(first, line) and close(second, -line), "lambda", "The exponentials are missing",
         "Along a line, λ changes by exactly q1·k1 (and −q2·k2), not by exp(q1·k1) − 1.", formula),
        (close(first, grow) and close(second, grow), "lambda", "The second exponential is added, not subtracted",
         "Along a line, λ grows with q2·k2 as it does with q1·k1.", f"{formula}: subtract exp(q2·k2)"),
        (max(got[:-1]) <= 1.0 + 1e-12 and min(got[:-1]) >= -1e-12 and not close(first, grow), "lambda", "λ is clamped to [0, 1]",
         f"Along a line, λ stays within [0, 1] where {formula[4:]} leaves it.", "do not clamp λ: any real value is valid"),
        (right and not close(negative, -LAMBDA_INIT), "lambda", "A negative lambda_init gives the wrong λ",
         f"With all four vectors zero, λ is {LAMBDA_INIT} for lambda_init = {LAMBDA_INIT} but {negative:.4g} for lambda_init = "
         f"{-LAMBDA_INIT}: λ_init must be added as it is, whatever its sign (a log or a square root of it is NaN below zero).",
         "add lambda_init to the difference of exponentials, without transforming it"),
        (close(first, grow) and close(second, -grow) and times not in (0, 1) and close(at_zero, times * LAMBDA_INIT), "lambda",
         f"lambda_init is added {'twice' if times == 2 else f'{times} times'}",
         f"With all four vectors zero and lambda_init = {LAMBDA_INIT}, λ is {at_zero:.4g} = {times} × λ_init, and along a line it "
         "follows the exponentials as it should: λ_init is added more than once (by a helper and again by its caller?).",
         "add lambda_init once, to the difference of exponentials"),
        (not close(got, truth) and close(got, np.abs(truth)), "sign", "λ loses its sign: negative values come back positive",
         f"Where {formula[4:]} is negative (down to {truth.min():.4g} along a line), your λ is its absolute value; where it is "
         "positive, your λ is right.", f"{formula}, negative wherever the exponentials make it so: no abs, no square root of a square"),
        (not right, "lambda", "λ does not follow exp(q1·k1) − exp(q2·k2) + λ_init",
         f"At zero vectors λ is {at_zero:.4g} (λ_init = {LAMBDA_INIT}); along a line where q1·k1 goes from {LINE[0]} to {LINE[-1]} it changes by "
         f"{', '.join(f'{x:.3g}' for x in first)} instead of {', '.join(f'{x:.3g}' for x in grow)}.", f"{formula}, with dot products q·k = Σ_d q_d k_d"),
    )  # fmt: skip


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


PARTNERS = {"q1": "k1", "k1": "q1", "q2": "k2", "k2": "q2"}  # the vector each one meets in its dot product


def lambda_pairing_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """Each vector moved at right angles to its partner (its dot product unchanged) must leave λ as it was: λ depends on the
    vectors only through q1·k1 and q2·k2. A finding naming the vectors that change it otherwise; whether one does."""
    values = lambda_values(rng)
    moved = []
    for name, partner in PARTNERS.items():
        step = rng.standard_normal(values[name].shape)
        step -= (step @ values[partner]) / (values[partner] @ values[partner]) * values[partner]
        moved.append({**values, name: values[name] + step})
    found.probes.append(f"{LAMBDA}: each vector moved at right angles to its partner")
    base, *answers = probes.sweep(worker, lambda_subject(), [values, *moved])
    if base is None or base.size != 1 or not np.isfinite(base).all():
        return False
    changed = [n for n, got in zip(PARTNERS, answers) if got is not None and got.size == 1 and not is_right(got.reshape(()), base.reshape(()))]
    if not changed:
        return False
    kept = listed(sorted({f"q{n[1]}·k{n[1]}" for n in changed}))
    found.add(LAMBDA, "lambda", "forward", f"λ depends on {listed(changed)} beyond {'its' if len(changed) == 1 else 'their'} pair's dot product",
              f"Moving {listed(changed)}, each at right angles to its partner (so {kept} stayed as {'it was' if ' and ' not in kept else 'they were'}), "
              "changed λ: λ = exp(q1·k1) − exp(q2·k2) + λ_init depends on each "
              "vector only through its own pair's dot product, so a product pairs a vector with another pair's (q1 with k2, a "
              "sum over both pairs' keys, einsum subscripts that do not match?).",
              "take the two dot products q1·k1 and q2·k2, each of one pair's own vectors")  # fmt: skip
    return True


def lambda_range_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """Exponents of ±60 in float32 and 100 in float64, and small exponents made of large elementwise products, must give
    finite, right λ; whether they do not."""
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
            component, title, evidence, advice = RANGE_TEXT[dtype] if not np.isfinite(got).all() else RANGE_TEXT["finite"]
            found.add(LAMBDA, component, "forward", title, evidence.format(a=a, b=b, got=float(got.reshape(()))), advice)
            return True
    # Elementwise products of ±100 that cancel in the sum: exp of each overflows float32, exp of the dot product does not.
    point = {"q1": np.array([10.0, 10.0, 0.5]), "k1": np.array([10.0, -10.0, 0.5]), "q2": np.array([0.5, -0.25, 0.75]),
             "k2": np.array([0.5, 0.5, -0.5]), "lambda_init": np.asarray(LAMBDA_INIT)}  # fmt: skip
    got = probes.sweep(worker, lambda_subject("float32"), [{n: exact(v, "float32") for n, v in point.items()}])[0]
    if got is None or got.size != 1 or np.isfinite(got).all():
        return False
    component, title, evidence, advice = RANGE_TEXT["elementwise"]
    found.add(LAMBDA, component, "forward", title, evidence.format(a=point["q1"] @ point["k1"], b=point["q2"] @ point["k2"], got=float(got.reshape(()))), advice)
    return True


VECTOR_LENGTHS = (1, 2, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 256, 257)
"""The vector lengths of the λ length probe: 1, then on both sides of common block and lane sizes."""


def lambda_length_probe(worker: Worker, rng: np.random.Generator, found: Found) -> bool:
    """λ for vectors of :data:`VECTOR_LENGTHS` elements (the probes' own are 3); whether it is wrong for some lengths only
    (a blocked or vectorised dot product whose tail or lanes go wrong). A length is wrong only when new vectors of that
    length are wrong too: a fault of some values (two dot products that happen to fall close) is no fault of a length."""

    def wrong_of(lengths: list[int]) -> list[int]:
        points = [lambda_values(rng, length=n) for n in lengths]
        return [n for n, point, got in zip(lengths, points, probes.sweep(worker, lambda_subject(), points))
                if got is None or got.size != 1 or not is_right(got.reshape(()), np.asarray(lambda_truth(point)))]  # fmt: skip

    found.probes.append(f"{LAMBDA}: vectors of other lengths")
    wrong = wrong_of(list(VECTOR_LENGTHS))
    if not wrong or len(wrong) == len(VECTOR_LENGTHS):
        return False
    wrong = wrong_of(wrong)
    if not wrong:
        return False
    right = [n for n in VECTOR_LENGTHS if n not in wrong]
    found.add(LAMBDA, "lambda", "forward", "λ is wrong for vectors of some lengths",
              f"λ is right for vectors of 3 and of {', '.join(map(str, right))} elements, and wrong (or fails) for {', '.join(map(str, wrong))}: "
              "the dot products go wrong for some lengths only (a loop over blocks or lanes whose last, shorter part is dropped, "
              "counted twice or padded wrongly?).", "compute q·k over every element once, whatever the length: torch.dot(q, k)")  # fmt: skip
    return True


def run(worker: Worker, rng: np.random.Generator, found: Found, forward: bool, gradients: bool, source: str | None,
        replayed: Sequence[tuple[str, ...]] = ()) -> None:  # fmt: skip
    """The λ probes: randomness, then (``forward``) structure, dependence, range, precision and layouts, then (``gradients``) the
    gradients, also with each set of inputs requiring grad of ``replayed`` (see :func:`grader.toolkit.slips.cut_subsets`)."""
    values = lambda_values(rng)
    base = randomness_probe(worker, lambda_subject(), values, LAMBDA_NAMES, found, source)
    if base is None:
        return
    if forward:
        if not is_right(base.reshape(()), np.asarray(lambda_truth(values))) and rounding_probe(worker, lambda_subject(), values, base, found):
            return  # rounded to a lower precision: what the other probes would read out of λ, or differentiate, is its noise
        localised = lambda_structure_probe(worker, rng, found) or lambda_dependence_probe(worker, rng, found) or \
            lambda_pairing_probe(worker, domain.offshoot(rng, "pairing"), found)
        localised = localised or lambda_range_probe(worker, rng, found) or lambda_length_probe(worker, rng, found)
        localised = localised or lambda_structure_probe(worker, domain.offshoot(rng, "float32 structure"), found, "float32")
        if not localised and base.size == 1:
            precision_finding(found, LAMBDA, base.reshape(()), np.asarray(lambda_truth(values))) or layout_probe(worker, lambda_subject, values, found, handled_by=PARAMETER_COMPONENTS[LAMBDA])
    if gradients:
        tied = {**values, "q2": values["q1"], "k2": values["k1"]}  # the two exponentials equal: a log of their difference is −∞
        runs = [GradientRun(values, grads) for grads in LAMBDA_RUNS] + replayed_runs(values, replayed, LAMBDA_RUNS)
        runs.append(GradientRun(values, LAMBDA_NAMES, NEGATIVE_UPSTREAM, cotangent=np.asarray(-UPSTREAM)))
        runs += [GradientRun(_large_exponents(values), LAMBDA_NAMES, LARGE_EXPONENTS), GradientRun(tied, LAMBDA_NAMES, TIED, "lambda", explanation=AT_THE_TIE)]
        gradients_probe(worker, lambda_subject(), runs, np.asarray(UPSTREAM), rng, found, source)
