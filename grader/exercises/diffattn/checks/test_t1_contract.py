"""T1, the contract: types, shapes, dtypes, strided inputs, no mutation, a graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from grader.core.invoke import Outcome, Returned
from grader.core.plugin import GradingContext, check
from grader.exercises.diffattn import suite
from grader.exercises.diffattn.cases import AttentionCase, LambdaCase
from grader.exercises.diffattn.signatures import signature_order_problem
from grader.exercises.diffattn.declared import GRADIENT_CALLS, LAMBDA_CALLS, LAMBDA_GRAD_CALLS, OUTPUT_CALLS, SUBSET_CALLS, attention, of_both, of_lambda
from grader.exercises.diffattn.suite import ATTENTION, LAMBDA
from grader.toolkit.casesets import CaseSet
from grader.toolkit.compare import Comparison, combine, explained
from grader.toolkit.handout import Recipe
from grader.toolkit.verdicts import (
    finding,
    graph_problem,
    modified_inputs,
    kind_problem,
    shape_dtype_problem,
    summarise,
    tensor_result,
)


@dataclass(frozen=True)
class Observed:
    """One call of a case set: its description, outcome, expected shape and dtype, input names."""

    what: str
    outcome: Outcome
    function: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the input tensors in the order the request sent them."""
        names = ("q1", "k1", "q2", "k2")
        return names + ("value", "coefficient") if self.function == ATTENTION else names

    def result(self) -> tuple[Returned | None, Comparison | None]:
        """The returned tensor, or a finding saying why there is none."""
        result, problem = tensor_result(self.outcome, 0)
        return result, finding(self.what, problem)


def _lambdas(grading: GradingContext, case_set: CaseSet[LambdaCase], grads: bool = False) -> list[Observed]:
    return [
        Observed(f"{LAMBDA}({case.label(grads)})", suite.lambda_outcome(grading, case_set, i, case, grads), LAMBDA, (), case.dtype)
        for i, case in enumerate(case_set(grading.seed))
    ]


def _attentions(grading: GradingContext, case_set: CaseSet[AttentionCase], grads: bool = False) -> list[Observed]:
    observed = []
    for i, case in enumerate(case_set(grading.seed)):
        b, h, t, d = case.q1.shape
        outcome = suite.attention_outcome(grading, case_set, i, case, grads)
        observed.append(Observed(f"{ATTENTION}({case.label(grads)})", outcome, ATTENTION, (b, h, t, 2 * d), case.dtype))
    return observed


def _judge(observed: list[Observed], problem_of: Callable[[Observed, Returned], str | None], success: str) -> Comparison:
    """One verdict: each call must return a plain tensor about which ``problem_of`` finds nothing."""
    findings = []
    for item in observed:
        result, problem = item.result()
        findings.append(problem if problem is not None or result is None else finding(item.what, problem_of(item, result)))
    return summarise(findings, success)


def _kind(item: Observed, result: Returned) -> str | None:
    """One dense floating tensor of the expected shape."""
    return kind_problem(result, item.shape, like="value")


def _shape_and_dtype(item: Observed, result: Returned) -> str | None:
    """The expected shape, the inputs' dtype, the CPU."""
    return shape_dtype_problem(result, item.shape, item.dtype)


@check("T1", 2, "differential_lambda returns a 0-dim floating torch.Tensor",
       judges=of_lambda("type"), replay=Recipe("kind", LAMBDA_CALLS))  # fmt: skip
def test_lambda_returns_0dim_tensor(grading: GradingContext) -> None:
    observed = _lambdas(grading, suite.lambda_values)
    grading.conclude(_judge(observed, _kind, f"{len(observed)} calls returned a 0-dim floating torch.Tensor."))


@check("T1", 2, "differential_lambda keeps the dtype and device of its inputs",
       judges=of_lambda("dtype"), replay=Recipe("dtype", LAMBDA_CALLS))  # fmt: skip
def test_lambda_keeps_dtype(grading: GradingContext) -> None:
    success = "float32 and float64 vectors gave lambda in their own dtype, on the CPU."
    grading.conclude(_judge(_lambdas(grading, suite.lambda_values), _shape_and_dtype, success))


@check("T1", 2, "differential_attention returns one tensor of shape [B, H, T, 2D]",
       judges=attention("type"), replay=Recipe("kind", OUTPUT_CALLS))  # fmt: skip
def test_attention_returns_one_tensor(grading: GradingContext) -> None:
    observed = _attentions(grading, suite.attention_causal) + _attentions(grading, suite.attention_noncausal)
    grading.conclude(_judge(observed, _kind, f"{len(observed)} calls returned one dense torch.Tensor shaped like value."))


