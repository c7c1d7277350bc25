"""T1, the contract: one tensor of the right shape, the inputs' dtype and device, strided inputs, no mutation, a graph, bindings."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from grader.core.invoke import Outcome, Returned
from grader.core.plugin import GradingContext, check
from grader.exercises.diffv2 import suite
from grader.exercises.diffv2.cases import DIFF_V2, GQA, Case
from grader.exercises.diffv2.declared import DIFF_OUTPUT_CALLS, GQA_OUTPUT_CALLS, GRADIENT_CALLS, of, of_both
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison, combine, explained
from grader.toolkit.handout import Recipe
from grader.toolkit.verdicts import finding, graph_problem, kind_problem, modified_inputs, shape_dtype_problem, summarise

Problem = Callable[[Case, Returned], str | None]
Sets = list[tuple[CaseSet[Case], bool]]  # (case set, with gradients)


def _calls(grading: GradingContext, sets: Sets) -> Iterator[tuple[Case, Outcome, str]]:
    """Every call of the sets: its case, its outcome and its description."""
    for case_set, grads in sets:
        for i, case in enumerate(case_set(grading.seed)):
            yield case, suite.outcome(grading, case_set, i, case, grads), suite.described(case, grads)


def _judge(grading: GradingContext, sets: Sets, problem_of: Problem, success: str) -> Comparison:
    """One verdict: every call of the sets must return one plain tensor about which ``problem_of`` finds nothing."""
    findings = []
    for case, outcome, what in _calls(grading, sets):
        result, problem = suite.result_of(outcome)
        findings.append(finding(what, problem or (problem_of(case, result) if result else None)))
    return summarise(findings, success)


def _kind(case: Case, result: Returned) -> str | None:
    """One dense floating tensor of the output's shape."""
    return kind_problem(result, case.output_shape)


def _shape_and_dtype(case: Case, result: Returned) -> str | None:
    """The output's shape, the inputs' dtype, the CPU."""
    return shape_dtype_problem(result, case.output_shape, case.dtype)


def _graph(case: Case, result: Returned) -> str | None:
    """An output attached to the autograd graph."""
    return graph_problem(result.requires_grad, result.has_grad_fn)


@check("T1", 3, "gqa_attention returns one tensor of shape [B, T, Hq, D] (Hkv = 1, Hkv = Hq, G = 2 and 4 included)",
       judges=of(GQA, "type"), replay=Recipe("kind", GQA_OUTPUT_CALLS))  # fmt: skip
def test_gqa_returns_one_tensor(grading: GradingContext) -> None:
    sets = [(suite.gqa_causal, False), (suite.gqa_noncausal, False)]
    grading.conclude(_judge(grading, sets, _kind, "Every call returned one dense floating torch.Tensor of shape [B, T, Hq, D]."))


@check("T1", 3, "diff_v2_attention returns one tensor of shape [B, T, H, D] with H = Hq / 2",
       judges=of(DIFF_V2, "type"), replay=Recipe("kind", DIFF_OUTPUT_CALLS))  # fmt: skip
def test_diff_v2_returns_one_tensor(grading: GradingContext) -> None:
    sets = [(suite.diff_causal, False), (suite.diff_noncausal, False)]
    grading.conclude(_judge(grading, sets, _kind, "Every call returned one dense floating torch.Tensor of shape [B, T, Hq / 2, D]."))


@check("T1", 3, "Both functions keep the dtype (float32, float64) and device of their inputs",
       judges=of_both("dtype"), replay=Recipe("dtype", (*GQA_OUTPUT_CALLS, *DIFF_OUTPUT_CALLS)))  # fmt: skip
def test_dtype_and_device_kept(grading: GradingContext) -> None:
    sets = [(s, False) for s in (suite.gqa_causal, suite.gqa_noncausal, suite.diff_causal, suite.diff_noncausal)]
    grading.conclude(_judge(grading, sets, _shape_and_dtype, "float32 and float64 inputs gave outputs in their own dtype, on the CPU."))


@check("T1", 3, "Both functions accept strided views (transposed, head-permuted, sliced, fused, channels_last, at a storage offset, expanded)", visibility="hidden",
       judges=of_both("strided"))  # fmt: skip
def test_strided_inputs_accepted(grading: GradingContext) -> None:
    sets = [(suite.gqa_strided, False), (suite.diff_strided, False)]
    success = "Transposed, head-permuted, sliced, fused-projection and channels_last views, tensors at a storage offset, in one storage, stacked in one buffer and at one address of one storage, and tensors expanded over the batch were accepted by both functions."
    grading.conclude(_judge(grading, sets, _shape_and_dtype, success))


@check("T1", 3, "Inputs are never modified, forward or backward (values, version counters, place in memory, requires_grad, .grad)",
       judges=of_both("mutation"), replay=Recipe("unchanged", ((suite.gqa_causal, False), (suite.diff_causal, False), *GRADIENT_CALLS)))  # fmt: skip
def test_inputs_not_modified(grading: GradingContext) -> None:
    sets = [(suite.gqa_causal, False), (suite.diff_causal, False), (suite.diff_strided, False),
            (suite.gqa_gradients, True), (suite.diff_gradients, True)]  # fmt: skip
    findings = []
    for case, outcome, what in _calls(grading, sets):
        _, problem = suite.result_of(outcome)
        if problem is not None:
            findings.append(finding(what, f"could not be checked: {problem}"))
        elif outcome.changed_inputs:
            findings.append(finding(what, modified_inputs([case.names[n] for n in outcome.changed_inputs if n < len(case.names)])))
    count = sum(len(case_set(grading.seed)) for case_set, _ in sets)
    grading.conclude(summarise(findings, f"{count} calls, forward and backward, left every input unchanged."))


@check("T1", 3, "Outputs are attached to the autograd graph when inputs require grad",
       judges=of_both("graph"), replay=Recipe("graph", GRADIENT_CALLS))  # fmt: skip
def test_graph_attached(grading: GradingContext) -> None:
    sets = [(suite.gqa_gradients, True), (suite.diff_gradients, True)]
    grading.conclude(_judge(grading, sets, _graph, "Outputs of inputs that require grad are attached to the autograd graph."))


@check("T1", 2, "Every argument binds by position and by name, as the contract's signatures order and name them",
       judges=of_both("values", also=("binding",)), replay=Recipe("values", ((suite.gqa_bindings, False), (suite.diff_bindings, False))))  # fmt: skip
def test_arguments_bind(grading: GradingContext) -> None:
    verdict = combine(suite.value_verdicts(grading, suite.gqa_bindings) + suite.value_verdicts(grading, suite.diff_bindings))
    notes = [suite.RUNNER.order_problem(grading, name) for name in suite.FUNCTIONS]
    grading.conclude(explained(verdict, notes))
