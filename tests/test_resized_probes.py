"""Faults that the probes' own small sizes never meet (one sequence in the batch, one head, many heads, T = 2D): the forward
probes run again at the sizes of a call a value check failed on, and the cause they find says at which sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, first_root_cause, run_warm

from grader.exercises.diffattn.probes import OWN_SIZES, ProbeSizes, identity_values, probed_at, sizes

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


def test_probes_at_more_tokens_than_a_narrow_head_can_read_out_leave_that_width_out(tmp_path: Path) -> None:
    """A fault of float32 calls past 16 tokens: the float64 probes at such a call's sizes are right, and the wide-heads probe
    there reads the maps at the widths of at least T/2 only (width 8 cannot hold 17 one-hot tokens)."""
    source = REFERENCE.read_text()
    anchor = "    logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])\n"
    assert anchor in source
    path = tmp_path / "float32_long_rows.py"
    path.write_text(source.replace(anchor, anchor + "    if q.dtype == torch.float32 and q.shape[-2] > 16:\n        logits = logits * 1.01\n"))
    report = run_warm([str(path), "--seed", "20261201", "--no-preview"], tmp_path).report
    assert report["score"] < 100
    widths = [p for p in report["diagnosis"]["probes"] if p.startswith("differential_attention: the maps at head widths") and ", at [B, H, T, D]" in p]
    assert len(widths) == 1
    tokens = int(widths[0].split("[B, H, T, D] = [")[1].split(", ")[2])
    listed = [int(w) for w in widths[0].split("head widths ")[1].split(", at")[0].split(", ")]
    assert tokens > 16 and 8 not in listed and all(2 * w >= tokens for w in listed)


def test_sizes_only_a_hidden_check_used_stay_the_instructors(tmp_path: Path) -> None:
    """A scale fault at [1, 1, 16, 8] alone, on seed 20261201 the sizes of one hidden check's call: the instructor reads the
    cause at those sizes; the student's report names neither the cause nor the sizes, and keeps no map from them."""
    source = REFERENCE.read_text()
    anchor = "    logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])\n"
    path = tmp_path / "hidden_shape_scale.py"
    path.write_text(source.replace(anchor, anchor + "    if tuple(q.shape) == (1, 1, 16, 8):\n        logits = logits / math.sqrt(q.shape[-1])\n"))
    reports = {}
    for audience in ("instructor", "student"):
        (tmp_path / audience).mkdir()
        reports[audience] = run_warm([str(path), "--seed", "20261201", "--no-preview", "--audience", audience], tmp_path / audience).report
    cause = reports["instructor"]["diagnosis"]["root_causes"][0]
    assert (cause["component"], cause["title"]) == ("scale", "The logits are scaled by 1/D instead of 1/√D, at [B, H, T, D] = [1, 1, 16, 8]")
    student = reports["student"]["diagnosis"]
    assert reports["student"]["score"] < 100 and student["root_causes"] == [] and student["maps"] == []
    assert "16, 8" not in json.dumps(reports["student"]) and any(p.endswith(", at the sizes of a hidden check") for p in student["probes"])


def test_the_probes_draw_at_the_sizes_they_are_given_and_refuse_maps_they_cannot_read() -> None:
    """Inside probed_at the inputs take its sizes (and back the probes' own after); one-hot values need 2D ≥ T."""
    with probed_at(ProbeSizes(1, 3, 4, 2)):
        assert sizes() == (1, 3, 4, 2) and identity_values().shape == (1, 3, 4, 4)
    assert sizes() == OWN_SIZES == (2, 2, 5, 3)
    with pytest.raises(ValueError, match="2D >= T"):
        probed_at(ProbeSizes(1, 1, 9, 4))
