"""Calls at boundaries of the domain that blind corpora found unvisited: gradients past 512 tokens without the mask and of
faint keys, tied
branches, signed integer tensor coefficients (and the stub's refusal of unsigned ones), axes of equal sizes, (batch, head)
pairs past every block size, coefficients near 0 in every autograd mode, and the words and findings the diagnosis gives
them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, grade, grade_class, load_module

from grader.exercises.diffattn import cases as attention_cases
from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import cases as v2_cases
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain, findings, slips

SEEDS = [1, 2, 3]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_gradient_set_differentiates_without_the_mask_and_with_it_one_past_every_block(seed: int) -> None:
    """Each function's gradient set holds a causal=False call and a causal one at 513 tokens: one past a multiple of every block
    size up to 512."""
    assert domain.ONE_PAST_BLOCKS == 513 and all(domain.ONE_PAST_BLOCKS % b == 1 for b in (*domain.BLOCK_SIZES, 512))
    for found, tokens in ((attention_suite.attention_gradients(seed), lambda c: c.q1.shape[-2]),
                          (v2_suite.gqa_gradients(seed), lambda c: c.q.shape[1]), (v2_suite.diff_gradients(seed), lambda c: c.q.shape[1])):  # fmt: skip
        assert [c.is_causal for c in found if tokens(c) == domain.ONE_PAST_BLOCKS and not c.note] == [False, True]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_gradient_set_differentiates_keys_too_faint_for_float32_in_float64(seed: int) -> None:
    """Each gradient set has one float64 call at 513 tokens whose keys from 128 on weigh below 1e-6 and above 1e-18 for every
    query that sees them (a whole aligned block of every block size, up to 256), the first 128 at least 1e-3 in those rows."""
    heads = ((attention_suite.attention_gradients(seed), lambda c: (c.q1[0, 0], c.k1[0, 0])),
             (v2_suite.gqa_gradients(seed), lambda c: (c.q[0, :, 0], c.k[0, :, 0])),
             (v2_suite.diff_gradients(seed), lambda c: (c.q[0, :, 0], c.k[0, :, 0])))  # fmt: skip
    for found, head in heads:
        faint = [c for c in found if "faint" in c.note]
        assert len(faint) == 1 and faint[0].dtype == "float64"
        q, k = head(faint[0])
        tokens = q.shape[0]
        logits = np.where(np.tri(tokens, dtype=bool) | (not faint[0].is_causal), q @ k.T / np.sqrt(q.shape[-1]), -np.inf)
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        seen = weights[domain.FIRST_FAINT:, domain.FIRST_FAINT:]
        seen = seen[np.tri(tokens - domain.FIRST_FAINT, dtype=bool) | (not faint[0].is_causal)]
        assert tokens == domain.ONE_PAST_BLOCKS and domain.FIRST_FAINT == 128
        assert 1e-18 < seen.min() and seen.max() < 1e-6 and weights[domain.FIRST_FAINT :, : domain.FIRST_FAINT].min() > 1e-3


def test_a_backward_that_skips_blocks_of_tiny_weights_loses_gradient_points(tmp_path: Path) -> None:
    """A blind corpus's block-sparse backward (a block of 64 keys skipped when its weights all fall below 1e-8): the gradient
    check fails and the first root cause is gqa_attention's backward pass."""
    run = grade(ROOT / "tests/corpus/v2_dusk/wrong/block_sparse_backward_skips_small_key_blocks.py", tmp_path, 2, "--no-preview")
    assert run.check("gqa_gradients")["status"] == "failed" and run.report["score"] < 100.0
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("gqa_attention", "backward")


