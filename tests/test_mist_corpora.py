"""The faults the mist corpora (assistant-style code, written blind) left unnamed or misplaced: checks a student adds that
refuse calls the contract allows (the part that reads the parameter the check tests, from the student's own line and
message, not a guess from the sizes of the calls it happened to refuse), retain_grad on a frozen input, a gate on the
even head, rows of a map that see no key at all."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, first_root_cause, run_warm

from grader.exercises.diffattn import diagnosis as attention_diagnosis
from grader.exercises.diffv2 import diagnosis as v2_diagnosis
from grader.toolkit.slips import Declarations

REFERENCE = ROOT / "reference" / "diff_attention.py"
V2_REFERENCE = ROOT / "reference" / "diff_v2_attention.py"
HIDE_ALL = '''    else:
        logits = logits.masked_fill(torch.ones_like(logits, dtype=torch.bool), float("-inf"))
    weights = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0)
'''
CAUSAL_ONLY = '''    if not causal:
        raise NotImplementedError("only causal attention is supported")
'''


def _variant_report(reference: Path, anchor: str, replacement: str, tmp_path: Path) -> dict[str, Any]:
    """The report of ``reference`` with ``anchor`` replaced by ``replacement``, graded on seed 20261201."""
    source = reference.read_text()
    assert anchor in source
    path = tmp_path / "variant.py"
    path.write_text(source.replace(anchor, replacement))
    return run_warm([str(path), "--seed", "20261201", "--no-preview"], tmp_path).report


@pytest.mark.parametrize(("stub", "declarations", "graded"), [
    ("diff_attention.py", attention_diagnosis.DECLARATIONS, ("differential_lambda", "differential_attention")),
    ("diff_v2_attention.py", v2_diagnosis.DECLARATIONS, ("gqa_attention", "diff_v2_attention")),
])  # fmt: skip
def test_the_supplied_functions_are_the_stubs_own(stub: str, declarations: Declarations, graded: tuple[str, ...]) -> None:
    """Declarations.supplied names exactly the functions the stub defines besides the graded ones (its validation)."""
    defined = re.findall(r"^def (\w+)", (ROOT / "exercise" / stub).read_text(), flags=re.M)
    assert sorted(declarations.supplied) == sorted(set(defined) - set(graded))


@pytest.mark.parametrize(("corpus_file", "function", "component", "tested"), [
    ("diagnosis_mist/wrong/lam_init_range_validated.py", "differential_lambda", "lambda", "lambda_init"),
    ("v2_mist/wrong/saturated_lambda_logits_rejected.py", "diff_v2_attention", "gate", "lambda_logits"),
])  # fmt: skip
def test_a_range_check_of_the_students_own_is_the_component_of_the_parameter_it_tests(
    corpus_file: str, function: str, component: str, tested: str, tmp_path: Path
) -> None:
    """A ValueError the student raises for a λ_init outside [0, 1], or gate logits above 50, names λ or the gate and quotes the line."""
    cause = first_root_cause(corpus_file, tmp_path, "T1,T2,T3")
    assert (cause["function"], cause["component"]) == (function, component)
    assert "a check of its own refuses calls the contract allows" in cause["title"]
    assert f"The check tests {tested}" in cause["evidence"] and "raise ValueError(" in cause["evidence"]
    assert "only when" not in cause["evidence"]  # the calls it refused differ in values, not in any size the contrast reads


def test_a_partial_implementation_that_refuses_causal_false_is_a_mask_cause_not_an_unwritten_function(tmp_path: Path) -> None:
    """NotImplementedError raised for causal=False alone, by the student's own check, is the mask's: the function is written."""
    anchor = "    signed_map = _attention_map(q1, k1, causal)"
    report = _variant_report(REFERENCE, anchor, CAUSAL_ONLY + anchor, tmp_path)
    assert report["score"] < 100
    cause = report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("differential_attention", "mask")
    assert "The check tests causal" in cause["evidence"] and "not implemented yet" not in cause["title"]


@pytest.mark.parametrize(("corpus_file", "function", "component", "title"), [
    ("v2_mist/wrong/lambda_logits_retain_grad.py", "diff_v2_attention", "graph", "`retain_grad()` is called on a tensor that does not require grad"),
    ("v2_mist/wrong/gate_weights_even_map.py", "diff_v2_attention", "gate", "The gate reaches the even head, whose weight must be 1"),
    ("diagnosis_mist/wrong/att_sdpa_full_attention_empty_mask.py", "differential_attention", "mask",
     "Some queries see no key at all: their rows are zeros"),
])  # fmt: skip
def test_the_mist_faults_are_named_by_their_part(corpus_file: str, function: str, component: str, title: str, tmp_path: Path) -> None:
    """retain_grad on frozen gate logits is the graph's, σ(ℓ) on the even head the gate's, an SDPA mask of all False the mask's."""
    cause = first_root_cause(corpus_file, tmp_path, "T1,T2,T3")
    assert (cause["function"], cause["component"]) == (function, component) and title in cause["title"]


def test_an_output_of_zeros_everywhere_is_no_mask_that_hides_every_key(tmp_path: Path) -> None:
    """Rows of zeros in both causal modes are the output's loss, not a mask: only one mode's empty rows name the mask."""
    anchor = "return torch.matmul(signed_map, value)"
    causes = _variant_report(REFERENCE, anchor, anchor + " * 0", tmp_path)["diagnosis"]["root_causes"]
    assert causes and all(c["component"] != "mask" for c in causes)


def test_a_gqa_attention_that_hides_every_key_without_the_causal_mask_is_a_mask_cause(tmp_path: Path) -> None:
    """DIFF V2's gqa_attention with every key hidden under causal=False (NaN rows zeroed) is the mask's, not the heads' grouping."""
    cause = _variant_report(V2_REFERENCE, "    weights = torch.softmax(logits, dim=-1)\n", HIDE_ALL, tmp_path)["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("gqa_attention", "mask") and "see no key at all" in cause["title"]


def test_an_error_passed_on_from_an_except_block_is_no_check_of_the_students_own(tmp_path: Path) -> None:
    """A raise in an except block that names the coefficient passes another error on: it is not the coefficient's check."""
    anchor = "    signed_map = _attention_map(q1, k1, causal) - coefficient * _attention_map(q2, k2, causal)\n"
    wrapped = (
        "    try:\n        if q1.shape[-2] > 40:\n            raise ValueError('long')\n" + anchor.replace("    ", "        ", 1) +
        "    except ValueError as error:\n        raise RuntimeError(f'attention failed for coefficient {coefficient}') from error\n"
    )  # fmt: skip
    causes = _variant_report(REFERENCE, anchor, wrapped, tmp_path)["diagnosis"]["root_causes"]
    assert causes and not any("a check of its own" in c["title"] for c in causes)


def test_a_check_of_its_own_in_the_gqa_attention_diff_v2_calls_is_gqa_attentions_alone(tmp_path: Path) -> None:
    """gqa_attention refusing causal=False is its mask's fault, and diff_v2_attention's failed calls through it are too."""
    anchor = "    logits = torch.matmul(qh, kh.transpose(-2, -1))"
    causes = _variant_report(V2_REFERENCE, anchor, CAUSAL_ONLY + anchor, tmp_path)["diagnosis"]["root_causes"]
    assert [(c["function"], c["component"]) for c in causes] == [("gqa_attention", "mask")]
    assert any(check.startswith("diff_v2") for check in causes[0]["checks"])
