"""What the dew corpora (course students' first attempts, written blind) showed: failures the diagnosis saw and left without a
cause, sizes unpacked in another layout's order, λ's sign lost, and an index past the end of a value made of the gate. Each
corpus test pins the first root cause of one file; the rules behind them are tested on small inputs of their own too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import first_root_cause

from grader.toolkit import findings, slips


@pytest.mark.parametrize(("corpus_file", "tiers", "exercise", "function", "component", "title"), [
    ("diagnosis_dew/wrong/att_causal_flag_times_bias.py", "T2", "diff_attention", "differential_attention", "mask",
     "With causal=False the mask still reaches the output, as NaN or infinity"),
    ("diagnosis_dew/wrong/att_tensor_coefficient_passed_as_alpha.py", "T1", "diff_attention", "differential_attention", "coefficient",
     "differential_attention raises TypeError: a tensor it was given is passed where torch takes a Python number only"),
    ("diagnosis_dew/wrong/att_shape_unpacked_token_major.py", "T2", "diff_attention", "differential_attention", "layout",
     "differential_attention raises RuntimeError: its sizes are read from the wrong axes"),
    ("diagnosis_dew/wrong/lam_absolute_value_returned.py", "T2", "diff_attention", "differential_lambda", "sign",
     "λ loses its sign: negative values come back positive"),
    ("diagnosis_dew/wrong/lam_gradient_hooks_on_vectors.py", "T1", "diff_attention", "differential_lambda", "lambda",
     "differential_lambda raises RuntimeError: it fails on calls the contract allows"),
    ("v2_dew/wrong/bidirectional_mask_of_ones.py", "T2", "diff_v2", "gqa_attention", "mask",
     "With causal=False the mask still reaches the output, as NaN or infinity"),
    ("v2_dew/wrong/gate_spread_by_half_index.py", "T1", "diff_v2", "diff_v2_attention", "gate",
     "diff_v2_attention raises IndexError: an index reaches past the end of a tensor's axis (an index made for other sizes, or one "
     "taken from a tensor that is empty for these sizes)"),
])  # fmt: skip
def test_the_first_root_cause_places_the_beginners_fault(corpus_file: str, tiers: str, exercise: str, function: str, component: str,
                                                         title: str, tmp_path: Path) -> None:  # fmt: skip
    """A −∞ mask times the flag and a mask of ones without causal, a tensor passed as `alpha=`, `B, T, H, D = q1.shape`, `abs(λ)`,
    hooks on frozen vectors, a gate indexed past its heads: each placed."""
    cause = first_root_cause(corpus_file, tmp_path, tiers, "--exercise", exercise)
    assert (cause["function"], cause["component"], cause["title"]) == (function, component, title)


def test_the_evidence_quotes_the_line_that_unpacks_the_sizes(tmp_path: Path) -> None:
    """The layout cause names the unpacking line, the names it gave and the layout they should follow."""
    cause = first_root_cause("diagnosis_dew/wrong/att_shape_unpacked_token_major.py", tmp_path)
    assert "Line 266 unpacks the sizes of q1 as B, T, H, D, but q1 is laid out [B, H, T, D]" in cause["evidence"]


LAYOUTS = slips.Declarations({}, lambda *_: None, layouts={"attend": "BHTD"})


@pytest.mark.parametrize(("unpacking", "misread"), [
    ("B, T, H, D = q.shape", True),
    ("(b, t, h, d) = q.size()", True),
    ("Bsz, Tokens, Heads, Dim = q.shape", True),
    ("B, H, T, D = q.shape", False),
    ("b, seq, h, d = q.shape", False),
    ("B, T, H, D = other.shape", False),
])  # fmt: skip
def test_sizes_unpacked_under_the_layout_s_letters_in_another_order_are_a_misread_layout(unpacking: str, misread: bool) -> None:
    """Only names whose initials are the layout's letters, in another order, unpacked from a parameter, read one axis for another."""
    source = f"import torch\n\n\ndef attend(q, k):\n    {unpacking}\n    return q\n"
    assert (slips.misread_layout("attend", source, LAYOUTS) is not None) is misread


def test_a_nan_in_one_causal_mode_is_the_mask_s_when_the_other_mode_is_right() -> None:
    """NaN with causal=False while causal=True is right, and the reverse, are both the mask's; NaN in both modes is not."""
    right, plain, broken = np.ones((2, 3)), np.full((2, 3), 2.0), np.array([[np.nan, 1.0, 1.0], [1.0, 1.0, 1.0]])
    unmasked = findings.Found()
    assert findings.causal_nan_finding(unmasked, "f", right, right, broken, plain)
    assert unmasked.findings[0].component == "mask" and "1 of its 2 rows" in unmasked.findings[0].evidence
    masked = findings.Found()
    assert findings.causal_nan_finding(masked, "f", broken, right, plain, plain)
    assert masked.findings[0].title == "The causal mask turns the output into NaN or infinity"
    assert not findings.causal_nan_finding(findings.Found(), "f", broken, right, broken, plain)