@pytest.mark.parametrize("seed", SEEDS)
def test_tied_branches_and_tied_pairs_are_differentiated(seed: int) -> None:
    """Differential attention is differentiated with q2 = q1 and k2 = k1 in value (separate arrays, a tensor coefficient that
    requires grad), DIFF V2 with the query heads of every pair equal."""
    tied = [c for c in attention_suite.attention_gradients(seed)
            if np.array_equal(c.q1, c.q2) and np.array_equal(c.k1, c.k2) and not c.one_object]  # (one object for all four: its own case)
    assert len(tied) == 1 and tied[0].q2 is not tied[0].q1 and tied[0].requires_grad("coefficient")
    pairs = [c for c in v2_suite.diff_gradients(seed)
             if c.q.shape[2] > 1 and np.array_equal(c.q[:, :, 0::2], c.q[:, :, 1::2]) and np.unique(c.q).size > 1]  # (constant q aside)
    assert len(pairs) == 1 and "equal in value" in pairs[0].label()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_coefficient_set_has_one_pair_of_branch_inputs_tied_at_coefficient_one(seed: int) -> None:
    """attention_coefficients holds q2 = q1 (keys that differ) and k2 = k1 (queries that differ), each at coefficient 1, as
    distinct tensors, just before its three calls that pass one tensor object for several arguments."""
    found = attention_suite.attention_coefficients(seed)
    tied_queries, tied_keys = [c for c in found if c.note in ("q2 = q1", "k2 = k1")]
    after = next(i for i, c in enumerate(found) if c is tied_keys) + 1
    assert not (tied_queries.one_object or tied_keys.one_object) and [bool(c.one_object) for c in found[after:after + 4]] == [True] * 3 + [False]
    assert (tied_queries.note, tied_keys.note) == ("q2 = q1", "k2 = k1") and tied_queries.coefficient == tied_keys.coefficient == 1.0
    assert np.array_equal(tied_queries.q1, tied_queries.q2) and not np.array_equal(tied_queries.k1, tied_queries.k2)
    assert np.array_equal(tied_keys.k1, tied_keys.k2) and not np.array_equal(tied_keys.q1, tied_keys.q2)


def test_a_shortcut_for_equal_branches_that_compares_one_pair_loses_points(tmp_path: Path) -> None:
    """A blind corpus's zero output when q1 equals q2 and the coefficient is 1 (the keys compared with themselves): the
    coefficient check fails at the call with q2 = q1."""
    run = grade(ROOT / "tests/corpus/diagnosis_tide/wrong/att_identical_branches_cancel_check_typo.py", tmp_path, 2, "--no-preview")
    check = run.check("coefficient_values")
    assert check["status"] == "failed" and "q2 = q1" in check["message"] and run.report["score"] < 100.0


@pytest.mark.parametrize("seed", SEEDS)
def test_integer_tensor_coefficients_are_called_with_their_values_and_never_differentiated(seed: int) -> None:
    """int64 0-dim coefficients (a signed integer dtype the contract allows) reach the worker in their dtype, with integer
    values, and no gradient is asked of them."""
    kinds = {c.coefficient_kind: c for c in attention_suite.attention_coefficients(seed)}
    graded = [c for c in attention_suite.attention_gradients(seed) if c.coefficient_kind == "int64 tensor"]
    assert "int64 tensor" in kinds and len(graded) == 1
    for case in (kinds["int64 tensor"], graded[0]):
        assert case.coefficient == int(case.coefficient) and not case.requires_grad("coefficient")
        request = attention_suite.attention_request(case, requires_grad=True)
        coefficient = request.inputs[-1]
        assert coefficient.dtype == attention_cases.COEFFICIENT_DTYPES[case.coefficient_kind] == "int64" and not coefficient.requires_grad


def test_the_stub_refuses_unsigned_coefficients_and_least_integers_and_accepts_other_signed_ones() -> None:
    """The contract's tensor coefficients are floating or signed integer, not a signed dtype's least value: -coefficient wraps around for those."""
    stub = load_module(ROOT / "exercise" / "diff_attention.py")
    q = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    v = torch.zeros(1, 1, 2, 4, dtype=torch.float64)
    for dtype in (torch.int64, torch.int8, torch.float32):
        stub.check_attention_inputs(q, q, q, q, v, torch.tensor(1, dtype=dtype))
    with pytest.raises(TypeError, match="floating or signed integer dtype"):
        stub.check_attention_inputs(q, q, q, q, v, torch.tensor(1, dtype=torch.uint8))
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        least = torch.iinfo(dtype).min
        stub.check_attention_inputs(q, q, q, q, v, torch.tensor(least + 1, dtype=dtype))
        with pytest.raises(ValueError, match=f"least value of its integer dtype, whose negation wraps around to itself \\(got {least} as"):
            stub.check_attention_inputs(q, q, q, q, v, torch.tensor(least, dtype=dtype))


