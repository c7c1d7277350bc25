"""The size probe: a contract finding of sizes that do not fit is placed by the sizes its function works for, and only then.

Small DIFF V2 files run in a real worker; each is called on the probe's
base sizes (all different) and on the exercise's variants (two sizes made
equal, or one made 1).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grader.exercises.diffv2.cases import DIFF_V2, GQA
from grader.exercises.diffv2.diagnosis import size_probe
from grader.toolkit import rootcause, sizes
from grader.toolkit.rootcause import Finding
from grader.worker.client import ForkServer, Worker, WorkerLimits

REFERENCE_GQA = """
import math
import torch

def gqa_attention(q, k, v, causal=True):
    t, d, g = q.shape[1], q.shape[3], q.shape[2] // k.shape[2]
    kh, vh = (x.transpose(1, 2).repeat_interleave(g, dim=1) for x in (k, v))
    scores = q.transpose(1, 2) @ kh.transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)
"""
UNREPEATED = REFERENCE_GQA.replace(".repeat_interleave(g, dim=1)", "")  # key/value heads never repeated for their group
MASK_FROM_HEADS = REFERENCE_GQA.replace("torch.ones(t, t,", "torch.ones(q.shape[2], q.shape[2],")  # the mask sized by the heads
GATE_ON_HEADS_AXIS = REFERENCE_GQA + """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits).unsqueeze(2) * a[:, :, 1::2]
"""
UNREPEATED_WITHOUT_MASK = REFERENCE_GQA.replace(".repeat_interleave(g, dim=1)", ".repeat_interleave(g if causal else 1, dim=1)")
UNPLACED = Finding(GQA, rootcause.UNPLACED, "contract", "gqa_attention raises RuntimeError", "It raised RuntimeError.", "check the shapes")


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    """One fork server for every file of this module."""
    with ForkServer() as server:
        yield server


def placed(forks: ForkServer, text: str, finding: Finding) -> Finding:
    """``finding`` as the size probe of its function leaves it for the submission ``text``."""
    worker = Worker(text, "submission.py", [GQA, DIFF_V2], WorkerLimits(call_timeout_s=20), forks)
    try:
        assert worker.load()["status"] == "ok"
        assert finding.function is not None
        return sizes.placed(finding, *sizes.first_failing(worker, [size_probe(finding.function, causal) for causal in (True, False)]))
    finally:
        worker.close()


def test_a_function_that_works_only_for_one_query_head_per_group_is_the_heads_grouping(forks: ForkServer) -> None:
    """Keys never repeated over their group: only Hq = Hkv and Hkv = 1 run, both the heads' grouping."""
    found = placed(forks, UNREPEATED, UNPLACED)
    assert found.component == "heads"
    assert "Hq = Hkv" in found.evidence and "Hkv = 1" in found.evidence and found.evidence.startswith(UNPLACED.evidence)


def test_a_fault_of_sizes_without_the_mask_alone_is_placed_by_the_calls_without_it(forks: ForkServer) -> None:
    """Keys repeated over their group only when causal: the causal probe fits, the one without the mask places the grouping."""
    found = placed(forks, UNREPEATED_WITHOUT_MASK, UNPLACED)
    assert found.component == "heads"
    assert "with causal=False it fails too" in found.evidence and "Hq = Hkv" in found.evidence


def test_a_function_that_works_only_for_as_many_tokens_as_heads_is_the_layout(forks: ForkServer) -> None:
    """A mask sized by the heads axis: only T = Hq runs, one axis read for the other."""
    found = placed(forks, MASK_FROM_HEADS, UNPLACED)
    assert found.component == "layout"
    assert "T = Hq" in found.evidence


def test_sizes_that_point_at_two_components_place_nothing(forks: ForkServer) -> None:
    """A gate unsqueezed on the heads axis runs when D equals the output heads (layout) and with one pair (heads): unchanged."""
    finding = Finding(DIFF_V2, rootcause.UNPLACED, "contract", "diff_v2_attention returns the wrong shape", "It returned [2, 3].", "check")
    assert placed(forks, GATE_ON_HEADS_AXIS, finding) == finding


def test_a_function_right_for_the_base_sizes_or_a_placed_finding_is_left_as_it_is(forks: ForkServer) -> None:
    """The reference runs for the base sizes (the fault does not show there); a finding a line already placed is left as it is."""
    assert placed(forks, REFERENCE_GQA, UNPLACED) == UNPLACED
    on_a_line = Finding(GQA, "mask", "contract", "gqa_attention raises RuntimeError", "It raised at line 3.", "check")
    assert placed(forks, UNREPEATED, on_a_line) == on_a_line
