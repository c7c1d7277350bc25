"""Calls that a fast path keyed on a property of its inputs meets, found unvisited by the thaw corpora: every input in
one memory layout (channels_last among them), inputs of one shape stacked in one buffer as a fused projection's parts,
inputs constant or all zero while they train, keys broadcast over the heads beside values that are not, and head width 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, grade_class

from grader.core.invoke import Call, Request, TensorInput, invoke
from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain
from grader.worker.client import ForkServer, Worker, WorkerLimits

SEEDS = (1, 2, 20261201)
THAW = ROOT / "tests" / "corpus" / "diagnosis_thaw" / "wrong"
V2_THAW = ROOT / "tests" / "corpus" / "v2_thaw" / "wrong"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_strided_set_gives_every_input_each_layout_and_stacks_inputs_of_one_shape(seed: int) -> None:
    """Each non-contiguous layout (channels_last included) and the storage offset is given to every input of one call,
    besides the rotations that give each input each of them once; one call stacks its inputs in one buffer."""
    for case_set in (attention_suite.attention_strided, v2_suite.gqa_strided, v2_suite.diff_strided):
        layouts = [case.layouts for case in case_set(seed)]
        for layout in (*domain.NON_CONTIGUOUS, "offset", domain.STACKED):
            assert any(set(given) == {layout} for given in layouts), (case_set.name, layout)
        assert any(domain.CHANNELS_LAST in given and len(set(given)) == len(given) for given in layouts)


@pytest.mark.parametrize("seed", SEEDS)
def test_inputs_expanded_over_the_heads_have_two_heads_or_more(seed: int) -> None:
    """A key/value head count of 1 makes an expansion over the heads a plain tensor: every such call has Hkv ≥ 2."""
    for case_set in (v2_suite.gqa_strided, v2_suite.diff_strided):
        expanded = [case for case in case_set(seed) if domain.expanded_on(2) in case.layouts]
        assert len(expanded) >= 4 and all(case.k.shape[2] >= 2 and case.q.shape[0] >= 2 for case in expanded)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_future_key_far_above_is_also_met_at_head_width_one(seed: int) -> None:
    """Both exercises' far-future edge is met at D = 1 (logits an outer product) and at a drawn width."""
    widths = [case.q1.shape[-1] for case in attention_suite.attention_large_logits(seed) if case.note == domain.FUTURE_ABOVE_NOTE]
    assert widths[0] == 1 and len(widths) == 2
    for case_set in (v2_suite.gqa_large_logits, v2_suite.diff_large_logits):
        widths = [case.q.shape[-1] for case in case_set(seed) if case.note == domain.FUTURE_ABOVE_NOTE]
        assert widths[0] == 1 and len(widths) == 2


BLIND_FILES = {
    "diff_attention": [THAW / "att_dense_inputs_flat_views.py"],
    "diff_v2": [V2_THAW / f"{name}.py" for name in (
        "constant_gate_read_from_first_logit", "packed_kv_read_through_key_view", "zero_queries_uniform_weights_shortcut",
        "rank_one_logits_shift_from_all_keys", "kv_head_broadcast_checked_on_keys_only")],
}


@pytest.mark.parametrize("exercise", sorted(BLIND_FILES))
def test_the_thaw_files_that_scored_full_marks_lose_points(exercise: str, tmp_path: Path) -> None:
    """Each file that scored 100 on some seed before these calls loses points on seed 2."""
    runs = grade_class({path.stem: path for path in BLIND_FILES[exercise]}, 2, tmp_path, "--exercise", exercise)
    assert {name: run.report["score"] for name, run in runs.items() if run.report["score"] >= 100.0} == {}
    assert len(runs) == len(BLIND_FILES[exercise]) and all(np.isfinite(run.report["score"]) for run in runs.values())


# Reports, for its four [B, H, T, D] inputs, whether each is channels_last, each one's strides, their offsets from q1, then
# their values.
MEMORY = """
import torch
def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    tensors = (q1, k1, q2, k2)
    facts = [float(t.is_contiguous(memory_format=torch.channels_last)) for t in tensors]
    facts += [float(s) for t in tensors for s in t.stride()]
    facts += [float(t.data_ptr() - q1.data_ptr()) / q1.element_size() for t in tensors]
    return torch.cat([torch.tensor(facts, dtype=q1.dtype), *(t.reshape(-1) for t in tensors)])
"""


@pytest.mark.parametrize(("layout", "channels_last", "strides", "offsets"), [
    (domain.CHANNELS_LAST, 1.0, (3 * 5 * 4, 1, 4 * 3, 3), (0, None, None, None)),
    (domain.STACKED, 0.0, (3 * 5 * 4 * 4, 5 * 4 * 4, 4 * 4, 1), (0, 4, 8, 12)),
])  # fmt: skip
def test_the_worker_lays_inputs_out_channels_last_and_stacked_as_named(layout: str, channels_last: float, strides: tuple[int, ...],
                                                                      offsets: tuple[int | None, ...]) -> None:  # fmt: skip
    """channels_last stores the second axis innermost; "stacked" puts inputs of one shape in one [..., n, D] buffer, in
    argument order: same strides, D elements apart. Each holds exactly the values sent."""
    rng = np.random.default_rng(3)
    values = [rng.standard_normal((2, 3, 5, 4)) for _ in range(4)]
    with ForkServer() as forks:
        worker = Worker(MEMORY, "memory.py", ["differential_lambda"], WorkerLimits(call_timeout_s=10), forks)
        try:
            tensors = tuple(TensorInput(v, "float64", False, layout) for v in values)
            outcome = invoke(worker, Request((Call("differential_lambda", tensors),)))
        finally:
            worker.close()
    assert outcome.failure is None, outcome.failure
    facts = np.asarray(outcome.results[0].value)
    assert list(facts[:4]) == [channels_last] * 4
    assert [tuple(facts[4 + 4 * n : 8 + 4 * n]) for n in range(4)] == [strides] * 4
    assert [o for o, want in zip(facts[20:24], offsets) if want is not None] == [w for w in offsets if w is not None]
    assert np.array_equal(facts[24:], np.concatenate([v.reshape(-1) for v in values]))


def test_an_axis_order_is_read_per_rank_as_the_worker_lays_it_out() -> None:
    """channels_last keeps the order of the axes a tensor has (B, T, H for three) and leaves a tensor of other axes as it
    is; the slip analysis calls it non-contiguous, with a last axis of stride above 1, only where an axis of size above 1
    moves, or sits inside the last."""
    order = domain.CHANNELS_LAST
    assert [domain.axis_order(order, rank) for rank in (1, 3, 4, 5)] == [[0], [0, 2, 1], [0, 2, 3, 1], [0, 1, 2, 3, 4]]
    assert domain.axis_order("sliced", 4) is None
    assert domain.non_contiguous(order, (2, 3, 5, 4)) and not domain.non_contiguous(order, (2, 1, 5, 4))
    assert not domain.non_contiguous(order, (6,)) and domain.non_contiguous(order, (2, 5, 3))
    assert domain.last_axis_steps([order], [(2, 3, 5, 4)]) == "above 1 for some input"
    assert domain.last_axis_steps([order, "contiguous"], [(2, 1, 5, 4), (2, 3, 5, 4)]) == "1 for every input"
    assert domain.last_axis_steps(["sliced"], [(4,)]) == "above 1 for some input"
