"""What the breeze corpora (written blind) found credited: arithmetic on the coefficient in its own dtype, and a λ backward
that cancels when the second exponential is the larger. Each is met by a mechanism, not by a call made for the file: a
tensor coefficient of every dtype the contract allows, at values whose neighbours that dtype cannot hold, and exponents
far apart in both orders (tests/test_domain_edges.py). One of their files also showed that an exception worded by another
library's own size check went unexplained: a message that speaks of sizes and quotes them now reads as sizes that do not fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, grade

from grader.exercises.diffattn import cases as attention_cases
from grader.exercises.diffattn import suite as attention_suite
from grader.toolkit import domain, slips

SEEDS = (20261201, 1, 2)


@pytest.mark.parametrize(("corpus_file", "seed", "check", "component", "title"), [
    ("diagnosis_breeze/wrong/att_common_mode_weight_in_coefficient_dtype.py", 20261201, "coefficient_values", "coefficient",
     "A coefficient of another dtype than the inputs' gives wrong values"),
    ("diagnosis_breeze/wrong/lam_fn_smaller_exp_from_output.py", 2, "lambda_gradients", "backward", "The backward pass is wrong for q2 and k2"),
])  # fmt: skip
def test_the_files_credited_before_lose_points_and_are_named(corpus_file: str, seed: int, check: str, component: str, title: str,
                                                             tmp_path: Path) -> None:  # fmt: skip
    """Each fails the check whose calls meet its bug, and its first root cause names the part."""
    run = grade(ROOT / "tests" / "corpus" / corpus_file, tmp_path, seed)
    assert run.report["score"] < 100.0 and run.check(check)["status"] == "failed"
    cause = run.report["diagnosis"]["root_causes"][0]
    assert (cause["component"], cause["title"]) == (component, title)
    assert check in cause["checks"]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_coefficient_dtype_the_contract_allows_is_called_in_its_dtype(seed: int) -> None:
    """float16, bfloat16, float32 and float64, int8 to int64 tensors reach the worker in their dtype; the integer ones at both
    ends of their allowed range; none of the integer or half-precision ones is asked for a gradient."""
    called = [c for c in attention_suite.attention_coefficients(seed) if c.coefficient_is_tensor]
    assert {c.coefficient_dtype for c in called} >= {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64"}
    for dtype in ("int8", "int16", "int32"):
        assert sorted(c.coefficient for c in called if c.coefficient_dtype == dtype) == list(domain.integer_ends(dtype))
    for case in called:
        coefficient = attention_suite.attention_request(case, requires_grad=True).inputs[-1]
        assert coefficient.dtype == case.coefficient_dtype
        if case.coefficient_dtype in (*attention_cases.INTEGER_DTYPES, *attention_cases.LOW_PRECISION_DTYPES):
            assert not coefficient.requires_grad and not case.requires_grad("coefficient")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_an_inexact_complement_is_a_number_of_its_dtype_whose_neighbours_are_not(dtype: str) -> None:
    """c is held exactly by its dtype, 1/4 ≤ |c| < 1/2, and neither 1 − c nor 1 + c is a number of that dtype."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        c = domain.inexact_complement(rng, dtype)
        assert float(domain.exact(c, dtype)) == c and 0.25 <= abs(c) < 0.5
        assert float(domain.exact(1.0 - c, dtype)) != 1.0 - c and float(domain.exact(1.0 + c, dtype)) != 1.0 + c


def test_bfloat16_rounding_is_torchs() -> None:
    """numpy has no bfloat16: the grader's rounding to it gives what torch's conversion gives, over many magnitudes."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(20000) * np.exp(rng.uniform(-30.0, 30.0, 20000))
    expected = torch.from_numpy(values).to(torch.bfloat16).double().numpy()
    assert np.array_equal(domain.exact(values, "bfloat16"), expected)


def test_integer_ends_leave_out_the_least_value_the_stub_refuses() -> None:
    """One above the least value (whose negation wraps around) and the greatest."""
    assert domain.integer_ends("int8") == (-127, 127) and domain.integer_ends("int32") == (-(2**31) + 1, 2**31 - 1)


def test_a_size_check_worded_by_another_library_is_read_as_sizes_that_do_not_fit() -> None:
    """A message that speaks of a shape and quotes sizes is a shape fault, told by its words up to the first number."""
    told = slips.exception_kind("RuntimeError: The shape of the 2D attn_mask is torch.Size([5, 5]), but should be (2, 2).")
    assert told is not None and (told[0], told[3]) == ("shape", "The shape of the ")
    assert slips.exception_kind("RuntimeError: the 3 workers stopped") is None


def test_a_kernel_fed_the_batch_as_its_sequence_is_placed_by_the_sizes_that_work(tmp_path: Path) -> None:
    """torch's sequence-first multi-head attention fed batch-first tensors raises on its own mask check: the first root cause
    places it in the layout (it runs only when T = B) and explains the checks the exception failed."""
    run = grade(ROOT / "tests" / "corpus" / "v2_breeze" / "wrong" / "torch_mha_kernel_fed_batch_first.py", tmp_path, 20261201)
    cause = run.report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("gqa_attention", "layout")
    assert "(T = B)" in cause["evidence"] and "attn_mask" in cause["evidence"]
    assert {"gqa_causal_values", "gqa_gradients", "toy_offset_scaling"} <= set(cause["checks"])
