"""Misconception diagnosis: the variants, the matching rule, and hints in real grading runs."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
from conftest import Graded, grade_many
from corpus.mutants import CORRECT_DIR, MUTANTS, mutant_source

from grader.core.plugin import GradingContext
from grader.exercises.diffattn import misconceptions as mc
from grader.exercises.diffattn import suite
from grader.exercises.diffattn.cases import AttentionCase
from grader.exercises.diffattn.expected import Truth
from grader.exercises.diffv2.cases import Case as V2Case
from grader.toolkit import domain
from grader.toolkit import misconceptions as engine
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison

SEED = 7
VARIANTS = [(family, variant) for family in mc.FAMILIES for variant in family.variants]


def _cases(family: engine.Family) -> list:
    """Every case of the family's evidence sets at SEED."""
    return [case for case_set, _ in family.evidence for case in case_set(SEED)]


def _compared(family: engine.Family, case) -> set[str]:
    """The results a submission returns for ``case``: the output and, for gradients, the requested ones."""
    return {"output"} | (set(suite.gradient_positions(case)) if family.name == "gradients" else set())


@pytest.fixture(scope="module")
def truths() -> dict[str, list[tuple[object, engine.Prediction]]]:
    """(case, truth) of every evidence case, per family."""
    return {family.name: [(case, family.truth(case)) for case in _cases(family)] for family in mc.FAMILIES}


def _observations(family: engine.Family, truths: dict, make, noise: float = 0.0) -> list[engine.Observation]:
    """Observations whose results are ``make(case, truth)``, nudged by ``noise`` times their allowance."""
    rng = np.random.default_rng(0)
    found = []
    for case, truth in truths[family.name]:
        made = make(case, truth)
        got = {}
        for name in _compared(family, case):
            values, allowed = np.asarray(made[name].values), np.asarray(made[name].allowed)
            got[name] = values + noise * np.nan_to_num(allowed) * rng.uniform(-1.0, 1.0, values.shape)
        found.append(engine.Observation(case, got, truth))
    return found


def _truth_itself(case, truth: engine.Prediction) -> engine.Prediction:
    return truth


@pytest.mark.parametrize(("family", "variant"), VARIANTS, ids=[v.id for _, v in VARIANTS])
def test_every_form_differs_from_the_truth(family: engine.Family, variant: engine.Variant, truths: dict) -> None:
    """Each form of each variant is far from the truth somewhere on a typical case set."""
    observed = _observations(family, truths, _truth_itself)
    for form in variant.forms:
        assert any(
            engine.far_apart(form(seen.case, seen.truth)[name], seen.truth[name]) for seen in observed for name in seen.got
        ), variant.id


@pytest.mark.parametrize(("family", "variant"), VARIANTS, ids=[v.id for _, v in VARIANTS])
def test_noisy_variant_output_is_diagnosed_as_that_variant(family: engine.Family, variant: engine.Variant, truths: dict) -> None:
    """Fed a form's own results plus noise within a tenth of the allowance, the matcher names that variant."""
    for form in variant.forms:
        observed = _observations(family, truths, form, noise=0.1)
        keys = tuple(sorted({name for seen in observed for name in seen.got}))
        assert engine.first_match(family.variants, observed, observed, keys) is variant


@pytest.mark.parametrize("family", mc.FAMILIES, ids=[f.name for f in mc.FAMILIES])
def test_the_truth_matches_no_variant(family: engine.Family, truths: dict) -> None:
    """Right results, up to their whole allowance off, are never diagnosed."""
    for noise in (0.0, 1.0):
        observed = _observations(family, truths, _truth_itself, noise)
        keys = tuple(sorted({name for seen in observed for name in seen.got}))
        assert engine.first_match(family.variants, observed, observed, keys) is None


def test_agreement_needs_the_same_shape_and_the_same_non_finite_elements() -> None:
    """NaN agrees with NaN only; a value outside the allowance or of another shape disagrees."""
    predicted = Truth(np.array([1.0, np.nan]), np.array([0.5, 0.5]))
    assert engine.agrees(np.array([1.4, np.nan]), predicted)
    assert not engine.agrees(np.array([1.6, np.nan]), predicted)
    assert not engine.agrees(np.array([1.0, 0.0]), predicted)
    assert not engine.agrees(np.array([1.0]), predicted)


def test_far_apart_counts_both_allowances_times_far() -> None:
    """Two results are far apart beyond FAR times the sum of their allowances, or with other shapes."""
    a = Truth(np.array([0.0]), np.array([1.0]))
    assert not engine.far_apart(a, Truth(np.array([1.9 * engine.FAR]), np.array([1.0])))
    assert engine.far_apart(a, Truth(np.array([2.1 * engine.FAR]), np.array([1.0])))
    assert engine.far_apart(a, Truth(np.zeros(2), np.ones(2)))


def test_float32_accuracy_on_float64_inputs_is_recognised(truths: dict) -> None:
    """float64 outputs off by float32-sized errors are diagnosed; exact ones, and float32-sized errors in float32, are not."""
    attention = next(f for f in mc.FAMILIES if f.name == "attention")
    rng = np.random.default_rng(1)

    def rounded_through_float32(case, truth: engine.Prediction) -> engine.Prediction:
        values, allowed = np.asarray(truth["output"].values), np.asarray(truth["output"].allowed)
        if case.dtype == "float64":  # half of float32's allowance: far above float64's
            values = values + 0.5 * engine.FLOAT32_WIDER * allowed * rng.uniform(0.5, 1, values.shape)
        return {"output": Truth(values, allowed)}

    assert engine.float32_accurate(_observations(attention, truths, rounded_through_float32))
    assert not engine.float32_accurate(_observations(attention, truths, _truth_itself))
    far_off = _observations(attention, truths, lambda case, truth: {"output": Truth(np.asarray(truth["output"].values) + 1.0, truth["output"].allowed)})
    assert not engine.float32_accurate(far_off)


