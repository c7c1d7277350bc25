"""The probes: the toolkit's (grader/toolkit/probes.py, attention_maps.py) and the first exercise's declarations of them.

Each small wrong implementation of tests/corpus/probes runs in a real worker
through the exercise's probes; its first finding (in the order root causes
take: contract, forward, gradients) must name the function and component of
its bug, and correct implementations must get no finding at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, grade
from corpus.probes import REPLACED, VARIANTS, place, source

from grader.exercises.diffattn import attention_probes, lambda_probes
from grader.toolkit.findings import Found, failing_mode, gradient_finding, probed_aspects, unexplained_maps
from grader.toolkit import attention_maps, domain, probes
from grader.toolkit import findings as findings_module
from grader.toolkit.attention_maps import MapModel
from grader.toolkit.rootcause import STAGES, Finding, Role
from grader.worker.client import ForkServer, Worker, WorkerLimits

FUNCTIONS = ["differential_lambda", "differential_attention"]


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    """One fork server for every submission of this module."""
    with ForkServer() as server:
        yield server


def findings(forks: ForkServer, text: str) -> list[Finding]:
    """Every finding of both functions' probes (forward and gradients) for a submission, in root-cause order."""
    worker = Worker(text, "submission.py", FUNCTIONS, WorkerLimits(call_timeout_s=20), forks)
    try:
        assert worker.load()["status"] == "ok"
        found = Found()
        rng = domain.generator(1, "probes")
        lambda_probes.run(worker, rng, found, True, True, text)
        attention_probes.run(worker, rng, found, True, True, text)
    finally:
        worker.close()
    return sorted(found.findings, key=lambda f: STAGES.index(f.stage))


@pytest.mark.parametrize("name", sorted(VARIANTS) + sorted(REPLACED))
def test_the_first_finding_localises_the_bug(forks: ForkServer, name: str) -> None:
    """Sign, branches, mask (filled with 0, on one branch, hiding the diagonal, ...), softmax axis, transposition,
    scales, λ's structure, randomness, stability, precision, detached paths
    (a whole input, or a piece such as the softmax's normaliser), a custom backward wrong for one input."""
    found = findings(forks, source(name))
    assert found, f"{name}: no finding"
    assert (found[0].function, found[0].component) == place(name), [(f.component, f.title) for f in found]


@pytest.mark.parametrize("path", ["reference/diff_attention.py", "tests/corpus/correct/custom_function.py",
                                  "tests/corpus/correct/online_softmax.py", "tests/corpus/correct/finite_mask.py"])  # fmt: skip
def test_correct_implementations_get_no_finding(forks: ForkServer, path: str) -> None:
    """Every probe, forward and gradients, runs on right code without finding anything."""
    assert findings(forks, (ROOT / path).read_text()) == []


def test_the_base_of_the_variants_is_right(forks: ForkServer) -> None:
    """The short correct file the variants edit gets no finding either."""
    assert findings(forks, source("base")) == []


def test_large_logits_blame_no_stability_when_ordinary_float32_logits_fail_too(forks: ForkServer) -> None:
    """An attention that raises for every float32 call: the large-logit calls fail, and so do ordinary ones, so no stability finding."""
    text = source("base").replace("    return (_map(", "    if q1.dtype == torch.float32:\n        raise RuntimeError('float32')\n    return (_map(")
    assert "raise RuntimeError" in text
    assert [f.component for f in findings(forks, text) if f.component == "stability"] == []


def test_a_custom_backward_is_named_with_its_inputs(forks: ForkServer) -> None:
    """The gradient that disagrees with the submission's own forward is named, and those that agree too."""
    found = [f for f in findings(forks, source("attention_backward_wrong_for_one_input")) if f.component == "backward"]
    assert found[0].inputs == ("coefficient",) and re.search(r"(q1, )?k1, (q2, )?k2, value agree", found[0].evidence)  # (q1, q2 in a run where they require grad)


