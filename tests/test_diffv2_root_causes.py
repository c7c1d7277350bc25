"""DIFF V2's root causes: its declarations cover every check and misconception, and graded files get the right first cause.

A handful of wrong files of tests/corpus/v2 (one per kind of fault: heads,
layout, gate, pairs, mask, stability, backward, graph, a contract slip) and
two written here (a blocked loop that drops the last partial block of keys,
a result cached by the inputs' addresses and versions) are graded in one ``diffgrade batch`` with the correct styles and the reference:
each wrong file's first root cause names the function and component of its
bug, and no correct file gets a root cause. ``benchmarks/diffv2_diagnosis.py``
measures the whole corpus.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import ROOT, first_root_cause, run_warm

from grader.core.plugin import declared_checks
from grader.exercises.diffv2 import diagnosis, misconceptions
from grader.exercises.diffv2 import probes as v2_probes
from grader.exercises.diffv2.cases import DIFF_V2, GQA
from grader.toolkit import domain
from grader.toolkit.findings import Found
from grader.toolkit.rootcause import COMPONENTS, Finding
from grader.worker.client import ForkServer, Worker, WorkerLimits

CORPUS = ROOT / "tests" / "corpus" / "v2"
CHECKS = ROOT / "grader" / "exercises" / "diffv2" / "checks"
DECLARED = {check: declared["judges"] for check, declared in declared_checks("grader.exercises.diffv2.checks").items()}
# wrong file -> (function, component) its first root cause must name
EXPECTED = {
    "repeat_not_interleave": (GQA, "heads"),
    "sdpa_wrong_layout": (GQA, "layout"),
    "online_no_rescale": (GQA, "softmax"),
    "mask_under_no_grad": (GQA, "graph"),
    "custom_fn_dk_mean": (GQA, "backward"),
    "returns_tuple": (GQA, "type"),
    "halves_not_pairs": (DIFF_V2, "heads"),
    "gate_mean_over_tokens": (DIFF_V2, "gate"),
    "causal_not_forwarded": (DIFF_V2, "mask"),
    "naive_sigmoid": (DIFF_V2, "stability"),
    "sigmoid_abs_kink": (DIFF_V2, "gate"),
    "v1_rmsnorm": (DIFF_V2, "output"),
}
CORRECT = ("custom_function", "online_blocked", "sdpa_expand_mask")
REFERENCE = (ROOT / "reference" / "diff_v2_attention.py").read_text(encoding="utf-8")
KEY_BLOCKS = """
import math
import torch

