"""What the sleet corpora (torch API semantics misread, written blind) showed: no wrong file at full marks on five seeds,
and two rules of the round before them too broad. A message that describes a tensor's shape is not a mismatch of sizes,
and a readout in one memory layout names only a formula's part (a fault of where data is read is the strides'). A
normaliser that is not finite for some batch elements only is the softmax's, an in-place write into an expansion the
code made itself is not said to write into an input, and long sequences whose tokens come back right or all zeros are
outputs never written (the project's component for the output's assembly is ``value``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, grade

from grader.toolkit import slips

CORPORA = ROOT / "tests" / "corpus"


def test_a_message_that_quotes_one_shape_twice_is_not_sizes_that_do_not_fit() -> None:
    """A distribution's constraint message names its tensor's shape twice: no mismatch; two different sizes are one."""
    constraint = ("ValueError: Expected parameter probs (Tensor of shape (2, 5, 2)) of distribution Bernoulli(probs: "
                  "torch.Size([2, 5, 2])) to satisfy the constraint Interval(lower_bound=0.0, upper_bound=1.0)")  # fmt: skip
    assert slips.exception_kind(constraint) is None
    told = slips.exception_kind("RuntimeError: einsum(): subscript h has size 2 for operand 1 which does not broadcast with previously seen size 4")
    assert told is not None and told[0] == "shape"


@pytest.mark.parametrize(("corpus_file", "exercise", "function", "component", "words"), [
    ("v2_sleet/wrong/kv_heads_taken_at_storage_offsets.py", "diff_v2", "gqa_attention", "strided", "Non-contiguous inputs"),
    ("v2_sleet/wrong/gate_read_from_bernoulli_distribution.py", "diff_v2", "diff_v2_attention", "gate", "lambda_logits"),
    ("diagnosis_sleet/wrong/att_row_sums_scatter_add_index_not_broadcast.py", "diff_attention", "differential_attention", "softmax",
     "NaN or infinite in batch element 1 of 2"),
    ("diagnosis_sleet/wrong/lam_row_vector_mT_on_1d.py", "diff_attention", "differential_lambda", "lambda", "it fails on every call"),
    ("v2_sleet/wrong/odd_coefficient_expanded_then_negated.py", "diff_v2", "diff_v2_attention", "strided", "a view the code itself expanded"),
    ("diagnosis_sleet/wrong/att_long_rows_index_tensor_tiles_copied_into_copy.py", "diff_attention", "differential_attention", "value",
     "never written: they are 0"),
    ("diagnosis_sleet/wrong/att_rows_renorm_hidden_epsilon.py", "diff_attention", "differential_attention", "softmax",
     "Tensor.renorm does both"),
    ("diagnosis_sleet/wrong/att_nonzero_pairs_indexed_like_numpy_tuple.py", "diff_attention", "differential_attention", "mask",
     "an index reaches past the end of a tensor's axis"),
])  # fmt: skip
def test_the_first_root_cause_names_the_misread_api_s_part(corpus_file: str, exercise: str, function: str, component: str, words: str,
                                                           tmp_path: Path) -> None:  # fmt: skip
    """The first root cause names the labelled function and component (the strides' for keys taken at storage offsets)."""
    run = grade(CORPORA / corpus_file, tmp_path, 20261201, "--exercise", exercise)
    cause: dict[str, Any] = run.report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == (function, component)
    assert words in cause["title"] + cause["evidence"]


def test_a_normaliser_that_leaves_rows_of_sum_one_alone_still_adds_one_epsilon() -> None:
    """Rows with one key of weight left exact, every other row short by one ε: the ε is found, the exact rows counted."""
    import numpy as np

    from grader.toolkit import attention_maps
    from grader.toolkit.attention_maps import MapModel

    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    logits = np.where(np.tril(np.ones((6, 6), dtype=bool)), q @ k.T / np.sqrt(3), -np.inf)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    sums = weights.sum(axis=1, keepdims=True)
    renormed = np.where(sums > 1.0, weights / (sums + 1e-7), weights / sums)
    found = attention_maps.denominator_epsilon([(renormed, {"q": q, "k": k})], MapModel("q", "k", "causal", scale=1 / np.sqrt(3)))
    assert found is not None and abs(found.epsilon - 1e-7) < 1e-10 and found.exact_rows == 1
    rounded = weights / sums * (1 + 1e-16 * rng.standard_normal((6, 1)))  # rounding: no one ε
    assert attention_maps.denominator_epsilon([(rounded, {"q": q, "k": k})], MapModel("q", "k", "causal", scale=1 / np.sqrt(3))) is None


@pytest.mark.parametrize(("line", "masks"), [
    ('scores[..., hidden[0], hidden[1]] = float("-inf")', True), ("x[future] = -math.inf", True), ("s.masked_fill(m, 0)", True),
    ('peak = torch.full((t,), float("-inf"))', False), ("out[..., i] = acc / total", False),
])  # fmt: skip
def test_a_line_that_writes_minus_infinity_into_chosen_positions_applies_a_mask(line: str, masks: bool) -> None:
    """−∞ written into positions of a tensor is masking; a tensor filled with −∞ (a running maximum's start) is not."""
    import re

    assert (re.search(slips.MASK_LINE, line) is not None) is masks
