"""What the haze corpora (code transcribed from the papers, written blind) showed: faults the readouts saw but could not
place, and checks of the student's own misread as tests of sizes. Each test pins the first root cause of one file."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import first_root_cause


@pytest.mark.parametrize(("corpus_file", "tiers", "exercise", "function", "component", "title"), [
    ("diagnosis_haze/wrong/att_flash1_value_halves_crossed_in_second_branch.py", "T2", "diff_attention", "differential_attention",
     "value", "The maps' weights meet other columns of value"),
    ("diagnosis_haze/wrong/att_packed_projection_split_even_odd.py", "T2", "diff_attention", "differential_attention",
     "branch", "A branch's map depends on the other branch's queries or keys"),
    ("diagnosis_haze/wrong/att_stacked_branches_one_sequence_softmax.py", "T2", "diff_attention", "differential_attention",
     "softmax", "The attention weights of a row do not sum to 1"),
    ("diagnosis_haze/wrong/att_pseudocode_shapes_heads_in_width.py", "T2", "diff_attention", "differential_attention",
     "layout", "Every head gets the same map: the heads are folded into the features"),
    ("diagnosis_mist/wrong/att_baddbmm_into_expanded_bias.py", "T2", "diff_attention", "differential_attention",
     "strided", "Every (batch, head) pair gets the same maps: their logits share one buffer"),
    ("v2_haze/wrong/context_rms_rescaled_by_gate.py", "T2", "diff_v2", "diff_v2_attention",
     "output", "The gated difference is rescaled by a factor that depends on the gate"),
    ("v2_haze/wrong/batch_folded_into_heads_head_major.py", "T2", "diff_v2", "diff_v2_attention",
     "heads", "Pairs are formed across batch elements: one sequence's queries change another's outputs"),
])  # fmt: skip
def test_the_first_root_cause_places_the_transcription_fault(corpus_file: str, tiers: str, exercise: str, function: str, component: str,
                                                             title: str, tmp_path: Path) -> None:  # fmt: skip
    """Halves of value crossed, branches' features interleaved (but one normaliser over both branches' keys is the softmax's),
    heads folded into the width (and, from the mist corpus, logits accumulated into one expanded buffer), a gate-set
    rescale, pairs across the batch: each placed."""
    cause = first_root_cause(corpus_file, tmp_path, tiers, "--exercise", exercise)
    assert (cause["function"], cause["component"], cause["title"]) == (function, component, title)


def test_a_halves_swap_is_said_as_such(tmp_path: Path) -> None:
    """The second map's keys meet the other half of value: the evidence says so, not token by token."""
    cause = first_root_cause("diagnosis_haze/wrong/att_flash1_value_halves_crossed_in_second_branch.py", tmp_path)
    assert "in the second map each key's weight meets the other half of value" in cause["evidence"]
    assert "first map" not in cause["evidence"].split("Each output row")[0]


def test_a_check_that_counts_distinct_inputs_tests_no_sizes(tmp_path: Path) -> None:
    """`len({id(v) for v in vectors}) != len(vectors)` refuses one tensor passed twice: λ's own check, not the sizes."""
    cause = first_root_cause("diagnosis_haze/wrong/lam_four_separate_vectors_enforced.py", tmp_path, "T1")
    assert (cause["function"], cause["component"]) == ("differential_lambda", "lambda")
    assert "The check tests the inputs of differential_lambda" in cause["evidence"]