def test_a_detached_branch_names_its_inputs(forks: ForkServer) -> None:
    """No gradient reaches the second branch's queries and keys: the finding names them, and only them."""
    found = [f for f in findings(forks, source("second_branch_detached")) if f.component == "graph"]
    assert found[0].inputs == ("q2", "k2")


def _judged(statuses: dict[str, str], source: str, parts: dict[str, str] | None = None) -> Finding:
    """The one finding a gradient comparison with these per-input statuses gives for ``source`` (``parts``: as gradient_finding)."""
    found = Found()
    result = probes.Consistency(tuple(probes.Agreement(name, status, 1.0, 0.5) for name, status in statuses.items()))
    assert gradient_finding(found, "f", "", result, source, parts)
    (finding,) = found.findings
    return finding


def test_a_gradient_at_odds_with_its_forward_is_blamed_on_what_computed_it() -> None:
    """A hand-written backward is at fault when there is one; without one, a piece cut out of the graph; a NaN
    gradient beside finite differences of a finite forward is a stability fault of the backward's inputs."""
    statuses = {"x": "differs", "y": "agrees"}
    custom = _judged(statuses, "class F(torch.autograd.Function):\n    def backward(ctx, g): ...")
    assert (custom.component, custom.inputs) == ("backward", ("x",)) and "y agree" in custom.evidence
    autograd = _judged(statuses, "def f(x, y):\n    return x / x.sum().detach()")
    assert (autograd.component, autograd.inputs) == ("graph", ("x",)) and ".detach()" in autograd.advice
    assert _judged({"x": "not_finite"}, "def f(x):\n    return torch.where(x > 0, x, torch.exp(x * 1e3))").component == "stability"
    assert _judged({"x": "not_finite"}, "def backward(ctx, g): ...").component == "backward"


def test_a_gradient_hidden_for_one_input_alone_is_the_part_that_handles_it() -> None:
    """Without a hand-written backward, a hidden piece of the gate logits' gradient alone is the gate's; of several inputs, the graph's."""
    gate = {"lambda_logits": "gate"}
    alone = _judged({"lambda_logits": "differs", "q": "agrees"}, "def f(q, lambda_logits): ...", gate)
    assert (alone.component, alone.inputs) == ("gate", ("lambda_logits",))
    assert _judged({"lambda_logits": "differs", "q": "differs"}, "def f(q, lambda_logits): ...", gate).component == "graph"
    assert _judged({"lambda_logits": "differs"}, "def backward(ctx, g): ...", gate).component == "backward"


# ---- the toolkit on its own ------------------------------------------------------------------


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture
def tensors() -> dict[str, np.ndarray]:
    """Queries and keys of two branches, T = 5 and D = 3."""
    rng = np.random.default_rng(3)
    return {name: rng.standard_normal((5, 3)) for name in ("q1", "k1", "q2", "k2")}


EXPECTED = MapModel("q1", "k1", "causal", scale=1 / math.sqrt(3))
SOURCES = [("q1", "k1"), ("q1", "k2"), ("q2", "k1"), ("k1", "q1")]
SCALES = {"1/√D": 1 / math.sqrt(3), "1/D": 1 / 3, "1/√T": 1 / math.sqrt(5), "1": 1.0}


def test_a_right_map_fits_the_expected_model(tensors: dict[str, np.ndarray]) -> None:
    """The contract's map is explained with no change."""
    fit = attention_maps.explain(attention_maps.predict(EXPECTED, tensors), tensors, EXPECTED, SOURCES, SCALES)
    assert fit is not None and fit.changes == () and fit.scale_name == "1/√D"


