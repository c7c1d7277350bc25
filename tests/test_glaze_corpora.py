"""What the glaze corpora (memory-saving implementations, written blind) showed: gradient calls that bind every argument by
name. A decorator that keeps a graph only when one of its positional arguments requires grad scored 100 while every
gradient call passed its tensors by position; each gradient set now calls its first two cases again with every argument
by name."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import first_root_cause, grade

from grader.exercises.diffattn import cases, suite
from grader.exercises.diffv2 import cases as v2_cases
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain

CORPUS = Path(__file__).resolve().parent / "corpus"
SEED = 20261201


@pytest.mark.parametrize("gradient_set", [suite.attention_gradients, v2_suite.gqa_gradients, v2_suite.diff_gradients])
def test_every_gradient_set_ends_with_its_first_two_calls_bound_by_name(gradient_set: Callable[[int], list[Any]]) -> None:
    """The last two cases are the first two with binding "names", every parameter in the keyword order, the same arrays."""
    drawn = gradient_set(SEED)
    for first, named in zip(drawn[:2], drawn[-2:]):
        assert named.binding == "names" and first.binding != "names"
        parameters = cases.ATTENTION_PARAMETERS if named.function == cases.ATTENTION else v2_cases.PARAMETERS[named.function]
        assert sorted(named.keyword_order) == sorted(parameters)
        assert named.frozen == first.frozen and named.cotangent is first.cotangent


def test_a_copy_bound_by_name_shares_the_case_s_arrays_and_nothing_else_changes() -> None:
    """domain.by_name changes the binding and the keyword order only."""
    rng = np.random.default_rng(0)
    case = cases.attention_case(rng, (1, 2, 3, 2), "float64", True, binding="positional")
    named = domain.by_name(case, rng, cases.ATTENTION_PARAMETERS)
    assert replace(named, binding=case.binding, keyword_order=case.keyword_order) == case
    assert named.q1 is case.q1 and named.value is case.value


def test_a_graph_kept_only_for_positional_tensors_loses_points_and_is_the_graph_s(tmp_path: Path) -> None:
    """The decorator that runs under no_grad unless a positional argument requires grad: graph and gradient points lost, and
    the first cause names the binding by name."""
    path = CORPUS / "diagnosis_glaze" / "wrong" / "att_no_graph_decorator_reads_positional_tensors.py"
    run = grade(path, tmp_path / "full", SEED)
    assert run.report is not None and run.report["score"] < 100.0
    assert run.check("graph_attached")["status"] == "failed"
    cause = first_root_cause("diagnosis_glaze/wrong/att_no_graph_decorator_reads_positional_tensors.py", tmp_path, "T1")
    assert (cause["function"], cause["component"]) == ("differential_attention", "graph")
    assert cause["title"].endswith("when the argument binding is names")


def test_an_exception_raised_in_a_graded_callee_that_raises_on_its_own_calls_is_the_callee_s(tmp_path: Path) -> None:
    """diff_v2_attention's calls fail inside gqa_attention's code with another error than gqa_attention's own calls give (the
    sizes differ): that cause is gqa_attention's, called by diff_v2_attention, and no cause is diff_v2_attention's."""
    run = grade(CORPUS / "v2_glaze" / "wrong" / "key_blocks_narrowed_to_block_end.py", tmp_path, SEED, "--exercise", "diff_v2")
    assert run.report is not None
    causes = run.report["diagnosis"]["root_causes"]
    assert {cause["function"] for cause in causes} == {"gqa_attention"}
    called = [cause for cause in causes if cause["title"].endswith("(called by diff_v2_attention)")]
    assert len(called) == 1 and "(in gqa_attention)" in called[0]["evidence"]
