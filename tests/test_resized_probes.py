"""Faults that the probes' own small sizes never meet (one sequence in the batch, one head, many heads, T = 2D): the forward
probes run again at the sizes of a call a value check failed on, and the cause they find says at which sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, first_root_cause, run_warm

from grader.exercises.diffattn.probes import OWN_SIZES, Sizes, identity_values, probed_at, sizes

REFERENCE = ROOT / "reference" / "diff_attention.py"
SCALE = "/ math.sqrt(q.shape[-1])"


@pytest.mark.parametrize(("corpus_file", "component", "title"), [
    ("diagnosis_thaw/wrong/att_single_sequence_prefill_bias.py", "mask", "The causal mask is applied although causal=False"),
    ("diagnosis_thaw/wrong/att_many_heads_stacked_values.py", "sign", "The second map is added instead of subtracted"),
    ("diagnosis_frost/wrong/att_head_groups_range_drops_tail.py", "value", "Some batch elements and heads get no output: their rows are zeros"),
    ("diagnosis_frost/wrong/att_value_major_layout_guessed_from_shape.py", "value", "Value is mixed across tokens outside the map"),
])  # fmt: skip
def test_a_fault_of_some_sizes_only_is_named_at_the_sizes_of_a_failed_call(corpus_file: str, component: str, title: str, tmp_path: Path) -> None:
    """A path taken for one sequence (B = 1), for 64 (batch, head) pairs and more, for more than 32 pairs in blocks of 32, or
    for T = 2D (value taken as [B, H, 2D, T]) is found, and named by what it does, at a failed call's sizes."""
    cause = first_root_cause(corpus_file, tmp_path, "T1,T2,T3")
    assert (cause["function"], cause["component"]) == ("differential_attention", component)
    assert cause["title"].startswith(title) and ", at [B, H, T, D] = [" in cause["title"]
    assert cause["evidence"].startswith("These probes ran at [B, H, T, D] = [")
    assert f"the probes' own sizes, [{', '.join(map(str, OWN_SIZES))}], nothing is wrong" in cause["evidence"]


def test_a_scale_wrong_for_single_heads_is_named_with_their_sizes(tmp_path: Path) -> None:
    """Logits divided by D instead of √D when a call has one head: the scale, read out at a failed call's sizes, with one head."""
    source = REFERENCE.read_text()
    assert SCALE in source
    path = tmp_path / "single_head_scale.py"
    path.write_text(source.replace(SCALE, "/ (math.sqrt(q.shape[-1]) if q.shape[1] > 1 else q.shape[-1])"))
    report = run_warm([str(path), "--seed", "20261201", "--no-preview"], tmp_path).report
    assert report["score"] < 100
    cause = report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("differential_attention", "scale")
    assert "The logits are scaled by 1/D instead of 1/√D" in cause["title"]
    assert ", at [B, H, T, D] = [" in cause["title"] and cause["title"].split("[B, H, T, D] = [")[1].split(", ")[1] == "1"


def test_the_probes_draw_at_the_sizes_they_are_given_and_refuse_maps_they_cannot_read() -> None:
    """Inside probed_at the inputs take its sizes (and back the probes' own after); one-hot values need 2D ≥ T."""
    with probed_at(Sizes(1, 3, 4, 2)):
        assert sizes() == (1, 3, 4, 2) and identity_values().shape == (1, 3, 4, 4)
    assert sizes() == OWN_SIZES == (2, 2, 5, 3)
    with pytest.raises(ValueError, match="2D >= T"):
        probed_at(Sizes(1, 1, 9, 4))