@pytest.mark.parametrize(
    "model, changes, scale",
    [
        (MapModel("q1", "k1", "causal", scale=1 / 3), ("scale",), "1/D"),
        (MapModel("q1", "k1", "causal", scale=0.9), ("scale",), None),
        (MapModel("q1", "k1", "none", scale=1 / math.sqrt(3)), ("mask",), "1/√D"),
        (MapModel("q1", "k1", "zero", scale=1 / math.sqrt(3)), ("mask",), "1/√D"),
        (MapModel("q1", "k1", "after", scale=1 / math.sqrt(3)), ("mask",), "1/√D"),
        (MapModel("q1", "k1", "causal", "queries", scale=1 / math.sqrt(3)), ("axis",), "1/√D"),
        (MapModel("q1", "k1", "causal", transposed=True, scale=1 / math.sqrt(3)), ("transposed",), "1/√D"),
        (MapModel("q1", "k2", "causal", scale=1 / math.sqrt(3)), ("key",), "1/√D"),
        (MapModel("q1", "k1", "strict", scale=1 / math.sqrt(5)), ("mask", "scale"), "1/√T"),
    ],
)
def test_a_wrong_map_is_explained_by_its_changes(tensors: dict[str, np.ndarray], model: MapModel, changes: tuple[str, ...], scale: str | None) -> None:
    """Scale (named or fitted), mask, axis, transposition and the logits' source, alone or two at once."""
    fit = attention_maps.explain(attention_maps.predict(model, tensors), tensors, EXPECTED, SOURCES, SCALES)
    assert fit is not None and fit.changes == changes and fit.scale_name == scale
    assert fit.model.scale == pytest.approx(model.scale)


def test_a_map_outside_the_family_is_not_explained(tensors: dict[str, np.ndarray]) -> None:
    """A map no model of at most two changes gives is left unexplained rather than forced."""
    noise = np.random.default_rng(0).uniform(size=(5, 5))
    assert attention_maps.explain(noise / noise.sum(axis=1, keepdims=True), tensors, EXPECTED, SOURCES, SCALES) is None


def test_normalised_axes() -> None:
    """The axes along which every line sums to 1: keys, queries, heads, or a softmax over an axis of one element."""
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((1, 2, 4, 4))
    assert attention_maps.normalised_axes(_softmax(logits)) == [3]
    assert 1 in attention_maps.normalised_axes(np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True))
    assert attention_maps.normalised_axes(np.ones((1, 2, 4, 4))) == [0]


def test_affine_fit_leaves_non_finite_elements_out() -> None:
    """y = a + x·b is recovered where every point is finite; NaN elsewhere, and the residual ignores it."""
    a, b = np.array([1.0, 2.0, np.nan]), np.array([3.0, -1.0, 0.0])
    points = [a + x * b for x in (0.0, 0.5, 2.0)]
    intercept, slope, residual = probes.affine_fit([0.0, 0.5, 2.0], points)
    assert np.allclose(intercept[:2], a[:2]) and np.allclose(slope[:2], b[:2]) and np.isnan(intercept[2]) and residual < 1e-12


def test_a_scale_slightly_off_is_float32_only_when_it_is_a_float32_rounding_of_the_root() -> None:
    """s = float32(1/√D) and 1/float32(√D) are float32 scales; log2(e) written as 1.442695 folded into an exp2 is a short constant."""
    right = 1 / math.sqrt(34)
    for scale in (float(np.float32(right)), 1.0 / float(np.float32(math.sqrt(34)))):
        assert attention_maps.scale_slip(scale, right, "q kᵀ")[0] == "The scale 1/√D is computed in float32"
    title, evidence, advice = attention_maps.scale_slip(right * 1.442695 / math.log2(math.e), right, "q kᵀ")
    assert title == "The logit scale is slightly off 1/√D" and "not float32's rounding" in evidence and "math.log2(math.e)" in advice


