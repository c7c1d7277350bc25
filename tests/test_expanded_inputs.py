"""Inputs expanded over the batch, the heads or the tokens (stride 0): how they are drawn, what the worker builds, and what they catch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import grade

from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain, probes
from grader.toolkit.tolerance import Truth

ROOT = Path(__file__).resolve().parents[1]
# The output buffer allocated with the strides of value: an expanded value makes its elements share memory
BUFFER_MIRRORS_VALUE = (
    "    return torch.matmul(signed_map, value)",
    "    out = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype)\n"
    "    out.copy_(torch.matmul(signed_map, value))\n"
    "    return out",
)
# Keys transposed by as_strided with their own strides: right for any layout, stride 0 included
OWN_STRIDES_TRANSPOSE = (
    "    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)",
    "    kh = k.as_strided((k.shape[0], k.shape[2], k.shape[1], k.shape[3]), (k.stride(0), k.stride(2), k.stride(1), k.stride(3)),\n"
    "                      k.storage_offset()).repeat_interleave(group, dim=1)",
)


def test_expanded_layouts_leave_each_input_alone_contiguous() -> None:
    """Per dim, one call per input: it contiguous, the others expanded; so for every two inputs a call expands the one and not
    the other."""
    for count in (2, 3, 4, 5):
        layouts = domain.expanded_layouts(count, axes=(0, 2))
        assert len(layouts) == 2 * count
        for kind in (domain.EXPANDED, "expanded@2"):
            mine = [layout for layout in layouts if kind in layout]
            assert [layout.index("contiguous") for layout in mine] == list(range(count))
            assert all(layout.count(kind) == count - 1 for layout in mine)
    assert [domain.expansion_axis(layout) for layout in ("expanded", "expanded@1", "sliced")] == [0, 1, None]


def test_a_calls_expansion_is_named_by_its_dims() -> None:
    """No input expanded is "none"; one dim is its name; several are joined; a dim without a name says which it is; every
    input expanded along one dim says so (multi-query attention's keys and values, as opposed to some of the inputs)."""
    dims = {0: "over the batch", 1: "over the heads"}
    assert domain.expanded_inputs(("contiguous", "sliced"), dims) == "none"
    assert domain.expanded_inputs(("expanded@1", "contiguous", "expanded"), dims) == "over the batch and over the heads"
    assert domain.expanded_inputs(("expanded@2", "contiguous"), dims) == "along dim 2"
    assert domain.expanded_inputs(("expanded@1", "expanded@1"), dims) == "every input over the heads"


def test_broadcast_along_repeats_the_first_element_of_its_dim_and_leaves_vectors_alone() -> None:
    """Every element along the dim becomes the first one; an array of one axis is returned as it is."""
    values = np.arange(24.0).reshape(3, 2, 4)
    out = domain.broadcast_along(values)
    assert all(np.array_equal(out[i], values[0]) for i in range(3)) and out.flags.writeable
    heads = domain.broadcast_along(values, 1)
    assert np.array_equal(heads[:, 1], values[:, 0]) and np.array_equal(heads[:, 0], values[:, 0])
    vector = np.arange(4.0)
    assert domain.broadcast_along(vector) is vector


@pytest.mark.parametrize("seed", [1, 2])
def test_expanded_cases_are_constant_along_their_dim_and_require_grad_in_both_exercises(seed: int) -> None:
    """Each strided set holds calls expanded over the batch (B >= 2), the heads and the tokens (each input in turn left
    contiguous, the others expanded: 15, 9 and 12 calls for 5, 3 and 4 inputs), then one per dim with the inputs expanded together; an
    expanded input repeats its first element along that dim and requires grad like any other, also in a case rebuilt from
    it (as the shrinker rebuilds cases)."""
    def expanded(layouts: tuple[str, ...]) -> bool:
        return any(domain.expansion_axis(layout) is not None for layout in layouts)

    drawn = [(c, c.inputs, c.layouts) for c in attention_suite.attention_strided(seed) if expanded(c.layouts)]
    drawn += [(c, c.inputs, c.memory_layouts) for name in ("gqa_strided", "diff_strided") for c in getattr(v2_suite, name)(seed)
              if expanded(c.layouts)]  # fmt: skip
    assert len(drawn) == 18 + 12 + 15
    assert {domain.expansion_axis(layout) for _, _, layouts in drawn for layout in layouts} == {None, 0, 1, 2}
    for case, inputs, layouts in drawn:
        rebuilt = replace(case, note="rebuilt")
        names = attention_suite.cases.INPUT_NAMES if len(layouts) == 5 else case.names
        for name, values, layout in zip(names, inputs, layouts):
            axis = domain.expansion_axis(layout)
            if axis is not None and values.ndim > axis:
                first = np.take(values, [0], axis=axis)
                assert values.shape[0] >= 2 and np.array_equal(values, np.broadcast_to(first, values.shape))
            assert case.requires_grad(name) and rebuilt.requires_grad(name)


def test_an_expanded_inputs_gradient_is_read_summed_along_its_dim() -> None:
    """The truth of an expanded input's gradient (and its allowance) is summed along the expanded dim, which stays, of size 1;
    inputs of other layouts, and one with too few dims for its expansion, keep theirs."""
    truth = Truth(np.arange(24.0).reshape(2, 3, 4), np.full((2, 3, 4), 0.5))
    vector = Truth(np.arange(3.0), np.ones(3))
    read = domain.read_where_expanded({"q": truth, "k": truth, "v": truth, "g": vector}, ("q", "k", "v", "g"),
                                      ("expanded", "expanded@1", "sliced", "expanded"))  # fmt: skip
    assert np.array_equal(read["q"].values, truth.values.sum(axis=0, keepdims=True)) and read["q"].values.shape == (1, 3, 4)
    assert np.array_equal(read["q"].allowed, np.full((1, 3, 4), 1.0))
    assert np.array_equal(read["k"].values, truth.values.sum(axis=1, keepdims=True)) and read["k"].allowed.shape == (2, 1, 4)
    assert read["v"] is truth and read["g"] is vector

# Inputs with a stride-0 dim detached (taken for broadcast settings, not trained): their gradients are lost
DETACH_EXPANDED_VALUE = (
    "    signed_map = _attention_map(q1, k1, causal)",
    "    value = value.detach() if 0 in value.stride() else value\n    signed_map = _attention_map(q1, k1, causal)",
)
DETACH_EXPANDED_GATES = (
    "    gate = torch.sigmoid(lambda_logits)",
    "    lambda_logits = lambda_logits.detach() if 0 in lambda_logits.stride() else lambda_logits\n"
    "    gate = torch.sigmoid(lambda_logits)",
)


def _variant(source: Path, change: tuple[str, str], target: Path) -> Path:
    text = source.read_text()
    assert change[0] in text
    target.write_text(text.replace(change[0], change[1], 1))
    return target


def test_a_buffer_with_an_inputs_strides_loses_strided_points_and_is_named(tmp_path: Path) -> None:
    """Differential attention writing its output into empty_strided(value's size and strides): the strided checks fail and
    the first root cause says that inputs expanded over the batch make it raise."""
    path = _variant(ROOT / "reference" / "diff_attention.py", BUFFER_MIRRORS_VALUE, tmp_path / "mirrors.py")
    run = grade(path, tmp_path, 1, "--no-preview")
    assert run.check("strided_values")["status"] == "failed" and run.report["score"] < 100.0
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("differential_attention", "strided")
    assert "expanded over the batch" in first["title"] + first["evidence"] and "strided_inputs_accepted" in first["checks"]


def test_a_transpose_by_the_inputs_own_strides_earns_full_marks(tmp_path: Path) -> None:
    """DIFF V2 transposing its keys with as_strided and their own strides (stride 0 included) is right: full marks."""
    path = _variant(ROOT / "reference" / "diff_v2_attention.py", OWN_STRIDES_TRANSPOSE, tmp_path / "own_strides.py")
    run = grade(path, tmp_path, 2, "--no-preview")
    assert run.report["score"] == 100.0


@pytest.mark.parametrize(("path", "function", "evidence"), [
    ("diagnosis_winter/wrong/att_shared_head_keys_broadcast_batch.py", "differential_attention", "only when the inputs' expansion is every input over the heads or over the heads."),
    ("v2_winter/wrong/batch_broadcast_shortcut_checks_queries_only.py", "gqa_attention", "only q expanded over the batch"),
    ("v2_dusk/wrong/token_broadcast_keys_uniform_weights_shortcut.py", "gqa_attention", "only k expanded over the tokens"),
])  # fmt: skip
def test_a_shortcut_for_expanded_inputs_is_localised_to_that_expansion(path: str, function: str, evidence: str, tmp_path: Path) -> None:
    """Keys shared by the heads read as k[:, 0] (their batch axis then meets the heads), a batch shortcut taken when the
    queries alone are expanded, and uniform weights taken when the keys are expanded over the tokens: the first root cause
    names the expansion (over the heads, or one input's) that shows it."""
    run = grade(ROOT / "tests/corpus" / path, tmp_path, 20261201, "--no-preview")
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == (function, "strided")
    assert evidence in first["evidence"]


@pytest.mark.parametrize(("path", "function", "inputs"), [
    ("diagnosis_dusk/wrong/att_fn_backward_reduces_broadcast_axes.py", "differential_attention", "q1, k1, q2, k2, value"),
    ("v2_tide/wrong/gate_function_reduces_grad_over_broadcast_batch.py", "diff_v2_attention", "lambda_logits"),
])  # fmt: skip
def test_a_backward_that_sums_over_broadcast_axes_itself_is_named_for_expanded_inputs(path: str, function: str, inputs: str,
                                                                                     tmp_path: Path) -> None:  # fmt: skip
    """A hand-written backward that sums each gradient over its input's stride-0 axes (which autograd does again): right in
    contiguous memory, so the first root cause is the expanded layout ("strided"), with the inputs whose gradients disagree."""
    run = grade(ROOT / "tests/corpus" / path, tmp_path, 20261201, "--no-preview")
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == (function, "strided")
    assert first["title"] == "The backward pass is wrong with the inputs expanded over the batch (stride 0)"
    assert f"Your gradient for {inputs} disagrees" in first["evidence"] and "In contiguous memory" in first["evidence"]


@pytest.mark.parametrize(("reference", "change", "function", "name"), [
    ("diff_attention.py", DETACH_EXPANDED_VALUE, "differential_attention", "value"),
    ("diff_v2_attention.py", DETACH_EXPANDED_GATES, "diff_v2_attention", "lambda_logits"),
])  # fmt: skip
def test_an_expanded_input_whose_gradient_is_dropped_fails_and_is_named(reference: str, change: tuple[str, str], function: str,
                                                                       name: str, tmp_path: Path) -> None:  # fmt: skip
    """An input detached when it has a stride-0 dim (a broadcast view of a tensor that requires grad): the strided gradient
    check fails, saying that no gradient reached that input, and the first root cause is that input's cut graph with the
    inputs expanded, at the detaching line."""
    run = grade(_variant(ROOT / "reference" / reference, change, tmp_path / "detached.py"), tmp_path, 3, "--no-preview")
    check = run.check("strided_gradients")
    assert check["status"] == "failed" and run.report["score"] < 100.0
    assert f"no gradient reached {name}" in check["message"] and "expanded" in check["message"]
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == (function, "graph", f"No gradient reaches {name}")
    assert "expanded over the batch (stride 0)" in first["evidence"] and ".detach() if 0 in" in first["evidence"]


def test_a_direction_moves_an_expanded_input_by_its_first_element() -> None:
    """A gradient of the input's own shape is read against the whole direction; one of size 1 along a dim (read at the tensor
    an expanded input expands) against the direction's first element there; a shape that fits neither way gets none."""
    direction = np.arange(12.0).reshape(2, 3, 2)
    assert probes.read_like(direction, (2, 3, 2)) is direction
    assert np.array_equal(probes.read_like(direction, (1, 3, 2)), direction[:1])
    assert np.array_equal(probes.read_like(direction, (2, 1, 2)), direction[:, :1])
    assert probes.read_like(direction, (3, 2)) is None and probes.read_like(direction, (2, 2, 2)) is None
