"""Comparison verdicts and their messages: what, where, by how much, what was allowed."""

from __future__ import annotations

import numpy as np

from grader.toolkit.compare import Comparison, combine, compare


def test_match_within_allowance_passes_with_ratio() -> None:
    """Errors inside the allowance pass and report how close they came."""
    verdict = compare("output", np.array([1.0, 2.0]), np.array([1.0, 2.0 + 5e-7]), 1e-6)
    assert verdict.ok and abs(verdict.worst_ratio - 0.5) < 1e-6


def test_mismatch_message_names_worst_element_and_counts() -> None:
    """The message counts mismatches and names index, got, expected, errors and allowance."""
    expected = np.zeros((2, 3))
    got = expected.copy()
    got[1, 2] = 0.5
    got[0, 0] = 1e-3
    verdict = compare("output", got, expected, 1e-4)
    assert not verdict.ok and verdict.context == "output"
    lines = verdict.message.splitlines()
    assert lines[0] == "Mismatched elements: 2 / 6 (33.3%)."
    assert lines[1].startswith("Worst element at index (1, 2): got 0.5, expected 0, absolute error 0.5, relative error inf (expected 0), allowed 0.0001.")
    assert lines[2] == "Greatest absolute difference: 0.5 at index (1, 2) (up to 0.0001 allowed)."
    assert verdict.worst_ratio == 5000.0


def test_mismatches_confined_to_part_of_the_array_are_located_as_a_slice() -> None:
    """Wrong elements only in the last batch element's last heads are placed as [5, 2:6, :, :]; wrong everywhere, or one
    wrong element, adds no such line."""
    expected = np.zeros((6, 6, 6, 6))
    tail = expected.copy()
    tail[5, 2:] = 1.0
    lines = compare("output", tail, expected, 1e-9).message.splitlines()
    assert lines[1] == "Every mismatched element lies within [5, 2:6, :, :] of shape [6, 6, 6, 6]; the elements outside are within tolerance."
    rows = expected.copy()
    rows[:, :, 3:, 1] = 1.0
    assert "lies within [:, :, 3:6, 1] of shape" in compare("output", rows, expected, 1e-9).message
    single = expected.copy()
    single[1, 2, 3, 4] = 1.0
    for everywhere_or_one in (expected + 1.0, single):
        assert "lies within" not in compare("output", everywhere_or_one, expected, 1e-9).message


def test_nan_and_inf_never_pass() -> None:
    """Non-finite values fail however large the allowance, and are counted."""
    verdict = compare("output", np.array([np.nan, np.inf, 1.0]), np.array([1.0, 1.0, 1.0]), 1e9)
    assert not verdict.ok
    assert "Non-finite values: 2 element(s) are NaN or infinite." in verdict.message
    assert verdict.worst_ratio is None


def test_shape_mismatch_is_reported_not_broadcast() -> None:
    """A (1,)-shaped result is not accepted as a 0-dim one."""
    verdict = compare("lambda", np.array([0.3]), np.array(0.3), 1e-6)
    assert not verdict.ok and verdict.message == "expected shape [], got [1]"


def test_zero_dim_values_compare() -> None:
    """0-dim results compare element-wise like any other."""
    assert compare("lambda", np.array(0.3), np.array(0.3 + 1e-9), 1e-8).ok
    assert not compare("lambda", np.array(0.3), np.array(0.4), 1e-8).ok


def test_combine_groups_identical_failures() -> None:
    """The same problem in several calls is stated once with a count and an example."""
    failures = [Comparison(False, "f is not implemented yet", None, f"f(case {i})") for i in range(3)]
    merged = combine(failures + [Comparison(True, "fine", 0.25, "f(case 9)")])
    assert not merged.ok
    assert merged.message == "f is not implemented yet\n(in 3 calls, for example f(case 0))"


def test_combine_of_passes_reports_closest_ratio() -> None:
    """All passing: a one-line summary with the closest ratio."""
    merged = combine([Comparison(True, "", 0.01, "a"), Comparison(True, "", 0.2, "b")])
    assert merged.ok and merged.worst_ratio == 0.2
    assert merged.message == "2 comparison(s) within tolerance; the closest came to 20% of the allowed error."