def _guarded(model: MapModel, tensors: dict[str, np.ndarray], epsilon: float, unshifted: bool = False) -> np.ndarray:
    """``model``'s map with ``epsilon`` added to each row's sum of exponentials (taken before the maximum is subtracted with ``unshifted``)."""
    logits = model.scale * tensors[model.query] @ tensors[model.key].T
    visible = attention_maps.keep(len(logits), model.mask)
    peaks = 0.0 if unshifted else np.where(visible, logits, -np.inf).max(axis=1, keepdims=True)
    weights = np.where(visible, np.exp(logits - peaks), 0.0)
    return weights / (weights.sum(axis=1, keepdims=True) + epsilon)


def test_an_epsilon_in_the_softmax_denominator_is_fitted_and_named(tensors: dict[str, np.ndarray]) -> None:
    """One ε for every row, before or after the shift; float32's machine epsilon in float64 sums is the dtype's fault."""
    maps = [(_guarded(EXPECTED, tensors, 1e-6), tensors)]
    found = attention_maps.denominator_epsilon(maps, EXPECTED)
    assert found is not None and found.epsilon == pytest.approx(1e-6, rel=1e-6) and not found.unshifted
    assert attention_maps.epsilon_slip(found, "float64")[0] == "softmax"
    before = attention_maps.denominator_epsilon([(_guarded(EXPECTED, tensors, 1e-7, unshifted=True), tensors)], EXPECTED)
    assert before is not None and before.unshifted and before.epsilon == pytest.approx(1e-7, rel=1e-6)
    machine = attention_maps.denominator_epsilon([(_guarded(EXPECTED, tensors, float(np.finfo(np.float32).eps)), tensors)], EXPECTED)
    assert machine is not None and attention_maps.epsilon_slip(machine, "float64")[:2] == (
        "dtype", "The softmax adds float32's machine epsilon to its sums for float64 inputs")


def test_a_right_map_or_one_factor_for_every_row_is_no_epsilon(tensors: dict[str, np.ndarray]) -> None:
    """The right map has no shortfall; every row times one factor gives a different ε per row; a map off by noise is not proportional."""
    right = attention_maps.predict(EXPECTED, tensors)
    assert attention_maps.denominator_epsilon([(right, tensors)], EXPECTED) is None
    assert attention_maps.denominator_epsilon([(right * (1 - 1e-6), tensors)], EXPECTED) is None
    noisy = right * (1 - 1e-6 * np.random.default_rng(0).uniform(1.0, 2.0, right.shape))
    assert attention_maps.denominator_epsilon([(noisy, tensors)], EXPECTED) is None


def test_common_factor_is_one_factor_for_every_entry_or_none() -> None:
    """An offset that moves every entry by half of it gives 0.5; uneven moves or a non-finite output give None."""
    base = np.arange(6.0).reshape(2, 3)
    assert probes.common_factor(base, base + 1.5, 3.0) == pytest.approx(0.5)
    assert probes.common_factor(base, base + np.array([1.5, 1.5, 3.0]), 3.0) is None
    assert probes.common_factor(base, np.full((2, 3), np.nan), 3.0) is None


def test_an_effect_says_what_was_ignored_and_what_leaked() -> None:
    """A perturbation's declared places: nothing moved where something must, something moved where nothing may."""
    perturbation = probes.Perturbation("k", (..., -1, slice(None)), "the last key", required=(..., -1, slice(None)), forbidden=(..., slice(0, -1), slice(None)))
    base = np.zeros((1, 1, 3, 2))
    moved = base.copy()
    moved[..., 0, :] = 1.0
    effect = probes.Effect(perturbation, probes.moved(base, moved))
    assert effect.ignored and effect.leaked


def test_the_forward_is_probed_in_the_autograd_mode_where_values_fail() -> None:
    """Wrong only under no_grad or inference_mode while grad-enabled calls are right: probe there; otherwise grad enabled."""
    assert failing_mode([("enabled", True), ("no_grad", False), ("inference_mode", True)]) == "no_grad"
    assert failing_mode([("enabled", True), ("inference_mode", False)]) == "inference_mode"
    assert failing_mode([("enabled", True), ("no_grad", False), ("inference_mode", False)]) == "no_grad"
    assert failing_mode([("enabled", False), ("no_grad", False)]) == "enabled"
    assert failing_mode([("no_grad", False)]) == "enabled"  # no right grad-enabled call to contrast with
    assert failing_mode([("enabled", True)]) == "enabled"
    assert failing_mode(call for call in [("enabled", True), ("no_grad", False)]) == "no_grad"  # a generator is read once


