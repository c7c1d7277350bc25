"""The independent corpora: no wrong file earns full marks, every correct one does, and signatures are named."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.exercises.diffattn.signatures import signature_order_problem

CORPORA = Path(__file__).resolve().parent / "corpus"
SEED = 20261201


@pytest.fixture(scope="module", params=["domain", "heldout"])
def corpus(request: pytest.FixtureRequest) -> Path:
    """tests/corpus/domain (measured against while the checks were built) and tests/corpus/heldout (graded only at the end)."""
    return CORPORA / request.param


@pytest.fixture(scope="module")
def scores(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    """Every file of the corpus graded once with ``diffgrade batch``: kind -> student -> score."""
    found = {}
    for kind in ("wrong", "correct"):
        out = tmp_path_factory.mktemp(kind)
        command = [sys.executable, "-m", "grader", "batch", str(corpus / kind), "--out", str(out), "--seed", str(SEED)]
        subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        with open(out / "grades.csv", newline="", encoding="utf-8") as stream:
            found[kind] = {row["student"]: float(row["score"]) for row in csv.DictReader(stream)}
    return found


def test_no_wrong_file_earns_full_marks(corpus: Path, scores: dict[str, dict[str, float]]) -> None:
    """Each of the labelled bugs costs points: none of the wrong files scores 100."""
    labels = json.loads((corpus / "labels.json").read_text(encoding="utf-8"))
    assert len(scores["wrong"]) == sum(key.startswith("wrong/") for key in labels) >= 20
    credited = {name: labels[f"wrong/{name}.py"]["bug"] for name, score in scores["wrong"].items() if score >= 100.0}
    assert credited == {}


def test_every_correct_file_earns_full_marks(scores: dict[str, dict[str, float]]) -> None:
    """Each correct style, whatever its layout handling, caching-free state and signature extras, scores 100."""
    assert len(scores["correct"]) >= 6
    assert {name: score for name, score in scores["correct"].items() if score < 100.0} == {}


def _parameters(*names: str, defaults: int = 1) -> list[dict[str, object]]:
    """A signature as the worker describes it: positional-or-keyword parameters, the last ``defaults`` with defaults."""
    return [{"name": n, "kind": "POSITIONAL_OR_KEYWORD", "has_default": i >= len(names) - defaults} for i, n in enumerate(names)]


@pytest.mark.parametrize(
    ("names", "named"),
    [
        (("q1", "k1", "q2", "k2", "value", "coefficient", "scale", "causal"), "'scale' where the contract has 'causal'"),
        (("q1", "k1", "q2", "k2", "coefficient", "value", "causal"), "'coefficient' where the contract has 'value'"),
        (("Q1", "k1", "q2", "k2", "value", "coefficient", "causal"), "'Q1' where the contract has 'q1'"),
    ],
)
def test_a_signature_out_of_the_contracts_order_is_named(names: tuple[str, ...], named: str) -> None:
    """An inserted, reordered or renamed parameter is named with the one the contract has in its place."""
    problem = signature_order_problem("differential_attention", _parameters(*names))
    assert problem is not None and named in problem


def test_extra_trailing_parameters_and_kwargs_follow_the_contract() -> None:
    """Optional parameters after the contract's own, *args and **kwargs are fine."""
    extra = _parameters("q1", "k1", "q2", "k2", "lambda_init", "eps", defaults=2)
    assert signature_order_problem("differential_lambda", extra) is None
    assert signature_order_problem("differential_lambda", [{"name": "args", "kind": "VAR_POSITIONAL", "has_default": False}]) is None
