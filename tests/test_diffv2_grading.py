"""The DIFF V2 exercise graded end to end: the reference, the stub, its corpus, its checks and its catalogue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, Graded, grade, grade_many

from grader.core import registry
from grader.core.experiment import Measured, section
from grader.core.plugin import MARKER
from grader.exercises.diffv2 import expected, misconceptions, suite, toy
from grader.reports.schema import validate
from grader.toolkit.misconceptions import agrees, far_apart
from grader.toolkit.tolerance import Truth

REFERENCE = ROOT / "reference" / "diff_v2_attention.py"
STUB = ROOT / "exercise" / "diff_v2_attention.py"
CORPUS = Path(__file__).resolve().parent / "corpus" / "v2"
TIERS = ("T1", "T2", "T3")
SEED = 20261201


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Graded]:
    """The reference graded with seeds 3 and 4, and with seed 5 with its preview curve."""
    workdir = tmp_path_factory.mktemp("v2_reference")
    runs = {int(name[4:]): run for name, run in grade_many({f"seed{s}": (REFERENCE, s) for s in (3, 4)}, workdir).items()}
    runs[5] = grade(REFERENCE, workdir / "seed5", 5, "--reference", str(REFERENCE))
    return runs


def test_the_exercise_is_registered() -> None:
    """diff_v2 loads from the registry with its functions, files and tiers."""
    exercise = registry.named("diff_v2")
    assert exercise.functions == ("gqa_attention", "diff_v2_attention")
    assert exercise.tiers == {"T1": "Contract", "T2": "Values", "T3": "Gradients"}
    for path in (exercise.default_submission, exercise.statement, exercise.default_reference):
        assert (ROOT / path).is_file()
    assert (exercise.checks_dir / "pytest.ini").is_file()


def test_reference_gets_full_marks_on_several_seeds(reference_runs: dict[int, Graded]) -> None:
    """100/100, exit 0, a valid report naming the exercise, for every seed."""
    for seed, run in reference_runs.items():
        assert run.code == 0, (seed, run.stdout, run.stderr)
        assert run.report is not None and run.report["score"] == run.report["max_score"] == 100.0
        assert validate(run.report) == []
        assert run.report["exercise"] == "diff_v2" and run.report["exercise_version"] == "1.0"


def test_reference_toy_curves_follow_one_minus_sigmoid(reference_runs: dict[int, Graded]) -> None:
    """The preview and the graded curves equal 1 − σ(ℓ) over the sweep and along the ramp."""
    report = reference_runs[5].report
    assert report is not None
    panels = {panel["id"]: {s["role"]: s for s in panel["series"]} for panel in report["experiment"]["panels"]}
    assert set(panels) == {"offset_response", "per_token"}
    for panel in panels.values():
        for role in ("preview", "submission"):
            assert panel[role]["values"] == pytest.approx(panel["expected"]["values"], abs=1e-12)
    x = next(p["x"]["values"] for p in report["experiment"]["panels"] if p["id"] == "offset_response")
    assert x[0] == -6.0 and x[-1] == 6.0


def test_stub_gets_nothing(tmp_path: Path) -> None:
    """The untouched stub scores 0 with exit 1, every check saying what is not implemented."""
    run = grade(STUB, tmp_path, 7)
    assert run.code == 1 and run.report is not None and run.report["score"] == 0.0
    messages = [c["message"] for t in run.report["tiers"] for c in t["checks"]]
    assert all("not implemented yet" in m for m in messages)


def _declared() -> list[dict[str, Any]]:
    """Every check's marker arguments, from the check modules."""
    found = []
    for module in ("test_t1_contract", "test_t2_values", "test_t3_gradients"):
        loaded = __import__(f"grader.exercises.diffv2.checks.{module}", fromlist=["_"])
        for name in dir(loaded):
            marks = getattr(getattr(loaded, name), "pytestmark", [])
            found += [{"name": name, **m.kwargs} for m in marks if m.name == MARKER]
    return found


def test_checks_add_up_to_100_points() -> None:
    """T1 20, T2 40, T3 40; the strided and large-logit checks are hidden."""
    declared = _declared()
    totals = {tier: sum(c["points"] for c in declared if c["tier"] == tier) for tier in TIERS}
    assert totals == {"T1": 20.0, "T2": 40.0, "T3": 40.0}
    hidden = {c["name"] for c in declared if c.get("visibility") == "hidden"}
    assert hidden == {"test_strided_inputs_accepted", "test_large_logit_values", "test_strided_values", "test_strided_gradients"}


def test_case_sets_cover_the_domain() -> None:
    """The sets hold Hkv = 1, Hkv = Hq, G = 2 and 4, T = 1, T past 256, both dtypes, saturated and zero gates, every layout."""
    drawn = [case for case_set in suite.SETS for case in case_set(SEED)]
    assert any(c.k.shape[2] == 1 for c in drawn) and any(c.function == "gqa_attention" and c.group == 1 for c in drawn)
    assert {2, 4} <= {c.group for c in drawn if c.function == "diff_v2_attention"}
    assert any(c.q.shape[1] == 1 for c in drawn) and any(c.q.shape[1] > 256 for c in drawn)
    assert {c.dtype for c in drawn} == {"float32", "float64"}
    gates = np.concatenate([c.lambda_logits.ravel() for c in drawn if c.lambda_logits is not None])
    assert (gates >= 100).any() and (gates <= -100).any() and (gates == 0).any()
    layouts = {layout for c in drawn for layout in c.memory_layouts}
    assert layouts >= {"contiguous", "transposed", "heads_permuted", "sliced", "fused", "offset"}
    assert all(case_set(SEED) is case_set(SEED) for case_set in suite.SETS)  # drawn once per seed: truths are cached per case object


