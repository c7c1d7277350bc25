"""Inputs at one address of one storage (distinct tensors, one data_ptr()): how their values are drawn, what the worker
builds, and what they catch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import grade

from grader.core.invoke import Call, Request, TensorInput, invoke
from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain
from grader.worker.client import ForkServer, Worker, WorkerLimits

ROOT = Path(__file__).resolve().parents[1]
# Reports how many distinct addresses its four vectors start at, then their values as it sees them.
ADDRESSES = """
import torch
def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    vectors = (q1, k1, q2, k2)
    starts = torch.tensor([float(len({v.data_ptr() for v in vectors}))], dtype=q1.dtype)
    return torch.cat([starts, *vectors])
"""


def test_aliased_values_agree_wherever_two_inputs_share_an_address() -> None:
    """Element j of the n-th array sits at address j·(n + 1): where addresses coincide the earlier array's value holds,
    elsewhere each array keeps its own."""
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(shape) for shape in ((2, 3), (2, 3), (6,), (1, 4))]
    held = domain.aliased(arrays)
    assert np.array_equal(held[0], arrays[0])
    owner: dict[int, tuple[int, float]] = {}
    for n, (array, values) in enumerate(zip(arrays, held)):
        assert values.shape == array.shape
        for j, (sent, kept) in enumerate(zip(array.reshape(-1), values.reshape(-1))):
            address = j * (n + 1)
            if address in owner:
                assert kept == owner[address][1]
            else:
                assert kept == sent
                owner[address] = (n, kept)


def test_the_worker_starts_aliased_inputs_at_one_address_with_the_values_sent(tmp_path: Path) -> None:
    """Values that agree where the inputs overlap share one data_ptr(); values that do not get memory of their own, so
    every input still holds exactly what was sent."""
    rng = np.random.default_rng(7)
    raw = [rng.standard_normal(5) for _ in range(4)]
    with ForkServer() as forks:
        worker = Worker(ADDRESSES, "addresses.py", ["differential_lambda"], WorkerLimits(call_timeout_s=10), forks)
        try:
            for values, starts in ((domain.aliased(raw), 1), (raw, 4)):
                tensors = tuple(TensorInput(v, "float64", False, domain.ALIASED) for v in values)
                outcome = invoke(worker, Request((Call("differential_lambda", tensors),)))
                assert outcome.failure is None, outcome.failure
                got = np.asarray(outcome.results[0].value)
                assert got[0] == starts
                assert np.array_equal(got[1:], np.concatenate(values))
        finally:
            worker.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_every_strided_set_of_both_exercises_holds_aliased_calls_whose_values_agree(seed: int) -> None:
    """One call of each strided set has every input aliased (two for differential_lambda), its values those the worker's
    storage holds, also in a case rebuilt from other values (as the shrinker rebuilds cases)."""
    drawn = [(c, attention_suite.cases.LAMBDA_NAMES) for c in attention_suite.lambda_strided(seed) if c.layout == domain.ALIASED]
    assert len(drawn) == 2
    drawn += [(c, attention_suite.cases.INPUT_NAMES) for c in attention_suite.attention_strided(seed) if set(c.layouts) == {domain.ALIASED}]
    drawn += [(c, c.names) for name in ("gqa_strided", "diff_strided") for c in getattr(v2_suite, name)(seed)
              if set(c.memory_layouts) == {domain.ALIASED}]  # fmt: skip
    assert len(drawn) == 5
    rng = np.random.default_rng(seed)
    for case, names in drawn:
        rebuilt = replace(case, **{name: rng.standard_normal(getattr(case, name).shape) for name in names})
        for held in (case, rebuilt):
            inputs = [getattr(held, name) for name in names]
            assert all(np.array_equal(a, b) for a, b in zip(inputs, domain.aliased(inputs)))
        assert not np.array_equal(getattr(rebuilt, names[1]), getattr(case, names[1]))


def test_a_dot_product_that_takes_one_address_for_one_tensor_loses_points_and_is_localised(tmp_path: Path) -> None:
    """differential_lambda returning |q1|² when q1 and k1 start at one address fails strided_values, and the root cause
    names its memory layouts."""
    graded = grade(ROOT / "tests/corpus/diagnosis_winter/wrong/lam_tied_vectors_by_data_ptr.py", tmp_path, 1, "--audience", "instructor")
    failed = {c["id"] for t in graded.report["tiers"] for c in t["checks"] if c["status"] != "passed"}
    assert failed == {"strided_values"}
    cause = graded.report["diagnosis"]["root_causes"][0]
    assert (cause["function"], cause["component"]) == ("differential_lambda", "strided")
    assert "one data_ptr()" in cause["evidence"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_value_sets_pass_one_tensor_object_for_several_arguments(seed: int) -> None:
    """lambda_strided and attention_coefficients each hold calls whose request passes one TensorInput for two or more
    arguments (numbered once), those arguments equal in value, and none of them with gradients."""
    found = [(case, attention_suite.lambda_request(case)) for case in attention_suite.lambda_strided(seed) if case.one_object]
    found += [(case, attention_suite.attention_request(case)) for case in attention_suite.attention_coefficients(seed) if case.one_object]
    assert {c.one_object for c, _ in found} >= {("q1", "q2"), ("k1", "k2"), ("q1", "k1", "q2", "k2")}
    for case, request in found:
        arguments = list(request.calls[-1].args) + list(request.calls[-1].kwargs.values())
        tensors = [a for a in arguments if isinstance(a, TensorInput)]
        assert len({id(t) for t in tensors}) == len(tensors) - len(case.one_object) + 1 == len(request.inputs)
        assert all(np.array_equal(getattr(case, name), getattr(case, case.one_object[0])) for name in case.one_object)


def test_a_fast_path_for_one_query_object_loses_points_and_is_localised(tmp_path: Path) -> None:
    """A λ that takes `q2 is q1` for a shortcut and drops lambda_init there is right for equal but distinct queries: the
    strided check fails and the probes name the arguments passed as one tensor."""
    source = (ROOT / "reference" / "diff_attention.py").read_text()
    line = "    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init\n"
    shortcut = "    if q2 is q1:  # BUG: the shared-query shortcut forgets lambda_init\n        return torch.exp(q1 @ k1) - torch.exp(q1 @ k2)\n"
    assert source.count(line) == 1
    (tmp_path / "shortcut.py").write_text(source.replace(line, shortcut + line))
    run = grade(tmp_path / "shortcut.py", tmp_path / "report", 1, "--no-preview")
    assert run.check("strided_values")["status"] == "failed" and run.report["score"] < 100.0
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == ("differential_lambda", "lambda", "One tensor passed as q1 and q2 gives another result")


def test_a_tensor_passed_for_several_arguments_is_differentiated_as_one() -> None:
    """The gradient sets pass one tensor for q1 and k1 and for all four queries and keys (λ: all four vectors, q1 and q2):
    the request numbers it once, and its truth is the sum of the arguments' gradients with their allowances."""
    from grader.exercises.diffattn import expected

    found = [c for c in (*attention_suite.attention_gradients(1), *attention_suite.lambda_frozen_subsets(1)) if c.one_object]
    assert {c.one_object for c in found} == {("q1", "k1"), ("q1", "k1", "q2", "k2"), ("q1", "q2")}
    for case in found:
        request = attention_suite.case_request(case, True)
        positions = attention_suite.gradient_positions(case)
        assert set(positions) & set(case.one_object) == {case.one_object[0]} and len(set(positions.values())) == len(positions)
        assert max(positions.values()) < len(request.inputs)
    lam = next(c for c in found if c.one_object == ("q1", "k1", "q2", "k2") and isinstance(c, type(found[-1])) and not hasattr(c, "value"))
    (truth,) = expected.lambda_grads(lam).values()
    assert np.abs(truth.values).max() <= truth.allowed.max()  # exp(x·x) − exp(x·x): its gradient is zero


def test_merged_truths_sum_values_and_allowances() -> None:
    """domain.merged_truths reads a group at its first name, the others dropped; tensor_names leaves the group's later names out."""
    from grader.toolkit.tolerance import Truth

    truths = {n: Truth(np.full(2, float(i)), np.full(2, 0.1)) for i, n in enumerate(("q1", "k1", "q2"))}
    merged = domain.merged_truths(truths, ("q1", "q2"))
    assert set(merged) == {"q1", "k1"} and merged["q1"].values.tolist() == [2.0, 2.0] and merged["q1"].allowed.tolist() == [0.2, 0.2]
    assert domain.tensor_names(("q1", "k1", "q2", "k2"), ("k1", "k2")) == ("q1", "k1", "q2")