def test_token_counts_part_at_the_largest_block() -> None:
    """The diagnosis words a length as 1, up to 512, or past 512 tokens."""
    assert [domain.token_count(t) for t in (1, 2, 512, 513, 1025)] == ["1", "2 to 512", "2 to 512", "more than 512", "more than 512"]


def test_separating_finds_the_one_way_of_calling_every_failing_call_shares() -> None:
    """One attribute value that every failing call has and no working one: that alone; none when a working call shares it."""
    failing = [{"the coefficient": "0-dim uint8 tensor", "causal": "True"}, {"the coefficient": "0-dim uint8 tensor", "causal": "False"}]
    working = [{"the coefficient": "Python float", "causal": "True"}, {"the coefficient": "0-dim tensor", "causal": "False"}]
    assert slips.separating(failing, working) == (("the coefficient", "0-dim uint8 tensor"),)
    assert slips.separating(failing, working + [{"the coefficient": "0-dim uint8 tensor", "causal": "True"}]) == ()


def test_separating_several_values_of_one_attribute_only_when_asked() -> None:
    """Failing calls with two kinds of coefficient that no working call has: "a or b" for exceptions (``several``), else
    nothing (two values of one attribute are no single way of calling)."""
    failing = [{"the coefficient": "0-dim float64 tensor", "causal": "True"}, {"the coefficient": "0-dim uint8 tensor", "causal": "False"}]
    working = [{"the coefficient": "Python float", "causal": "True"}, {"the coefficient": "0-dim tensor", "causal": "False"}]
    assert slips.separating(failing, working, several=True) == (("the coefficient", "0-dim float64 tensor or 0-dim uint8 tensor"),)
    assert slips.separating(failing, working) == ()


def test_wrong_only_when_places_a_fault_by_a_declared_attribute_and_nothing_else() -> None:
    """A finding when the value checks' wrong calls part from the right ones by an attribute the exercise places; none for an
    undeclared attribute, and none when the probes already found the forward's fault."""
    calls = [({"the coefficient": "0-dim uint8 tensor", "the inputs' dtype": "float64"}, False),
             ({"the coefficient": "Python float", "the inputs' dtype": "float64"}, True),
             ({"the coefficient": "0-dim tensor", "the inputs' dtype": "float32"}, True)]  # fmt: skip
    found = findings.Found()
    assert findings.wrong_only_when(found, "f", calls, {"the coefficient": "coefficient"})
    assert [(f.component, f.stage, f.title) for f in found.findings] == [("coefficient", "forward", "f gives wrong values when the coefficient is 0-dim uint8 tensor")]
    assert "1 of the value checks' calls" in found.findings[0].evidence and "the other 2 calls were right" in found.findings[0].evidence
    assert not findings.wrong_only_when(found, "f", calls, {"the coefficient": "coefficient"})  # the forward already has a cause
    assert not findings.wrong_only_when(findings.Found(), "f", calls, {"the inputs' dtype": "dtype"})


FROST = ROOT / "tests" / "corpus" / "diagnosis_frost" / "wrong"
# A DIFF V2 gate that also accepts [B, H, T] logits and tells them apart by size: right unless T == H.
GATE_LAYOUT_GUESSED = (
    "    attended = gqa_attention(q, k, v, causal)\n",
    "    if lambda_logits.shape[1] == lambda_logits.shape[2]:\n        lambda_logits = lambda_logits.transpose(1, 2)\n"
    "    attended = gqa_attention(q, k, v, causal)\n",
)