def test_a_check_of_both_functions_sends_the_probes_of_those_with_failures_of_their_own() -> None:
    """An end-to-end failure goes to both functions, unless only one of them has failed checks of its own."""
    both, attention, lam = Role(("L", "A"), "values"), Role(("A",), "values"), Role(("L",), "gradients")
    assert probed_aspects([both], ("L", "A")) == {"L": {"values"}, "A": {"values"}}
    assert probed_aspects([both, attention], ("L", "A")) == {"L": set(), "A": {"values"}}
    assert probed_aspects([both, attention, lam], ("L", "A")) == {"L": {"gradients", "values"}, "A": {"values"}}


@pytest.mark.parametrize("tokens_axis", [-2, 1])
def test_large_logits_reach_hundreds_as_each_kind_says(tokens_axis: int) -> None:
    """"all" scales the queries; "future" puts the last key about 300 above every query's other keys; "below" puts every
    logit near −160, where exp without each row's maximum subtracted is 0 in float32 (and a softmax 0/0)."""
    rng = np.random.default_rng(3)
    shape = (2, 3, 9, 8) if tokens_axis == -2 else (2, 9, 3, 8)
    q, k = rng.standard_normal(shape), rng.standard_normal(shape)
    direction = rng.standard_normal(8)
    direction /= np.linalg.norm(direction)
    heads_first = (lambda x: x) if tokens_axis == -2 else (lambda x: np.swapaxes(x, 1, 2))
    logits = {kind: np.einsum("bhtd,bhsd->bhts", *map(heads_first, probes.large_logits(q, k, kind, direction, tokens_axis, 60.0))) / math.sqrt(8)
              for kind in probes.LARGE_LOGITS}  # fmt: skip
    np.testing.assert_allclose(logits["all"], 60.0 * np.einsum("bhtd,bhsd->bhts", heads_first(q), heads_first(k)) / math.sqrt(8))
    assert (logits["future"][..., -1] - logits["future"][..., :-1].max(axis=-1) > 250).all()
    assert (logits["below"] < -140).all() and (logits["below"] > -180).all()
    assert not np.exp(logits["below"].astype(np.float32)).any()
    with pytest.raises(ValueError, match="'kind' must be one of"):
        probes.large_logits(q, k, "sideways", direction, tokens_axis, 60.0)


def test_rows_summing_to_one_are_a_softmax_fault_only_when_some_keys_keep_their_right_ratios() -> None:
    """Shifts per block of keys or per key (a maximum over the queries) are a softmax fault; logits of other inputs: silent."""
    rng = np.random.default_rng(2)
    visible = attention_maps.keep(5, "causal")
    logits = np.where(visible, rng.standard_normal((1, 2, 5, 5)), -np.inf)
    right = _softmax(logits)
    shifted = np.exp(logits - np.where(np.arange(5) < 2, 0.0, 1.5))  # keys 2 to 4 shifted by 1.5 more than keys 0 and 1
    found = Found()
    assert unexplained_maps(found, "f", shifted / shifted.sum(axis=-1, keepdims=True), "test", right)
    assert [(f.component, f.title) for f in found.findings] == [("softmax", "The weights are not a softmax of the logits")]
    by_key = np.exp(logits - np.nanmax(np.where(visible, logits, np.nan), axis=-2, keepdims=True))  # a maximum over the queries
    found = Found()
    assert unexplained_maps(found, "f", by_key / by_key.sum(axis=-1, keepdims=True), "test", right)
    assert [f.component for f in found.findings] == ["softmax"]
    other = _softmax(np.where(visible, rng.standard_normal((1, 2, 5, 5)), -np.inf))  # a softmax of logits of other inputs
    found = Found()
    assert not unexplained_maps(found, "f", other, "test", right) and found.findings == []


