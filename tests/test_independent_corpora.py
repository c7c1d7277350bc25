"""A corpus written after the checks by people who had not seen them: no wrong file earns full marks, every correct one does.

tests/corpus/diagnosis_frost, diagnosis_ember and diagnosis_gale (differential attention), v2_stateful,
v2_harvest and v2_ember (DIFF V2) confirm their own labels with a float64 oracle of their own (their
``verify.py``); the stateful ones hold bugs that live only in state kept between calls, the harvest ones bugs met only by
calls that an earlier domain did not make (gradients past 512 tokens without the mask, tied branches, a length of
512n + 1, an integer coefficient, inputs that already hold a .grad), the frost one bugs met only by calls or facts added
after it (axes of equal sizes, (batch, head) pairs past every block size, coefficients near 0 without autograd, an
inference tensor returned outside inference mode, a .grad reset by λ), the ember ones backward passes wrong only at some
inputs and a sliding window of 2048 keys, the gale one bugs met only by one tensor passed for two arguments, a second
backward pass, heads of 128 features or more, a fused kernel's shapes and rows past 1024 keys with one far larger logit. Each exercise's are graded in one ``diffgrade batch`` with one seed; the suite's time budget holds
three corpora per exercise, so an older one leaves it when a newer one comes in. Every independent corpus
(``*_acceptance``, ``*_practice``, ``*_sealed``, ``*_holdout``, ``*_unseen``, ``*_blind``, ``*_fresh`` and the
others) is graded on several seeds by ``benchmarks/corpus_grades.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import grade_class

CORPORA = Path(__file__).resolve().parent / "corpus"
SEED = 20261201
EXERCISES = {"diff_attention": ("diagnosis_frost", "diagnosis_ember", "diagnosis_gale"),
             "diff_v2": ("v2_stateful", "v2_harvest", "v2_ember")}


@pytest.fixture(scope="module", params=sorted(EXERCISES))
def graded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bool, float]]:
    """Every file of the exercise's independent corpora, graded once as one class: "corpus/kind/name" -> (whether it is correct, score)."""
    files, labels = {}, {}
    for corpus in EXERCISES[request.param]:
        for key, label in json.loads((CORPORA / corpus / "labels.json").read_text(encoding="utf-8")).items():
            kind, name = key.split("/")
            files[f"{corpus}__{kind}__{name}"] = CORPORA / corpus / kind / f"{name}.py"
            labels[f"{corpus}__{kind}__{name}"] = bool(label["correct"])
    runs = grade_class(files, SEED, tmp_path_factory.mktemp(request.param), "--exercise", request.param)
    return {student.replace("__", "/"): (labels[student], run.report["score"]) for student, run in runs.items()}


def test_no_wrong_file_earns_full_marks(graded: dict[str, tuple[bool, float]]) -> None:
    """Each labelled bug costs points."""
    assert sum(not correct for correct, _ in graded.values()) >= 30
    assert [name for name, (correct, score) in graded.items() if not correct and score >= 100.0] == []


def test_every_correct_file_earns_full_marks(graded: dict[str, tuple[bool, float]]) -> None:
    """Each correct style scores 100."""
    assert sum(correct for correct, _ in graded.values()) >= 6
    assert {name: score for name, (correct, score) in graded.items() if correct and score < 100.0} == {}