def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    qh = q.transpose(1, 2) / math.sqrt(d)
    kh, vh = (x.transpose(1, 2).repeat_interleave(hq // k.shape[2], dim=1) for x in (k, v))
    blocks = max(1, t // 32)  # BUG: the last partial block of keys is never visited
    scores = torch.cat([qh @ kh[:, :, i * 32:(i + 1) * 32].transpose(-1, -2) for i in range(blocks)], dim=-1)
    if causal:
        visible = torch.ones(t, scores.shape[-1], dtype=torch.bool).tril()
        scores = scores.masked_fill(~visible, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh[:, :, :scores.shape[-1]]).transpose(1, 2)

def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
"""
CACHED = """
_computed, _kept = gqa_attention, {}

def gqa_attention(q, k, v, causal=True):  # BUG: a key of addresses and versions misses a refill through .data
    key = tuple((x.data_ptr(), x._version, tuple(x.shape), x.dtype) for x in (q, k, v)) + (causal,)
    if key not in _kept:
        _kept[key] = _computed(q, k, v, causal)
    return _kept[key]
"""
LOG_WEIGHTS = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    t, d, g = q.shape[1], q.shape[3], q.shape[2] // k.shape[2]
    kh, vh = (x.transpose(1, 2).repeat_interleave(g, dim=1) for x in (k, v))
    scores = q.transpose(1, 2) @ kh.transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    a = (torch.log_softmax(scores, dim=-1) @ vh).transpose(1, 2)  # BUG: log-probabilities weight the values
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
"""
LOGITS_GATE = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - lambda_logits[..., None] * torch.sigmoid(a[:, :, 1::2])  # BUG: GLU's halves swapped
"""
NEIGHBOUR_FEATURES = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    b, t, hq, d = a.shape
    pairs = a.reshape(b, t, hq * d // 2, 2)  # BUG: pairs neighbouring features, not heads 2i and 2i + 1
    even, odd = (pairs[..., i].reshape(b, t, hq // 2, d) for i in (0, 1))
    return even - torch.sigmoid(lambda_logits)[..., None] * odd
"""
MASKED_LOGITS = """
def gqa_attention(q, k, v, causal=True):
    t, d, g = q.shape[1], q.shape[3], q.shape[2] // k.shape[2]
    kh, vh = (x.transpose(1, 2).repeat_interleave(g, dim=1) for x in (k, v))
    scores = q.transpose(1, 2) @ kh.transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
"""
SHIFT_CLAMPED = MASKED_LOGITS + """    e = torch.exp(scores - scores.amax(-1, keepdim=True).clamp(min=0.0))  # BUG: rows far below zero underflow to 0 / 0
    return ((e / e.sum(-1, keepdim=True)) @ vh).transpose(1, 2)
"""
EPSILON_GUARD = MASKED_LOGITS + """    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return ((e / (e.sum(-1, keepdim=True) + GUARD)) @ vh).transpose(1, 2)  # BUG: the guard changes every weight
"""
VALUES_SCALED = """
def gqa_attention(q, k, v, causal=True):
    t, d, g = q.shape[1], q.shape[3], q.shape[2] // k.shape[2]
    kh, vh = (x.transpose(1, 2).repeat_interleave(g, dim=1) / math.sqrt(d) for x in (k, v))  # BUG: v is scaled too
    scores = q.transpose(1, 2) @ kh.transpose(-1, -2)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)
"""
GATE_INDEX_CAPPED = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    own = torch.arange(q.shape[1]).clamp(max=63)  # BUG: tokens past 63 take token 63's gate
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits[:, own])[..., None] * a[:, :, 1::2]
"""
FLOAT32_SOFT_CAP = """
def gqa_attention(q, k, v, causal=True):
    t, d, g = q.shape[1], q.shape[3], q.shape[2] // k.shape[2]
    kh, vh = (x.transpose(1, 2).repeat_interleave(g, dim=1) for x in (k, v))
    scores = q.transpose(1, 2) @ kh.transpose(-1, -2) / math.sqrt(d)
    if q.dtype == torch.float32:
        scores = 30.0 * torch.tanh(scores / 30.0)  # BUG: the cap bends every float32 logit
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)
"""
GATES_BATCH_MAJOR = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    b, t, h = lambda_logits.shape
    gates = torch.sigmoid(lambda_logits).transpose(0, 1).reshape(b, t, h)  # BUG: the gates read token-major, the output is batch-major
    return a[:, :, 0::2] - gates[..., None] * a[:, :, 1::2]
"""
MEAN_RESTORED_UNGATED = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    shift = v.mean(dim=1, keepdim=True)
    a = gqa_attention(q, k, v - shift, causal)
    pairs = shift.repeat_interleave(q.shape[2] // k.shape[2] // 2, dim=2)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2] + pairs  # BUG: the mean comes back ungated
"""
GATE_ON_ODD_QUERIES = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    gated = q.clone()
    gated[:, :, 1::2] = q[:, :, 1::2] * torch.sigmoid(lambda_logits)[..., None]  # BUG: the gate scales queries, a softmax input
    a = gqa_attention(gated, k, v, causal)
    return a[:, :, 0::2] - a[:, :, 1::2]
"""
GATE_BOUNDED = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    gate = torch.sigmoid(lambda_logits).clamp(1e-6, 1 - 1e-6)  # BUG: an ε keeps the gate off 0 and 1
    return a[:, :, 0::2] - gate[..., None] * a[:, :, 1::2]
"""
GATE_SURROGATE_SLOPE = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    gate = torch.sigmoid(lambda_logits).detach() + 0.25 * (lambda_logits - lambda_logits.detach())  # BUG: a constant slope
    return a[:, :, 0::2] - gate[..., None] * a[:, :, 1::2]
"""
HEADS_BROADCAST_WITHOUT_GRAPH = """
def gqa_attention(q, k, v, causal=True):
    t, d, g = q.shape[1], q.shape[3], q.shape[2] // k.shape[2]
    if q.requires_grad or k.requires_grad or v.requires_grad:
        kh, vh = (x.transpose(1, 2).repeat_interleave(g, dim=1) for x in (k, v))
    else:
        kh, vh = k.transpose(1, 2), v.transpose(1, 2)  # BUG: without a graph the heads are left to broadcast, never repeated
    scores = q.transpose(1, 2) @ kh.transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)
"""
ODD_MAPS_UNSCALED = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    t, d, g = q.shape[1], q.shape[3], q.shape[2] // k.shape[2]
    kh, vh = (x.transpose(1, 2).repeat_interleave(g, dim=1) for x in (k, v))
    scale = torch.ones(q.shape[2], 1, 1, dtype=q.dtype)
    scale[0::2] = 1 / math.sqrt(d)  # BUG: the odd heads' logits are left unscaled
    scores = q.transpose(1, 2) @ kh.transpose(-1, -2) * scale
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    a = (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
"""
# Files for mechanisms that no file of the corpus needs (long sequences, state kept between calls, maps read without the
# mask, gate logits used beyond σ, features paired instead of heads, logits far below zero, gates read in another order,
# a shared offset left out of the gated difference, a gate on the odd queries, a gate kept off 0 and 1, an ε in the
# softmax's denominator, v scaled with the keys, a gate index capped on long sequences, a surrogate slope for the gate,
# key/value heads left to broadcast on a path without a graph, the odd heads' logits left unscaled): name -> source.
WRITTEN = {"key_blocks_tail_dropped": KEY_BLOCKS, "gqa_cached_by_address": REFERENCE + CACHED, "log_softmax_weights": REFERENCE + LOG_WEIGHTS,
           "gate_logits_times_sigmoid": REFERENCE + LOGITS_GATE, "neighbour_features_paired": REFERENCE + NEIGHBOUR_FEATURES,
           "max_shift_clamped_at_zero": REFERENCE + SHIFT_CLAMPED, "gates_read_token_major": REFERENCE + GATES_BATCH_MAJOR,
           "mean_restored_ungated": REFERENCE + MEAN_RESTORED_UNGATED, "gate_on_odd_queries": REFERENCE + GATE_ON_ODD_QUERIES,
           "gate_bounded_by_epsilon": REFERENCE + GATE_BOUNDED, "denominator_epsilon": REFERENCE + EPSILON_GUARD.replace("GUARD", "1e-6"),
           "float32_epsilon_in_float64": REFERENCE + EPSILON_GUARD.replace("GUARD", "torch.finfo(torch.float32).eps"),
           "values_scaled_with_keys": REFERENCE + VALUES_SCALED, "gate_index_capped": REFERENCE + GATE_INDEX_CAPPED,
           "gate_surrogate_slope": REFERENCE + GATE_SURROGATE_SLOPE, "heads_broadcast_without_graph": REFERENCE + HEADS_BROADCAST_WITHOUT_GRAPH,
           "odd_maps_unscaled": REFERENCE + ODD_MAPS_UNSCALED}  # fmt: skip
WRITTEN_EXPECTED = {"key_blocks_tail_dropped": (GQA, "softmax"), "gqa_cached_by_address": (GQA, "output"),
                    "log_softmax_weights": (DIFF_V2, "softmax"), "gate_logits_times_sigmoid": (DIFF_V2, "gate"),
                    "neighbour_features_paired": (DIFF_V2, "heads"), "max_shift_clamped_at_zero": (GQA, "stability"),
                    "gates_read_token_major": (DIFF_V2, "gate"), "mean_restored_ungated": (DIFF_V2, "output"),
                    "gate_on_odd_queries": (DIFF_V2, "gate"), "gate_bounded_by_epsilon": (DIFF_V2, "gate"),
                    "denominator_epsilon": (GQA, "softmax"), "float32_epsilon_in_float64": (GQA, "dtype"),
                    "values_scaled_with_keys": (GQA, "scale"), "gate_index_capped": (DIFF_V2, "gate"),
                    "gate_surrogate_slope": (DIFF_V2, "gate"), "heads_broadcast_without_graph": (GQA, "heads"),
                    "odd_maps_unscaled": (DIFF_V2, "scale")}  # fmt: skip


def test_every_check_has_a_role_and_every_misconception_a_place() -> None:
    """Every V2 check declares what it judges; HINTS places every variant and symptom of the catalogue, with known components."""
    checks = set(re.findall(r"^def test_(\w+)\(", "".join(p.read_text() for p in CHECKS.glob("test_*.py")), flags=re.M))
    assert checks == set(DECLARED) and len(checks) == 25
    ids = {v.id for family in misconceptions.CATALOGUE.families for v in family.variants}
    ids |= {variant.id for variant, _ in misconceptions.CATALOGUE.symptoms}
    assert ids == set(diagnosis.HINTS)
    assert all(component in COMPONENTS for _, component, _, _ in diagnosis.HINTS.values())


def test_checks_of_diff_v2_involve_gqa_only_when_it_calls_it() -> None:
    """A diff_v2_attention built on the submission's gqa_attention suffers gqa_attention's faults, in its forward and its gradients."""
    nested = "def gqa_attention(q, k, v, causal=True):\n    return q\n\ndef diff_v2_attention(q, k, v, lambda_logits, causal=True):\n    a = gqa_attention(q, k, v, causal)\n"
    alone = nested.replace("a = gqa_attention(q, k, v, causal)", "a = q  # not gqa_attention(q, k, v)")
    assert diagnosis.calls_gqa(nested) and not diagnosis.calls_gqa(alone)
    stub = (ROOT / "exercise" / "diff_v2_attention.py").read_text(encoding="utf-8")  # its docstring shows the call, its body raises
    assert "gqa_attention(q, k, v, causal)" in stub and not diagnosis.calls_gqa(stub)
    assert diagnosis.widened(DECLARED, nested)["gate_gradient"].functions == (DIFF_V2, GQA)
    assert diagnosis.widened(DECLARED, nested)["diff_v2_query_key_gradients"].inputs[GQA] == ("q", "k")
    assert diagnosis.widened(DECLARED, alone)["gate_gradient"].functions == (DIFF_V2,)


def test_a_shared_variant_hinted_only_on_diff_v2_checks_names_diff_v2() -> None:
    """kv_heads_tiled on a gqa_attention check names gqa_attention; hinted on diff_v2_attention's checks alone, diff_v2_attention."""
    def record(check: str) -> dict[str, Any]:
        return {"id": check, "status": "failed", "visibility": "public", "hint": {"id": "kv_heads_tiled", "text": "tiled", "maths": "h // G"}}

    assert [f.function for f in diagnosis.hint_findings([record("gqa_causal_values"), record("diff_v2_causal_values")], DECLARED)] == [GQA]
    assert [f.function for f in diagnosis.hint_findings([record("diff_v2_causal_values")], DECLARED)] == [DIFF_V2]


def test_wrong_shapes_are_named() -> None:
    """2H heads returned is the pairs never combined; [B, H, T, D] and pairs taken along head_dim are the layout; one output
    per key/value head is the heads' grouping; merged, reduced or squeezed heads are the output's."""
    kv2 = {diagnosis.KV_HEADS: "2"}
    assert diagnosis.name_shape(DIFF_V2, (1, 5, 4, 3), (1, 5, 2, 3), kv2)[0] == "heads"  # type: ignore[index]
    assert diagnosis.name_shape(DIFF_V2, (2, 5, 4, 2), (2, 5, 2, 4), kv2)[0] == "layout"  # type: ignore[index]
    assert diagnosis.name_shape(DIFF_V2, (2, 5, 8), (2, 5, 2, 4), kv2)[0] == "output"  # type: ignore[index]
    assert diagnosis.name_shape(GQA, (2, 5, 2, 4), (2, 5, 8, 4), kv2)[0] == "heads"  # type: ignore[index]
    assert diagnosis.name_shape(GQA, (2, 5, 2, 4), (2, 5, 8, 4), {diagnosis.KV_HEADS: "4"})[0] == "output"  # type: ignore[index]
    assert diagnosis.name_shape(DIFF_V2, (2, 5, 3), (2, 5, 3, 1), kv2)[0] == "output"  # type: ignore[index]
    assert diagnosis.name_shape(GQA, (2, 5, 0, 4), (2, 5, 8, 4), kv2) is None
    assert diagnosis.name_shape(GQA, (1, 4, 5, 3), (1, 5, 4, 3), kv2)[0] == "layout"  # type: ignore[index]
    assert diagnosis.name_shape(GQA, (1, 5, 4), (1, 5, 4, 3), kv2) is None


def test_wrong_shapes_of_as_many_elements_are_the_layout_and_extra_unit_axes_the_output() -> None:
    """A shape with the output's elements on other axes is the layout; one with axes of size 1 added, or fewer tokens, is the
    output's; others stay unnamed."""
    kv2 = {diagnosis.KV_HEADS: "2"}
    assert diagnosis.name_shape(DIFF_V2, (2, 5, 1, 6), (2, 5, 2, 3), kv2)[0] == "layout"  # type: ignore[index]
    assert diagnosis.name_shape(GQA, (1, 64, 8, 17), (1, 128, 4, 17), kv2)[0] == "layout"  # type: ignore[index]
    assert diagnosis.name_shape(DIFF_V2, (2, 5, 2, 1, 3), (2, 5, 2, 3), kv2)[0] == "output"  # type: ignore[index]
    assert diagnosis.name_shape(DIFF_V2, (1, 2, 2, 29), (1, 1, 2, 29), kv2) is None
    assert diagnosis.name_shape(DIFF_V2, (1, 255, 2, 6), (1, 257, 2, 6), kv2)[0] == "output"  # type: ignore[index]  # chunks lose tokens


def test_an_index_out_of_range_where_key_value_heads_are_picked_is_the_grouping() -> None:
    """`k[:, :, kv_of]` with a kv index past the key/value heads: the heads' grouping, not a shape fault."""
    from grader.core.invoke import Outcome, Returned
    from grader.toolkit import slips

    trace = '  File "sub.py", line 9, in diff_v2_attention\n    kp, vp = k[:, :, kv_of], v[:, :, kv_of]\n'
    raised = Returned(raised={"type": "IndexError", "message": "index 2 is out of bounds for dimension 0 with size 1", "traceback": trace})
    call = slips.Observed(DIFF_V2, Outcome(functions=[DIFF_V2], results=[raised]), 0, (1, 5, 2, 3), "float64", {diagnosis.KV_HEADS: "1"},
                          ("q", "k", "v", "lambda_logits"), False)  # fmt: skip
    assert [f.component for f in slips.findings([call], None, diagnosis.DECLARATIONS)] == ["heads"]


def test_an_error_only_for_groups_above_two_on_several_key_value_heads_is_the_heads_grouping() -> None:
    """An unworded error raised only by calls with several key/value heads, each shared by more than two query heads (the
    regimes of the grouping, whatever the exact counts), while multi-query and pairs-only calls return: the heads."""
    from grader.core.invoke import Outcome, Returned
    from grader.toolkit import slips

    trace = '  File "sub.py", line 9, in diff_v2_attention\n    s = torch.einsum("bthd,bshd->bhts", qe, kp)\n'
    raised = Returned(raised={"type": "RuntimeError", "message": "einsum(): subscript h has size 2 for operand 1", "traceback": trace})
    returned = Returned(type_name="Tensor", is_tensor=True, exact_tensor=True, shape=(1, 5, 2, 3), dtype="float64")

    def call(result: Returned, kv: int, group: int) -> slips.Observed:
        attributes = {diagnosis.KV_HEADS: str(kv), diagnosis.SHARING: "one (multi-query)" if kv == 1 else "several",
                      diagnosis.GROUP: str(group) if group <= 2 else "more than 2", "the argument binding": "keyword"}  # fmt: skip
        return slips.Observed(DIFF_V2, Outcome(functions=[DIFF_V2], results=[result]), 0, (1, 5, 2, 3), "float64", attributes,
                              ("q", "k", "v", "lambda_logits"), False)  # fmt: skip

    calls = [call(raised, 2, 4), call(raised, 3, 4), call(raised, 2, 6), call(returned, 1, 4), call(returned, 3, 2), call(returned, 1, 2)]
    (found,) = slips.findings(calls, None, diagnosis.DECLARATIONS)
    assert (found.function, found.component) == (DIFF_V2, "heads")
    assert "several" in found.title and "more than 2" in found.title


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The chosen wrong files, three correct styles and the reference, graded in one batch (instructor reports): stem -> report."""
    students = tmp_path_factory.mktemp("v2_diagnosed")
    for name in EXPECTED:
        (students / f"{name}.py").write_text((CORPUS / "wrong" / f"{name}.py").read_text(encoding="utf-8"), encoding="utf-8")
    for name in CORRECT:
        (students / f"correct_{name}.py").write_text((CORPUS / "correct" / f"{name}.py").read_text(encoding="utf-8"), encoding="utf-8")
    for name, text in WRITTEN.items():
        (students / f"{name}.py").write_text(text, encoding="utf-8")
    (students / "float32_soft_cap.py").write_text(REFERENCE + FLOAT32_SOFT_CAP, encoding="utf-8")
    (students / "reference.py").write_text((ROOT / "reference" / "diff_v2_attention.py").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path_factory.mktemp("v2_diagnosed_out")
    command = [sys.executable, "-m", "grader", "batch", str(students), "--out", str(out), "--seed", "3", "--exercise", "diff_v2",
               "--audience", "instructor"]  # fmt: skip
    subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    return {folder.name: json.loads((folder / "report.json").read_text(encoding="utf-8")) for folder in out.iterdir() if (folder / "report.json").is_file()}


@pytest.mark.parametrize("name", sorted(EXPECTED) + sorted(WRITTEN))
def test_the_first_root_cause_names_the_function_and_component(reports: dict[str, dict[str, Any]], name: str) -> None:
    """The first cause is the labelled fault, it explains failed checks, and every failed check is explained."""
    causes = reports[name]["diagnosis"]["root_causes"]
    assert causes, name
    assert (causes[0]["function"], causes[0]["component"]) == {**EXPECTED, **WRITTEN_EXPECTED}[name], causes[0]
    assert causes[0]["checks"] and reports[name]["diagnosis"]["unexplained"] == []


def test_a_stale_answer_is_named_by_the_check_of_call_sequences(reports: dict[str, dict[str, Any]]) -> None:
    """A result cached by the inputs' addresses fails repeated_calls with a message that says the second call was answered stale."""
    check = {c["id"]: c for tier in reports["gqa_cached_by_address"]["tiers"] for c in tier["checks"]}["repeated_calls"]
    assert check["status"] == "failed" and "the second call returned the first call's result" in check["message"], check["message"]


def test_gates_read_in_another_order_are_named_as_misplaced_not_ignored(reports: dict[str, dict[str, Any]]) -> None:
    """Gate logits flattened token-major for a batch-major output: the first cause says each logit gates another position."""
    first = reports["gates_read_token_major"]["diagnosis"]["root_causes"][0]
    assert first["title"] == "Each gate logit gates another position than its own", first
    assert "ignores" not in first["title"] and "batch elements" in first["evidence"], first


def test_a_shared_offset_left_ungated_is_named_with_its_factor(reports: dict[str, dict[str, Any]]) -> None:
    """The values' mean taken out and added back after the difference: the offset readout says it comes out scaled by 1, not 1 − σ(ℓ)."""
    first = reports["mean_restored_ungated"]["diagnosis"]["root_causes"][0]
    assert first["title"] == "A value offset shared by every token comes out scaled by 1, not 1 − σ(ℓ)", first
    assert "must move by 1.5" in first["evidence"], first


def test_a_float32_path_wrong_for_every_logit_is_not_blamed_on_the_saturated_gate(reports: dict[str, dict[str, Any]]) -> None:
    """float32 logits soft-capped (float64 right): the saturated gate's float32 output is wrong, but so is every float32 output,
    so no cause names the gate, and the cap's error (above float32's, below half precision's) is not called half precision."""
    report = reports["float32_soft_cap"]
    assert report["score"] < report["max_score"]
    said = [(cause["function"], cause["component"]) for cause in report["diagnosis"]["root_causes"]]
    assert (DIFF_V2, "gate") not in said and (GQA, "dtype") not in said, said


def test_sizes_that_do_not_fit_are_placed_by_the_sizes_that_work(reports: dict[str, dict[str, Any]]) -> None:
    """Key/value heads left to broadcast on a path without a graph: the size probe says only Hq = Hkv and Hkv = 1 run."""
    first = reports["heads_broadcast_without_graph"]["diagnosis"]["root_causes"][0]
    assert "runs and returns the right shape only when each key/value head serves one query head (Hq = Hkv)" in first["evidence"]


def test_correct_files_and_the_reference_get_no_root_cause(reports: dict[str, dict[str, Any]]) -> None:
    """Full marks, no cause, no probe run."""
    for name in (*(f"correct_{n}" for n in CORRECT), "reference"):
        report = reports[name]
        assert report["score"] == report["max_score"] and report["diagnosis"]["root_causes"] == [] and report["diagnosis"]["probes"] == [], name


def test_the_terminal_opens_with_the_root_causes(tmp_path: Path) -> None:
    """A graded V2 file prints its ROOT CAUSES block before the first tier."""
    done = subprocess.run([sys.executable, "-m", "grader", "--exercise", "diff_v2", str(CORPUS / "wrong" / "exp_gate.py"), "--seed", "3",
                           "--no-preview", "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")],
                          capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)  # fmt: skip
    assert done.stdout.index("ROOT CAUSES") < done.stdout.index("T1 Contract") and "gate" in done.stdout.lower()


def test_a_parameter_inserted_before_causal_explains_the_value_checks_it_breaks(tmp_path: Path) -> None:
    """softmax_scale inserted before causal: the signature cause comes first and explains the value and gradient checks whose
    calls pass causal by position, not the binding check alone."""
    path = ROOT / "tests" / "corpus" / "v2_cold" / "wrong" / "softmax_scale_param_before_causal.py"
    done = subprocess.run([sys.executable, "-m", "grader", "--exercise", "diff_v2", str(path), "--seed", "1", "--no-preview", "--json",
                           str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=300,
                          check=False, cwd=tmp_path)  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    first = report["diagnosis"]["root_causes"][0]
    assert "'causal' is 'softmax_scale'" in first["title"], done.stdout
    assert {"arguments_bind", "gqa_noncausal_values", "gqa_gradients"} <= set(first["checks"])


RUNNING_MEAN_GQA = """

_reference_gqa = gqa_attention
_RUN = {"shape": None}


def gqa_attention(q, k, v, causal=True):
    out = _reference_gqa(q, k, v, causal)
    if _RUN["shape"] != tuple(out.shape):
        _RUN.update(shape=tuple(out.shape), total=torch.zeros_like(out), count=0)
    _RUN["total"], _RUN["count"] = _RUN["total"] + out.detach(), _RUN["count"] + 1
    return out + (_RUN["total"] / _RUN["count"] - out.detach())  # BUG: a running mean of the calls of one shape
"""


def test_outputs_that_change_from_call_to_call_in_the_gqa_attention_it_calls_are_gqa_attentions() -> None:
    """State found through diff_v2_attention's determinism probe goes to gqa_attention when gqa_attention's own probe shows it."""
    text = REFERENCE + RUNNING_MEAN_GQA
    seen = Finding(DIFF_V2, "state", "forward", "The same call gives another output after a call on other values", "e", "a")
    with ForkServer() as forks:
        worker = Worker(text, "submission.py", [GQA, DIFF_V2], WorkerLimits(call_timeout_s=20), forks)
        try:
            assert worker.load()["status"] == "ok"
            kept = diagnosis.given_to_callee(SimpleNamespace(worker=worker, source=text), [seen], domain.generator(1, "probes"))  # type: ignore[arg-type]
        finally:
            worker.close()
    assert [(f.function, f.component) for f in kept] == [(GQA, "state")]


def test_queries_folded_head_major_beside_batch_major_keys_are_batch_elements_mixed(tmp_path: Path) -> None:
    """Queries folded into the bmm batch head-major, keys and values batch-major: one sequence's query moves another's output."""
    first = first_root_cause("v2_acceptance/wrong/heads_major_query_fold.py", tmp_path, "T2", "--exercise", "diff_v2")
    assert (first["function"], first["component"]) == (GQA, "layout")
    assert first["title"] == "The batch elements are mixed: one sequence's query changes another's outputs"


SOFTPLUS_GATE = """

def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    gate = torch.exp(lambda_logits - torch.nn.functional.softplus(lambda_logits))  # BUG: softplus is ℓ itself past 20
    return a[:, :, 0::2] - gate[..., None] * a[:, :, 1::2]
"""


EXPONENTIAL_TAIL_GATE = """

def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    gate = torch.where(lambda_logits < -3, torch.exp(lambda_logits), torch.sigmoid(lambda_logits))  # BUG: σ's tail taken as exp
    return a[:, :, 0::2] - gate[..., None] * a[:, :, 1::2]
"""


@pytest.mark.parametrize("text, title", [(REFERENCE, None), (REFERENCE + SOFTPLUS_GATE, "The gate is wrong for logits from 20."),
                                         (REFERENCE + EXPONENTIAL_TAIL_GATE, "The gate is wrong for logits from -1")])  # fmt: skip
def test_a_gate_wrong_over_a_band_of_logits_away_from_zero_is_named_by_that_band(text: str, title: str | None) -> None:
    """exp(ℓ − softplus(ℓ)) is σ(ℓ) up to softplus's threshold of 20 and 1 past it; exp(ℓ) for ℓ below −3 is σ's tail, off
    by ordinary amounts down to −13: the sweep of logits from −60 to 60 names the band where float64 resolves the difference
    (the output right within ±1); the reference's outputs are right at every logit."""
    found = Found()
    with ForkServer() as forks:
        worker = Worker(text, "submission.py", [GQA, DIFF_V2], WorkerLimits(call_timeout_s=20), forks)
        try:
            assert worker.load()["status"] == "ok"
            named = v2_probes.gate_range_probe(worker, v2_probes.draw(domain.generator(1, "probes")), found)
        finally:
            worker.close()
    assert named is (title is not None)
    assert [f.title[: len(title)] for f in found.findings] == ([title] if title else [])
    assert all(f.component == "gate" for f in found.findings)


DOUBLED_HEADS = """

def gqa_attention(q, k, v, causal=True):
    hq = q.shape[2]
    while k.shape[2] < hq:  # BUG: doubling reaches h // G only when G is a power of two
        k, v = (torch.stack((x, x), dim=3).flatten(2, 3) for x in (k, v))
    k, v = k[:, :, :hq], v[:, :, :hq]
    return _attend(q, k, v, causal)
"""
HEADS_IN_FOURS = """

def gqa_attention(q, k, v, causal=True):
    g = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(g, dim=2) for x in (k, v))
    out = torch.zeros_like(q)
    for h in range(0, q.shape[2] - q.shape[2] % 4 or 4, 4):  # BUG: a last chunk of fewer than four heads is left at zero
        out[:, :, h:h + 4] = _attend(q[:, :, h:h + 4], k[:, :, h:h + 4], v[:, :, h:h + 4], causal)
    return out
"""
ATTEND = """

def _attend(q, k, v, causal):
    s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhts,bshd->bthd", torch.softmax(s, dim=-1), v)
"""


@pytest.mark.parametrize("text, title", [
    (REFERENCE, None),
    (REFERENCE + ATTEND + DOUBLED_HEADS, "Query heads read the wrong key/value heads when G = 3"),
    (REFERENCE + ATTEND + HEADS_IN_FOURS, "The output is wrong for some groupings of the heads only"),
])  # fmt: skip
def test_head_groupings_the_probes_own_sizes_miss_are_found_at_other_group_sizes(text: str, title: str | None) -> None:
    """The probes' own sizes have G = 4; at G = 3, 5 and 6 and at three key/value heads, coded values read out which
    key/value head each query head reads, and random ones tell groupings that fail from those that work."""
    found = Found()
    with ForkServer() as forks:
        worker = Worker(text, "submission.py", [GQA, DIFF_V2], WorkerLimits(call_timeout_s=20), forks)
        try:
            assert worker.load()["status"] == "ok"
            named = v2_probes.grouping_probe(worker, GQA, domain.generator(1, "probes"), found)
        finally:
            worker.close()
    assert named is (title is not None)
    assert [f.title for f in found.findings] == ([title] if title else [])
    assert all((f.function, f.component) == (GQA, "heads") for f in found.findings)


def test_tile_normalisers_merged_without_logaddexp_are_unstable_at_long_lengths(tmp_path: Path) -> None:
    """log(exp(a) + exp(b)) merging the normalisers of key tiles overflows only with two tiles or more: the stability probe's
    calls at 300 tokens name it, its calls at the probes' own length do not show it."""
    first = first_root_cause("v2_acceptance/wrong/lse_merge_log_of_exp_sum.py", tmp_path, "T2", "--exercise", "diff_v2")
    assert (first["function"], first["component"], first["title"]) == (GQA, "stability", "The softmax is not numerically stable in float32")
    assert "(at 300 tokens)" in first["evidence"]


def test_a_held_grad_reset_on_entry_is_a_mutation_of_the_grad_with_the_line_that_resets_it(tmp_path: Path) -> None:
    """Inputs' .grad set to None on entry: only the calls whose leaves already held a .grad changed them, so the cause says
    that the .grad was reset, not that values were written."""
    first = first_root_cause("v2_harvest/wrong/stale_input_grads_reset_on_entry.py", tmp_path, "T1", "--exercise", "diff_v2")
    assert (first["function"], first["component"], first["title"]) == (GQA, "mutation", f"{GQA} resets or changes the .grad of its inputs")
    assert "already holding a .grad" in first["evidence"]


def test_a_scale_taken_from_feature_slices_is_found_by_the_maps_of_wide_heads(tmp_path: Path) -> None:
    """Scores summed over slices of 64 features, each scaled by its own slice's width: right at D = 32, 34 and 40, wrong at
    D = 72 and 128 with rows that still sum to 1, so the width probe names the scale."""
    first = first_root_cause("v2_harvest/wrong/wide_heads_scale_from_feature_slice.py", tmp_path, "T2", "--exercise", "diff_v2")
    assert (first["function"], first["component"], first["title"]) == (GQA, "scale", "Heads of width 72 and 128 get the wrong logits")


@pytest.mark.parametrize(("name", "function", "component", "evidence"), [
    ("v2_frost/wrong/key_halves_log_normalisers_added", GQA, "softmax", "right up to T = 300 and wrong from T = 513"),
    ("v2_frost/wrong/cached_mask_tiled_past_block_size", GQA, "mask", "right up to T = 513 and wrong from T = 1025"),
    ("v2_ember/wrong/sliding_window_default_2048", GQA, "mask", "right up to T = 1025 and wrong from T = 2049"),
])  # fmt: skip
def test_faults_past_512_1024_and_2048_tokens_are_found_by_the_length_probe(name: str, function: str, component: str, evidence: str,
                                                                           tmp_path: Path) -> None:  # fmt: skip
    """Key halves normalised apart past 512 tokens, a 1024-token mask buffer tiled past it, and a sliding window of 2048 keys:
    the length probe reads the lengths of the checks' longest calls, and names the length each fault starts at."""
    first = first_root_cause(f"{name}.py", tmp_path, "T2", "--exercise", "diff_v2")
    assert (first["function"], first["component"]) == (function, component) and evidence in first["evidence"]


@pytest.mark.parametrize(("corpus_file", "function", "exercise"), [
    ("v2_hail/wrong/value_grad_fused_into_existing_grad.py", GQA, "diff_v2"),
    ("diagnosis_hail/wrong/lam_fn_backward_accumulates_into_existing_grad.py", "differential_lambda", "diff_attention"),
])
def test_a_backward_that_adds_into_the_held_grad_is_the_backward_passs_cause(corpus_file: str, function: str, exercise: str,
                                                                              tmp_path: Path) -> None:
    """Gradient-accumulation fusion in a hand-written backward: only the backward pass changed the inputs' .grad (asked with
    torch.autograd.grad first, which must leave it alone), so the cause is the backward pass, not the forward's mutation."""
    first = first_root_cause(corpus_file, tmp_path, "T1", "--exercise", exercise)
    assert (first["function"], first["component"], first["title"]) == (function, "backward", f"{function}'s backward pass writes into its inputs")
    assert "Only the backward pass changed its input(s)" in first["evidence"]


@pytest.mark.parametrize(("old", "new", "component", "title"), [
    ('masked_fill(future, float("-inf"))', "masked_fill(future, -1e4)", "mask",
     "Masked keys still get weight when the logits are large: the mask is a finite number"),
    ('logits = logits.masked_fill(future, float("-inf"))', "logits = logits - 1e4 * future", "mask",
     "Masked keys still get weight when the logits are large: the mask is a finite number"),
    ("return torch.matmul(weights, vh).transpose(1, 2)", "return torch.matmul(weights, vh).clamp(-65504, 65504).transpose(1, 2)",
     "stability", "Outputs past float16's range are wrong"),
    ("return torch.matmul(weights, vh).transpose(1, 2)",
     "scale = vh.abs().amax(dim=(-2, -1), keepdim=True)\n    return (torch.matmul(weights, vh / scale) * scale).transpose(1, 2)",
     "value", "A head whose values are all zero gives a wrong output"),
])  # fmt: skip
def test_domain_edges_of_the_hidden_checks_are_named_by_probes_at_those_edges(old: str, new: str, component: str, title: str,
                                                                            tmp_path: Path) -> None:  # fmt: skip
    """A mask that writes or adds −1e4, outputs clamped to float16's range and values scaled by their head's amax are right
    on ordinary inputs and wrong only on the hidden checks' domain edges; the probes' own calls at those edges (visible
    logits of −5·10⁶, a future one 2·10⁴ above them, values of 2·10⁵, a head of zero values) name each."""
    source = (ROOT / "reference" / "diff_v2_attention.py").read_text()
    assert old in source
    path = tmp_path / "edge.py"
    path.write_text(source.replace(old, new))
    run = run_warm([str(path), "--exercise", "diff_v2", "--seed", "5", "--no-preview", "--tiers", "T2"], tmp_path)
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == (GQA, component, title)