@check("T1", 2, "differential_attention keeps the dtype and device of its inputs",
       judges=attention("dtype"), replay=Recipe("dtype", OUTPUT_CALLS))  # fmt: skip
def test_attention_keeps_dtype(grading: GradingContext) -> None:
    observed = _attentions(grading, suite.attention_causal) + _attentions(grading, suite.attention_noncausal)
    grading.conclude(_judge(observed, _shape_and_dtype, "float32 and float64 inputs gave outputs in their own dtype, on the CPU."))


@check("T1", 2, "Both functions accept non-contiguous (strided) inputs, inputs at a storage offset and inputs expanded over the batch", visibility="hidden",
       judges=of_both("strided"))  # fmt: skip
def test_strided_inputs_accepted(grading: GradingContext) -> None:
    observed = _attentions(grading, suite.attention_strided) + _lambdas(grading, suite.lambda_strided)
    grading.conclude(_judge(observed, _shape_and_dtype, "Transposed, head-permuted, sliced, fused-projection and channels_last views, tensors at a storage offset, in one storage, stacked in one buffer and at one address of one storage, and tensors expanded over the batch were accepted by both functions."))


@check("T1", 2, "differential_attention accepts a Python float or a 0-dim tensor coefficient",
       judges=attention("coefficient"), replay=Recipe("dtype", ((suite.attention_coefficients, False), *GRADIENT_CALLS)))  # fmt: skip
def test_coefficient_kinds_accepted(grading: GradingContext) -> None:
    observed = _attentions(grading, suite.attention_coefficients) + _attentions(grading, suite.attention_gradients, grads=True)
    success = "Python-float and 0-dim tensor coefficients, with and without requires_grad, were accepted."
    grading.conclude(_judge(observed, _shape_and_dtype, success))


@check("T1", 3, "Inputs are never modified (values, version counters, place in memory, requires_grad, .grad)",
       judges=of_both("mutation"),
       replay=Recipe("unchanged", ((suite.attention_coefficients, False), *GRADIENT_CALLS, *LAMBDA_CALLS, *LAMBDA_GRAD_CALLS, *SUBSET_CALLS)))  # fmt: skip
def test_inputs_not_modified(grading: GradingContext) -> None:
    observed = (
        _attentions(grading, suite.attention_coefficients)
        + _attentions(grading, suite.attention_strided)
        + _attentions(grading, suite.attention_gradients, grads=True)
        + _attentions(grading, suite.frozen_subsets, grads=True)
        + _lambdas(grading, suite.lambda_values)
        + _lambdas(grading, suite.lambda_values, grads=True)
        + _lambdas(grading, suite.lambda_frozen_subsets, grads=True)
    )
    findings = []
    for item in observed:
        result, problem = item.result()
        if problem is not None:
            problem = finding(item.what, f"could not be checked: {problem.message}")
        elif item.outcome.changed_inputs:
            changed = [item.input_names[i] for i in item.outcome.changed_inputs]
            problem = finding(item.what, modified_inputs(changed))
        findings.append(problem)
    grading.conclude(summarise(findings, f"{len(observed)} calls, forward and backward, left every input unchanged."))


@check("T1", 2, "Outputs carry an autograd graph when inputs require grad",
       judges=of_both("graph"), replay=Recipe("graph", (*GRADIENT_CALLS, *LAMBDA_GRAD_CALLS, *SUBSET_CALLS)))  # fmt: skip
def test_graph_attached(grading: GradingContext) -> None:
    observed = _attentions(grading, suite.attention_gradients, grads=True) + _lambdas(grading, suite.lambda_values, grads=True)
    observed += _attentions(grading, suite.frozen_subsets, grads=True) + _lambdas(grading, suite.lambda_frozen_subsets, grads=True)
    grading.conclude(_judge(observed, _graph_problem, "Outputs of inputs that require grad are attached to the autograd graph."))


def _graph_problem(item: Observed, result: Returned) -> str | None:
    """An output detached from autograd."""
    return graph_problem(result.requires_grad, result.has_grad_fn)


@check("T1", 3, "Every argument binds by position and by name, as the contract's signatures order and name them",
       judges=of_both("values", also=("binding",)), replay=Recipe("values", ((suite.lambda_bindings, False), (suite.attention_bindings, False))))  # fmt: skip
def test_arguments_bind(grading: GradingContext) -> None:
    verdict = combine(suite.value_verdicts(grading, suite.lambda_bindings) + suite.value_verdicts(grading, suite.attention_bindings))
    notes = [signature_order_problem(name, grading.functions.get(name, {}).get("parameters")) for name in (LAMBDA, ATTENTION)]
    grading.conclude(explained(verdict, notes))