def test_a_hint_never_changes_a_verdict() -> None:
    """A passed check gets no hint; a failure inside the diagnosis leaves the failed check without one."""
    grading = GradingContext(seed=SEED, worker=None, functions={}, current="check")
    mc.CATALOGUE.attach_hint(grading, Comparison(True, "fine", 0.1), suite.attention_causal)
    assert grading.explanations == {}
    mc.CATALOGUE.attach_hint(grading, Comparison(False, "wrong", None), CaseSet("broken", lambda seed: 1 / 0))
    assert grading.explanations == {"check": {}}


# ---- end to end -------------------------------------------------------------------

MUTANT_NAMES = ("mask_first_branch_only", "backward_no_rowsum")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Graded]:
    """Two mutants and one correct style graded with the CLI, two at a time."""
    root = tmp_path_factory.mktemp("misconceptions")
    jobs: dict[str, tuple[Path, int]] = {"einsum": (CORRECT_DIR / "einsum.py", SEED)}
    for mutant in MUTANTS:
        if mutant.name in MUTANT_NAMES:
            path = root / f"{mutant.name}.py"
            path.write_text(mutant_source(mutant))
            jobs[mutant.name] = (path, SEED)
    return grade_many(jobs, root / "reports")


def test_mask_on_one_branch_gets_its_hint(runs: dict[str, Graded]) -> None:
    """Masking the first branch only is named on the failed value check, in the JSON, HTML and summary."""
    run = runs["mask_first_branch_only"]
    check = run.check("causal_values")
    assert (check["status"], check["score"]) == ("failed", 0.0)
    assert check["hint"]["id"] == "mask_first_branch_only"
    assert check["hint"]["maths"] == "A2 = softmax(Q2K2ᵀ/√D + M): you left out M"
    assert run.check("lambda_values")["hint"] is None  # passed
    assert 'data-hint="mask_first_branch_only"' in run.html
    assert "hint: Your output matches the causal mask on the first branch only." in run.stdout


def test_gradient_bug_gets_its_hint_on_the_gradient_checks_only(runs: dict[str, Graded]) -> None:
    """A backward pass without the softmax row sum is named where q and k gradients fail, nowhere else."""
    run = runs["backward_no_rowsum"]
    hinted = {c["id"]: c["hint"]["id"] for t in run.report["tiers"] for c in t["checks"] if c["hint"]}
    assert hinted == {
        check: "backward_no_rowsum"
        for check in ("branch_one_gradients", "branch_two_gradients", "strided_gradients", "end_to_end_gradients")
    }


def test_correct_submission_gets_no_hint(runs: dict[str, Graded]) -> None:
    """A correct implementation scores 100 with every hint null."""
    run = runs["einsum"]
    assert run.report["score"] == 100.0
    assert [c["hint"] for t in run.report["tiers"] for c in t["checks"]] == [None] * 28
    assert "hint:" not in run.stdout and 'class="hint"' not in run.html


def test_float32_sized_errors_in_a_few_elements_are_no_float32_computation(truths: dict) -> None:
    """float64 outputs off by float32-sized errors in one element of eight (a clamp of some inputs) are not float32 inside."""
    attention = next(f for f in mc.FAMILIES if f.name == "attention")

    def clamped_here_and_there(case, truth: engine.Prediction) -> engine.Prediction:
        values, allowed = np.asarray(truth["output"].values), np.asarray(truth["output"].allowed)
        if case.dtype == "float64":
            values = values + 0.5 * engine.FLOAT32_WIDER * allowed * (np.arange(values.size).reshape(values.shape) % 8 == 0)
        return {"output": Truth(values, allowed)}

    assert not engine.float32_accurate(_observations(attention, truths, clamped_here_and_there))


@pytest.mark.parametrize("exercise", ["diffattn", "diffv2"])
def test_calls_at_a_large_models_length_are_read_for_no_hint(exercise: str) -> None:
    """Every output set holds a call past 1024 tokens, yet the catalogue reads (and predicts for) the shorter calls only (but
    those that pass one tensor for several arguments)."""
    catalogue = importlib.import_module(f"grader.exercises.{exercise}.misconceptions").CATALOGUE
    kind, length = (AttentionCase, lambda case: case.q1.shape[2]) if exercise == "diffattn" else (V2Case, lambda case: case.q.shape[1])
    drawn = [case for case_set in catalogue.checked for case in case_set(1) if isinstance(case, kind)]
    long = [case for case in drawn if length(case) > domain.LONGEST_BUFFER]
    assert long and all(not catalogue.readable(case) for case in long)
    shorter = [case for case in drawn if length(case) <= domain.LONGEST_BUFFER]
    # (a tensor passed for several arguments is read for no hint either: its one gradient is the sum of theirs)
    assert all(catalogue.readable(case) == (not getattr(case, "one_object", ())) for case in shorter)
