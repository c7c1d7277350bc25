"""What the dawn corpora (written blind) found credited: an answer kept under a key that leaves one argument out, an
answer kept under per-vector sums. Each is met by a mechanism, not by a call made for the file: every argument changed
alone between two calls on the same objects, inputs refilled with each vector's own values in another order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import first_root_cause

from grader.core.invoke import TensorInput
from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain


@pytest.mark.parametrize(("corpus_file", "check", "function", "component", "title"), [
    ("diagnosis_dawn/wrong/att_eval_output_memo_without_coefficient.py", "repeated_calls", "differential_attention", "coefficient",
     "The answer uses the coefficient of an earlier call"),
    ("v2_dawn/wrong/graph_free_memo_feature_sum_fingerprint.py", "repeated_calls", "gqa_attention", "output",
     "gqa_attention answers with a result kept from an earlier call"),
])  # fmt: skip
def test_the_files_credited_before_lose_points_and_are_named(corpus_file: str, check: str, function: str, component: str, title: str,
                                                             tmp_path: Path) -> None:  # fmt: skip
    """Each fails the check whose calls meet its bug, and its first root cause names the part."""
    cause = first_root_cause(corpus_file, tmp_path, "T1,T2,T3")
    assert (cause["function"], cause["component"], cause["title"]) == (function, component, title)
    assert check in cause["checks"]


@pytest.mark.parametrize(("suite", "arguments"), [
    (attention_suite, {"differential_lambda": {"q1", "k1", "q2", "k2", "lambda_init"},
                       "differential_attention": {"q1", "k1", "q2", "k2", "value", "coefficient", "causal"}}),
    (v2_suite, {"gqa_attention": {"q", "k", "v", "causal"}, "diff_v2_attention": {"q", "k", "v", "lambda_logits", "causal"}}),
])  # fmt: skip
def test_every_argument_is_changed_alone_in_every_mode(suite, arguments: dict[str, set[str]]) -> None:
    """A sequence per function, argument and mode; its second call passes the first call's tensor objects for every other argument."""
    changed = [s for s in suite.sequences(20261201) if s.kind == "one_changed"]
    for function, names in arguments.items():
        for mode in domain.SEQUENCE_MODES:
            made = {s.changed for s in changed if s.first.function == function and ("grads" if s.grads else s.first.grad_mode) == mode}
            assert made == names, (function, mode)
    for sequence in changed:
        first, second = suite.SEQUENCES.request(sequence).calls
        before = {**dict(enumerate(first.args)), **first.kwargs}
        after = {**dict(enumerate(second.args)), **second.kwargs}
        new = [key for key, a in after.items() if isinstance(a, TensorInput) and a is not before.get(key)]
        assert len(new) <= 1, sequence.label()
        assert sequence.label().count(f"but {sequence.changed},") == 1


def test_refilled_values_keep_every_vectors_statistics() -> None:
    """Each vector along the last axis holds its own elements in another order (its sum and norm kept); a width of one shuffles the whole."""
    rng = np.random.default_rng(3)
    values = rng.normal(size=(2, 5, 3, 8))
    shuffled = domain.shuffled_like(rng, values, "float64")
    assert np.array_equal(np.sort(shuffled, axis=-1), np.sort(values, axis=-1))
    assert not np.array_equal(shuffled, values)
    column = rng.normal(size=(6, 1))
    moved = domain.shuffled_like(rng, column, "float64")
    assert sorted(moved.ravel()) == sorted(column.ravel()) and not np.array_equal(moved, column)
