"""Padding tokens: every per-token input of some tokens exactly zero, in both exercises' value sets, and what they catch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import grade

from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain

ROOT = Path(__file__).resolve().parents[1]
# keys whose value row is all zeros hidden from the softmax, as a padding mask built from the values would hide them
V2_VALUE_MASK = (
    "    weights = scores.softmax(dim=-1)",
    "    scores = scores.masked_fill((v == 0).all(-1).transpose(1, 2)[:, :, None, None, :], float('-inf'))\n"
    "    weights = scores.softmax(dim=-1)",
)


def test_padded_zeroes_the_rows_of_the_tokens_and_leaves_its_input_alone() -> None:
    """Rows 0 and 2 of axis 1 become zeros in a copy; the other rows and the input keep their values."""
    values = np.arange(1.0, 25.0).reshape(2, 3, 4)
    out = domain.padded(values, [0, 2], axis=1)
    assert not out[:, [0, 2]].any() and np.array_equal(out[:, 1], values[:, 1])
    assert values.min() == 1.0


def test_tied_repeats_the_first_row_along_the_token_axis() -> None:
    """Every row of axis 1 becomes row 0's; the other axes keep their sizes."""
    values = np.arange(1.0, 25.0).reshape(2, 3, 4)
    out = domain.tied(values, axis=1)
    assert out.shape == values.shape and all(np.array_equal(out[:, t], values[:, 0]) for t in range(3))


def test_padding_tokens_are_the_first_and_one_drawn() -> None:
    """Token 0 always, and one more drawn within the sequence (the same one for a single token)."""
    rng = np.random.default_rng(0)
    drawn = [domain.padding_tokens(rng, 9) for _ in range(50)]
    assert all(tokens[0] == 0 and max(tokens) < 9 for tokens in drawn) and any(len(tokens) == 2 for tokens in drawn)
    assert domain.padding_tokens(rng, 1) == (0,)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_value_set_has_a_padding_case_zero_in_every_input(seed: int) -> None:
    """Differential attention's causal set and all four DIFF V2 output sets: token 0 is zeros in the queries, keys, values
    (and gate logits)."""
    (padded,) = [c for c in attention_suite.attention_causal(seed) if "padding" in c.note]
    assert all(not x[..., 0, :].any() for x in (padded.q1, padded.k1, padded.q2, padded.k2, padded.value))
    for name in ("gqa_causal", "gqa_noncausal", "diff_causal", "diff_noncausal"):
        (case,) = [c for c in getattr(v2_suite, name)(seed) if "padding" in c.note]
        inputs = [case.q, case.k, case.v] + ([] if case.lambda_logits is None else [case.lambda_logits])
        assert all(not x[:, 0].any() for x in inputs), name


def test_a_mask_built_from_zero_values_loses_points_and_is_named(tmp_path: Path) -> None:
    """Differential attention: keys whose value row is all zeros hidden; causal values fail, the first cause says why."""
    run = grade(ROOT / "tests" / "corpus" / "diagnosis_cold" / "wrong" / "att_zero_value_rows_as_padding.py", tmp_path, 1, "--no-preview")
    assert run.check("causal_values")["status"] == "failed" and run.report["score"] < 100.0
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("differential_attention", "mask")
    assert first["title"] == "Keys whose value is all zeros are treated as masked"


def test_a_diff_v2_mask_built_from_zero_values_loses_points(tmp_path: Path) -> None:
    """DIFF V2: the same padding mask in gqa_attention fails the value checks of both functions, causal or not, and the
    padding probe names it."""
    source = (ROOT / "tests" / "corpus" / "v2" / "correct" / "einsum_grouped.py").read_text()
    path = tmp_path / "value_mask.py"
    path.write_text(source.replace(*V2_VALUE_MASK))
    run = grade(path, tmp_path, 1, "--no-preview", "--exercise", "diff_v2")
    failed = {c["id"] for t in run.report["tiers"] for c in t["checks"] if c["status"] == "failed"}
    assert run.report["score"] < 100.0 and {"gqa_causal_values", "diff_v2_causal_values", "gqa_noncausal_values"} <= failed, failed
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == ("gqa_attention", "mask", "Keys whose value is all zeros are treated as masked")


@pytest.mark.parametrize(("path", "exercise", "function"), [
    ("diagnosis_hail/wrong/att_log1p_normaliser_counts_one_maximum.py", "diff_attention", "differential_attention"),
    ("v2_hail/wrong/log1p_normaliser_drops_tied_maxima.py", "diff_v2", "gqa_attention"),
])  # fmt: skip
def test_a_normaliser_that_counts_tied_maxima_once_is_named_softmax_not_mask(path: str, exercise: str, function: str, tmp_path: Path) -> None:
    """A zero query ties its row's logits at 0; every key equal ties them elsewhere, so the cause is the softmax's."""
    run = grade(ROOT / "tests" / "corpus" / path, tmp_path, 1, "--no-preview", "--exercise", exercise)
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == (function, "softmax", "Rows whose logits are all equal are normalised wrong")


def test_a_mask_built_from_zero_logits_is_still_named_mask(tmp_path: Path) -> None:
    """Logits exactly 0 hidden: right with every key equal (their logits are not 0), wrong with a zero query or key."""
    source = (ROOT / "tests" / "corpus" / "v2" / "correct" / "einsum_grouped.py").read_text()
    path = tmp_path / "zero_logit_mask.py"
    path.write_text(source.replace(V2_VALUE_MASK[0], "    weights = scores.masked_fill(scores == 0, float('-inf')).softmax(dim=-1)"))
    run = grade(path, tmp_path, 1, "--no-preview", "--exercise", "diff_v2")
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == ("gqa_attention", "mask", "A key or query of all zeros is treated as masked")