@pytest.mark.parametrize("seed", SEEDS)
def test_output_sets_meet_coinciding_axes_and_pairs_past_every_block(seed: int) -> None:
    """Both exercises' output sets call on a value as long as it is wide (B = H = T = 2D), on every axis equally long, and on
    (batch, head) pairs past the largest block size and no multiple of the smallest."""
    shapes = [c.q1.shape for c in attention_suite.attention_causal(seed) + attention_suite.attention_noncausal(seed)]
    assert any(b == h == t == 2 * d for b, h, t, d in shapes) and any(b == h == t == d > 1 for b, h, t, d in shapes)
    assert any(b * h > max(domain.BLOCK_SIZES) and b * h % min(domain.BLOCK_SIZES) for b, h, _, _ in shapes)
    for output_set in (v2_suite.gqa_causal, v2_suite.gqa_noncausal, v2_suite.diff_causal, v2_suite.diff_noncausal):
        found = output_set(seed)
        assert any(c.q.shape[0] == c.q.shape[1] == c.q.shape[2] == 2 * c.q.shape[3] == 2 * c.k.shape[2] for c in found)
        assert any(len(set(c.output_shape) | {c.k.shape[2]}) == 1 for c in found)
        pairs = [c.output_shape[0] * c.output_shape[2] for c in found]
        assert any(n > max(domain.BLOCK_SIZES) and n % min(domain.BLOCK_SIZES) for n in pairs)


@pytest.mark.parametrize("seed", SEEDS)
def test_coefficients_near_zero_are_called_in_every_autograd_mode(seed: int) -> None:
    """Three float64 calls with 1e-8 <= |coefficient| <= 1e-3, one per autograd mode (a shortcut under no_grad meets one)."""
    small = [c for c in attention_suite.attention_coefficients(seed) if 0 < abs(c.coefficient) <= 1e-3]
    assert all(c.dtype == "float64" and abs(c.coefficient) >= 1e-8 for c in small)
    assert sorted(c.grad_mode for c in small) == sorted(domain.GRAD_MODES)


def test_faults_at_those_calls_lose_their_checks(tmp_path: Path) -> None:
    """Value taken as feature-major when T == 2D, batch-head blocks whose tail is never computed, the second branch skipped
    under no_grad for a small coefficient, an inference tensor from a no_grad call, λ resetting its vectors' .grad, and a
    DIFF V2 gate transposed when T == H each fail the check that covers them, on a seed no corpus measurement used."""
    expected = {
        "att_value_major_layout_guessed_from_shape": "causal_values",
        "att_head_groups_range_drops_tail": "causal_values",
        "att_eval_skips_branch_for_tiny_coefficient": "coefficient_values",
        "att_no_grad_path_inference_tensor_output": "attention_returns_one_tensor",
        "lam_param_grads_reset": "inputs_not_modified",
    }
    runs = grade_class({name: FROST / f"{name}.py" for name in expected}, 9, tmp_path / "attention")
    assert {name: runs[name].check(check)["status"] for name, check in expected.items()} == dict.fromkeys(expected, "failed")
    first = runs["att_no_grad_path_inference_tensor_output"].report["diagnosis"]["root_causes"][0]
    assert (first["component"], first["title"]) == ("type", "differential_attention returns inference tensors to callers outside inference mode")
    assert "`with torch.inference_mode():`" in first["evidence"]
    assert "lies within [" in runs["att_head_groups_range_drops_tail"].check("causal_values")["message"]
    source = (ROOT / "reference" / "diff_v2_attention.py").read_text()
    assert source.count(GATE_LAYOUT_GUESSED[0]) == 1
    (tmp_path / "gate.py").write_text(source.replace(*GATE_LAYOUT_GUESSED))
    gate = grade(tmp_path / "gate.py", tmp_path / "v2", 9, "--exercise", "diff_v2")
    assert gate.report["score"] < 100 and gate.check("diff_v2_noncausal_values")["status"] == "failed"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_diff_v2_output_set_has_many_problems_in_aligned_and_unaligned_groups(seed: int) -> None:
    """Each DIFF V2 output set has two calls whose (batch, output head) pairs number past 256 and no multiple of 16: one in
    groups of the function's smallest size, one in groups of a size that divides no block size (3 for gqa_attention, 6 for
    diff_v2_attention), where a block of flattened rows starts inside a group."""
    for name, smallest, unaligned in (("gqa_causal", 1, 3), ("gqa_noncausal", 1, 3), ("diff_causal", 2, 6), ("diff_noncausal", 2, 6)):
        many = [c for c in getattr(v2_suite, name)(seed) if c.q.shape[0] * c.output_shape[2] > max(domain.BLOCK_SIZES)]
        assert sorted(c.group for c in many) == [smallest, unaligned], name
        assert all(c.q.shape[0] * c.output_shape[2] % min(domain.BLOCK_SIZES) for c in many)
        assert all(min(domain.BLOCK_SIZES) % c.group for c in many if c.group == unaligned)


