"""Every correct style earns full marks; every realistic bug loses points in its tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Graded, grade_class
from corpus.mutants import (
    CORRECT_DIR,
    MUTANTS,
    ROOT_CAUSES,
    WRONG_DIR,
    completed_stub_source,
    mutant_source,
)

SEED = 20261129
CORRECT = sorted(CORRECT_DIR.glob("*.py"))
WRONG_FILES = sorted(WRONG_DIR.glob("*.py"))


def _declared_tier(path: Path) -> str:
    header = path.read_text().splitlines()[0]
    assert header.startswith("# tier: "), f"{path.name} must start with '# tier: T<n>'"
    return header.removeprefix("# tier: ").strip()


@pytest.fixture(scope="module")
def corpus_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Graded]:
    """Grade the whole corpus once, as one class, with one seed."""
    root = tmp_path_factory.mktemp("corpus")
    files = {path.stem: path for path in CORRECT + WRONG_FILES}
    generated = {m.name: mutant_source(m) for m in MUTANTS} | {"stub_completed": completed_stub_source()}
    for name, source in generated.items():
        path = root / "generated" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        files[name] = path
    return grade_class(files, SEED, root / "graded")


def test_corpus_is_large_enough() -> None:
    """At least 8 correct styles and 25 wrong submissions, with unique names."""
    names = [m.name for m in MUTANTS] + [p.stem for p in WRONG_FILES]
    assert len(CORRECT) >= 8
    assert len(names) >= 25
    assert len(set(names) | {p.stem for p in CORRECT}) == len(names) + len(CORRECT)


@pytest.mark.parametrize("name", [p.stem for p in CORRECT] + ["stub_completed"])
def test_correct_style_gets_full_marks(name: str, corpus_runs: dict[str, Graded]) -> None:
    """A correct implementation (and the stub with its bodies filled in) passes every check."""
    run = corpus_runs[name]
    failed = [f"{c['id']}: {c['message']}" for t in run.report["tiers"] for c in t["checks"] if c["status"] != "passed"]
    assert run.code == 0 and run.report["score"] == 100.0, "\n\n".join(failed) or run.stderr
    assert run.report["diagnosis"]["root_causes"] == [] and run.report["diagnosis"]["probes"] == []


@pytest.mark.parametrize(
    ("name", "tier"),
    [(m.name, m.tier) for m in MUTANTS] + [(p.stem, _declared_tier(p)) for p in WRONG_FILES],
)
def test_wrong_submission_loses_points_in_its_tier(name: str, tier: str, corpus_runs: dict[str, Graded]) -> None:
    """A buggy implementation is graded (exit 1) and loses points in the tier meant to catch it."""
    run = corpus_runs[name]
    assert run.code == 1, run.stderr
    graded_tier = run.tier(tier)
    assert graded_tier["score"] < graded_tier["max_score"], f"{name} kept every point of {tier}"
    failed = [c for c in graded_tier["checks"] if c["status"] == "failed"]
    assert all(c["message"].strip() for c in failed), "every failed check explains itself"


PROPERTY_CHECKS = ("row_sums", "lambda_zero_is_attention", "identical_maps_cancel", "toy_offset_scaling")


def test_property_checks_cannot_be_earned_without_the_maps(corpus_runs: dict[str, Graded]) -> None:
    """A function that ignores both attention maps, (1 - c)·value, fails every property check of the signed map."""
    run = corpus_runs["ignores_attention"]
    assert {check: run.check(check)["status"] for check in PROPERTY_CHECKS} == dict.fromkeys(PROPERTY_CHECKS, "failed")


SILENT = ("ignores_attention",)  # no root cause (its output ignores both maps: nothing a probe reads fits)


@pytest.mark.parametrize("name", sorted(ROOT_CAUSES))
def test_first_root_cause_localises_the_bug(name: str, corpus_runs: dict[str, Graded]) -> None:
    """The first root cause names the function and component where the bug is (docs/diagnosis.md), or none is given."""
    causes = corpus_runs[name].report["diagnosis"]["root_causes"]
    if name in SILENT:
        assert causes == []
        return
    function, component, _ = ROOT_CAUSES[name]
    assert causes and (causes[0]["function"], causes[0]["component"]) == (function, component), causes[:1]
