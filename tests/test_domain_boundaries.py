"""Calls at boundaries of the domain that blind corpora found unvisited: gradients past 512 tokens without the mask, tied
branches, signed integer tensor coefficients (and the stub's refusal of unsigned ones), and the words and findings the
diagnosis gives them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ROOT, load_module

from grader.exercises.diffattn import cases as attention_cases
from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain, findings, slips

SEEDS = [1, 2, 3]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_gradient_set_differentiates_without_the_mask_one_past_every_block(seed: int) -> None:
    """Each function's gradient set holds a causal=False call at 513 tokens: one past a multiple of every block size up to 512."""
    assert domain.ONE_PAST_BLOCKS == 513 and all(domain.ONE_PAST_BLOCKS % b == 1 for b in (*domain.BLOCK_SIZES, 512))
    for found, tokens in ((attention_suite.attention_gradients(seed), lambda c: c.q1.shape[-2]),
                          (v2_suite.gqa_gradients(seed), lambda c: c.q.shape[1]), (v2_suite.diff_gradients(seed), lambda c: c.q.shape[1])):  # fmt: skip
        assert [c.is_causal for c in found if tokens(c) == domain.ONE_PAST_BLOCKS] == [False]


@pytest.mark.parametrize("seed", SEEDS)
def test_tied_branches_and_tied_pairs_are_differentiated(seed: int) -> None:
    """Differential attention is differentiated with q2 = q1 and k2 = k1 in value (separate arrays, a tensor coefficient that
    requires grad), DIFF V2 with the query heads of every pair equal."""
    tied = [c for c in attention_suite.attention_gradients(seed) if np.array_equal(c.q1, c.q2) and np.array_equal(c.k1, c.k2)]
    assert len(tied) == 1 and tied[0].q2 is not tied[0].q1 and tied[0].requires_grad("coefficient")
    pairs = [c for c in v2_suite.diff_gradients(seed) if c.q.shape[2] > 1 and np.array_equal(c.q[:, :, 0::2], c.q[:, :, 1::2])]
    assert len(pairs) == 1 and "equal in value" in pairs[0].label()


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


def test_the_stub_refuses_unsigned_coefficients_and_accepts_signed_ones() -> None:
    """The contract's tensor coefficients are floating or signed integer: -coefficient wraps around for unsigned dtypes."""
    stub = load_module(ROOT / "exercise" / "diff_attention.py")
    q = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    v = torch.zeros(1, 1, 2, 4, dtype=torch.float64)
    for dtype in (torch.int64, torch.int8, torch.float32):
        stub.check_attention_inputs(q, q, q, q, v, torch.tensor(1, dtype=dtype))
    with pytest.raises(TypeError, match="floating or signed integer dtype"):
        stub.check_attention_inputs(q, q, q, q, v, torch.tensor(1, dtype=torch.uint8))


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