LOG_DOMAIN_GATE = """
def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    odd = a[:, :, 1::2]
    gated = torch.sign(odd) * torch.exp(torch.nn.functional.logsigmoid(lambda_logits).unsqueeze(-1) + torch.log(odd.abs()))
    return a[:, :, 0::2] - gated
"""


@pytest.mark.parametrize("seed", SEEDS)
def test_every_gradient_set_has_a_value_feature_zero_at_every_token(seed: int) -> None:
    """Each gradient set has one call, in heads wider than one feature, whose values have their middle feature exactly zero at
    every token (a ReLU'd or pruned projection), and says so in its label."""
    for found, values in ((attention_suite.attention_gradients(seed), lambda c: c.value), (v2_suite.gqa_gradients(seed), lambda c: c.v),
                          (v2_suite.diff_gradients(seed), lambda c: c.v)):  # fmt: skip
        # the summed copy and the by-name copies (domain.by_name) aside
        dead = [c for c in found if "zero at every token" in c.label() and domain.SUMMED not in c.label() and c.binding != "names"]
        assert len(dead) == 1 and values(dead[0]).shape[-1] > 1
        feature = values(dead[0]).shape[-1] // 2
        assert not values(dead[0])[..., feature].any() and values(dead[0]).any()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_input_is_differentiated_all_zero_and_constant(seed: int) -> None:
    """Every gradient set of both exercises holds, for each tensor input, a call with it all zeros and one with every element
    one nonzero value (zero- and constant-initialised parameters), every input trainable, the others varied; labels say so."""
    sets = ((attention_suite.attention_gradients, attention_cases.INPUT_NAMES), (attention_suite.lambda_frozen_subsets, attention_cases.LAMBDA_NAMES),
            (v2_suite.gqa_gradients, v2_cases.TENSORS[v2_cases.GQA]), (v2_suite.diff_gradients, v2_cases.TENSORS[v2_cases.DIFF_V2]))
    for case_set, names in sets:
        found = case_set(seed)
        for name in names:
            (zero,) = [c for c in found if domain.ZEROED.format(name) in c.label()]
            (constant,) = [c for c in found if f"every element of {name} " in c.label()]
            assert not getattr(zero, name).any()
            held = np.unique(getattr(constant, name))
            assert held.size == 1 and 0.25 <= abs(held[0]) <= 1.5 and np.asarray(getattr(constant, name)).size >= 2
            for case in (zero, constant):
                assert all(case.requires_grad(n) for n in names)
                assert all(np.unique(getattr(case, n)).size > 1 for n in names if n != name)


def test_a_gated_product_in_the_log_domain_loses_its_gradient_points(tmp_path: Path) -> None:
    """sign(A) · exp(log σ(ℓ) + log |A|) is right in value and NaN in the backward pass where an odd head's output is exactly
    0: the call with a value feature zero at every token fails the gradient checks of q, k and v, on every seed."""
    source = (ROOT / "reference" / "diff_v2_attention.py").read_text()
    start = source.index("def diff_v2_attention(")
    (tmp_path / "log_gate.py").write_text(source[:start] + LOG_DOMAIN_GATE.lstrip())
    for seed in SEEDS:
        run = grade(tmp_path / "log_gate.py", tmp_path / str(seed), seed, "--exercise", "diff_v2", "--tiers", "T3")
        assert run.check("diff_v2_query_key_gradients")["status"] == "failed" and "NaN" in run.check("diff_v2_query_key_gradients")["message"]


def test_one_head_stored_token_major_is_contiguous_to_the_slip_analysis() -> None:
    """Heads permuted with one head pass is_contiguous(), and the slip analysis words them contiguous; with more heads, or any
    other layout but the contiguous one, they are not."""
    assert not domain.non_contiguous("heads_permuted", (2, 1, 5, 3)) and domain.non_contiguous("heads_permuted", (2, 2, 5, 3))
    assert domain.non_contiguous("offset", (2, 1, 5, 3)) and not domain.non_contiguous("contiguous", (2, 2, 5, 3))