def test_keys_weighing_whole_multiples_of_their_share_are_counted_more_than_once() -> None:
    """The last key entering each row once more per position past it (clamped indices left unmasked): a mask fault, and
    a shift of e (a whole multiple only by accident) stays a softmax fault."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((1, 2, 6, 6))
    right = _softmax(logits)
    copies = np.ones((6, 6))
    copies[:, -1] += np.arange(6)  # query t counts the last key t + 1 times
    counted = right * copies
    found = Found()
    assert unexplained_maps(found, "f", counted / counted.sum(axis=-1, keepdims=True), "test", right, causal=False)
    assert [(f.component, f.title) for f in found.findings] == [("mask", "Some keys are counted more than once")]
    assert "up to 6×" in found.findings[0].evidence
    shifted = right * np.where(np.arange(6) < 3, 1.0, np.e)
    found = Found()
    assert unexplained_maps(found, "f", shifted / shifted.sum(axis=-1, keepdims=True), "test", right, causal=False)
    assert [f.component for f in found.findings] == ["softmax"]


def test_rows_at_scales_of_their_own_are_a_scale_fault_named_by_the_queries_length() -> None:
    """Unit-length queries give each row the scale 1/|q_t|: named so; another scale per row is a scale fault; one scale
    for every row is left to the map models."""
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    visible = attention_maps.keep(6, "causal")
    logits = np.where(visible, q @ k.T, -np.inf)
    structure = MapModel("q", "k", "causal")
    for per_row, words in ((1 / np.linalg.norm(q, axis=-1), "unit length"), (np.linspace(0.2, 0.9, 6), "differs from row to row")):
        found = Found()
        assert findings_module.row_scale_finding(found, "f", [(_softmax(logits * per_row[:, None]), {"q": q, "k": k})], structure, 0.5)
        assert found.findings[0].component == "scale" and words in found.findings[0].evidence
    assert not findings_module.row_scale_finding(Found(), "f", [(_softmax(logits * 0.3), {"q": q, "k": k})], structure, 0.5)


def test_float32_arithmetic_is_told_from_small_weights_lost_by_how_many_elements_are_off() -> None:
    """A float64 output off by float32's accuracy in nearly every element is computed in float32 (dtype); one off by as little
    in a few elements only has lost small weights (softmax), and the evidence gives the share of elements off."""
    rng = np.random.default_rng(5)
    expected = rng.normal(size=(1, 2, 40, 8))
    dense, sparse = Found(), Found()
    assert findings_module.precision_finding(dense, "f", expected.astype(np.float32).astype(np.float64) + 1e-7 * expected, expected)
    assert (dense.findings[0].component, dense.findings[0].title) == ("dtype", "float64 inputs are computed in float32")
    few = expected.copy()
    few[0, 1, 30:33] += 2e-6
    assert findings_module.precision_finding(sparse, "f", few, expected)
    assert (sparse.findings[0].component, sparse.findings[0].title) == ("softmax", "Small attention weights are lost")
    assert "off in only 3.8% of its elements, by at most 2e-06" in sparse.findings[0].evidence


def test_a_softmax_that_zeroes_weights_far_below_the_row_maximum_is_not_called_float32(tmp_path: Path) -> None:
    """Weights more than 16 below their row's largest logit set to 0: errors of about 1e-7 in a few rows of long sequences, a
    lost-weights finding (softmax), not float32 arithmetic chosen by the length."""
    run = grade(ROOT / "tests/corpus/diagnosis_dusk/wrong/att_negligible_keys_zeroed_below_row_max.py", tmp_path, 20261201, "--no-preview")
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == ("differential_attention", "softmax", "Small attention weights are lost")