def test_toy_frame_fits_the_experiment_format() -> None:
    """The frame and a run measured by the oracle itself make a valid experiment section."""
    frame = toy.frame(SEED)
    pairs, offset = toy.pairs(SEED)
    factors = [float(np.mean(expected.offset_response(p.plain, p.shifted).values @ offset / (offset @ offset))) for p in pairs]
    measured = Measured({"offset_response": factors[: len(toy.SWEEP)], "per_token": [None] * toy.TOKENS})
    found = section(frame, measured, None, None, "not run")
    assert [panel["id"] for panel in found["panels"]] == ["offset_response", "per_token"]
    by_role = {series["role"]: series for series in found["panels"][0]["series"]}
    assert by_role["preview"]["values"] == pytest.approx(by_role["expected"]["values"], abs=1e-12)
    assert by_role["submission"]["values"] is None and by_role["submission"]["note"] == "not run"


def test_no_form_coincides_with_the_truth_everywhere_and_right_results_match_none() -> None:
    """On the value sets, every variant is far from the truth on some case, and the truth shifted by its allowance agrees with no variant that is."""
    for family in misconceptions.CATALOGUE.families:
        sets = [case_set for case_set, _ in family.evidence]
        drawn = [c for case_set in sets for c in case_set(SEED) if c.function == family.function]
        for variant in family.variants:
            for form in variant.forms:
                distinct = False
                for case in drawn:
                    truth = family.truth(case)
                    try:
                        predicted = form(case, truth)
                    except ValueError:  # a broadcast the submission's call would raise on too
                        continue
                    for name, right in truth.items():
                        shifted = Truth(right.values + right.allowed * np.where(np.arange(right.values.size).reshape(right.values.shape) % 2, 1.0, -1.0), right.allowed)
                        if far_apart(predicted[name], right):
                            distinct = True
                            assert not agrees(shifted.values, predicted[name]), (variant.id, case.label())
                assert distinct, variant.id


@pytest.fixture(scope="module")
def corpus_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every file of tests/corpus/v2 graded in one ``diffgrade batch`` (one fork server, one preparation): "correct/name" or "wrong/name" -> report."""
    students = tmp_path_factory.mktemp("v2_class")
    for path in sorted(CORPUS.glob("*/*.py")):
        (students / f"{path.parent.name}__{path.name}").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path_factory.mktemp("v2_graded")
    command = [sys.executable, "-m", "grader", "batch", str(students), "--out", str(out), "--seed", str(SEED), "--exercise", "diff_v2"]
    subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    return {
        folder.name.replace("__", "/", 1): json.loads((folder / "report.json").read_text(encoding="utf-8"))
        for folder in out.iterdir()
        if (folder / "report.json").is_file()
    }


def test_every_correct_file_earns_full_marks_without_a_hint(corpus_reports: dict[str, dict[str, Any]]) -> None:
    """The 11 correct styles score 100, and no check of theirs carries a hint."""
    correct = {name: r for name, r in corpus_reports.items() if name.startswith("correct/")}
    assert len(correct) == 11
    assert {name: r["score"] for name, r in correct.items() if r["score"] < 100.0} == {}
    assert [name for name, r in correct.items() if any(c.get("hint") for t in r["tiers"] for c in t["checks"])] == []


def test_every_wrong_file_loses_points_in_its_tier(corpus_reports: dict[str, dict[str, Any]]) -> None:
    """Each of the 36 wrong files loses points in the tier its label names, or an earlier one."""
    labels = json.loads((CORPUS / "labels.json").read_text(encoding="utf-8"))
    wrong = {name: r for name, r in corpus_reports.items() if name.startswith("wrong/")}
    assert len(wrong) == 36
    missed = []
    for name, report in wrong.items():
        allowed = TIERS[: TIERS.index(labels[name]["tier"]) + 1]
        if not any(t["score"] < t["max_score"] for t in report["tiers"] if t["name"] in allowed):
            missed.append(name)
    assert missed == []


def test_handout_runs_the_public_checks(tmp_path: Path) -> None:
    """The diff_v2 handout holds no hidden check; its runner passes the reference on every public check and the stub on none."""
    out = tmp_path / "handout"
    made = subprocess.run([sys.executable, "-m", "grader", "handout", str(out), "--exercise", "diff_v2", "--seed", "3"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    data = json.loads((out / "public_checks.json").read_text(encoding="utf-8"))
    hidden = {c["name"].removeprefix("test_") for c in _declared() if c.get("visibility") == "hidden"}
    assert {c["id"] for c in data["checks"]}.isdisjoint(hidden) and len(data["checks"]) == 21
    (out / "reference.py").write_text(REFERENCE.read_text(encoding="utf-8"), encoding="utf-8")
    for submission, code, line in (("reference.py", 0, "21 of 21 public checks passed."), (str(Path("exercise") / STUB.name), 1, "0 of 21")):
        ran = subprocess.run([sys.executable, "run_checks.py", submission], cwd=out, capture_output=True, text=True, timeout=300, check=False)
        assert ran.returncode == code and line in ran.stdout, ran.stdout[-2000:]
