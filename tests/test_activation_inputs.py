"""Inputs as a model gives them: activations that are not leaves, leaves that already hold a .grad (gradient accumulation),
leaves that are torch.nn.Parameter (a model's weights), and a DIFF V2 gate shut or open everywhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import grade

from grader.core.invoke import HELD_GRAD, Call, Outcome, Request, TensorInput, invoke
from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import cases as v2_cases
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain
from grader.toolkit.tolerance import Truth
from grader.toolkit.verdicts import grads_verdict
from grader.worker.client import ForkServer, Worker, WorkerLimits

ROOT = Path(__file__).resolve().parents[1]
COLD = ROOT / "tests" / "corpus" / "v2_cold" / "wrong"
# Differentiable only for inputs that are not leaves: a layer that keeps a graph for activations alone.
LEAF_AWARE = """
import torch


def doubled(x):
    return x * 2 if not x.is_leaf else (x * 2).detach()


def tripled(x):
    return x * 3


def fresh_start(x):
    x.grad = None  # "no stale gradients": erases what the caller accumulated
    return x * 3


def zeroed_first(x):
    if x.grad is not None:
        x.grad.zero_()
    return x * 3


def kind(x):
    return torch.tensor(float(type(x) is torch.nn.Parameter), dtype=x.dtype) + x.sum() * 0


# x * 3 whose backward adds its gradient into an existing x.grad (accumulation fusion), then returns it or not.
class _Fused(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, returned):
        ctx.x, ctx.returned = x, returned
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        mine = grad * 3
        if ctx.x.grad is None:
            return mine, None
        ctx.x.grad.add_(mine)
        return (mine if ctx.returned else None), None


def fused_and_returned(x):
    return _Fused.apply(x, True)


def fused_only(x):
    return _Fused.apply(x, False)


# x * 3 whose backward views its incoming gradient as flat, as if it were laid out like the output.
class _Flat(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad.view(-1).view(grad.shape) * 3


def flat_backward(x):
    return _Flat.apply(x)
"""


@pytest.fixture(scope="module")
def worker() -> Worker:
    """A worker on LEAF_AWARE."""
    with ForkServer() as forks:
        functions = ["doubled", "tripled", "fresh_start", "zeroed_first", "kind", "fused_and_returned", "fused_only", "flat_backward"]
        running = Worker(LEAF_AWARE, "leaf_aware.py", functions, WorkerLimits(call_timeout_s=10), forks)
        yield running
        running.close()


@pytest.mark.parametrize("activation", [True, False])
def test_an_activation_is_a_non_leaf_whose_gradient_is_read_from_its_leaf(worker: Worker, activation: bool) -> None:
    """Given as an activation, the input is no leaf and its gradient (2 everywhere) comes back; as a leaf, the output has no graph."""
    values = TensorInput(np.arange(6.0).reshape(2, 3), "float64", requires_grad=True, activation=activation)
    outcome = invoke(worker, Request((Call("doubled", (values,)),), backward_from=0, cotangent=np.ones((2, 3)), inputs=(values,)))
    if activation:
        assert outcome.backward_error is None and np.array_equal(outcome.grads[0], np.full((2, 3), 2.0))
    else:
        assert outcome.backward_error is not None and "does not require grad" in outcome.backward_error
    assert outcome.changed_inputs == []


def _held_outcome(function: str, worker: Worker) -> Outcome:
    """``function`` called on a float64 leaf that holds a .grad, differentiated with a cotangent of 2 everywhere."""
    values = TensorInput(np.arange(6.0).reshape(2, 3), "float64", requires_grad=True, held_grad=True)
    outcome = invoke(worker, Request((Call(function, (values,)),), backward_from=0, cotangent=np.full((2, 3), 2.0), inputs=(values,)))
    assert outcome.failure is None and outcome.backward_error is None
    return outcome


def _held(function: str, worker: Worker) -> tuple[bool, np.ndarray]:
    """Whether ``function`` changed a leaf that held a .grad, and the gradient torch.autograd.grad returned (cotangent 2)."""
    outcome = _held_outcome(function, worker)
    grad = outcome.grads[0]
    assert grad is not None
    return outcome.changed_inputs == [0], grad


def test_a_held_grad_left_alone_is_no_change_and_the_gradient_read_is_the_calls_own(worker: Worker) -> None:
    """A leaf holding a .grad before the call: a function that leaves it alone changes nothing, the gradient returned is this
    call's (6 everywhere), and .backward() added exactly that to what the leaf held."""
    outcome = _held_outcome("tripled", worker)
    assert outcome.changed_inputs == [] and np.array_equal(outcome.grads[0], np.full((2, 3), 6.0))
    assert np.array_equal(outcome.accumulated[0], np.full((2, 3), HELD_GRAD + 6.0))
    truth = {"x": Truth(np.full((2, 3), 6.0), np.full((2, 3), 1e-12))}
    assert grads_verdict(outcome, 0, "tripled", truth, {"x": 0}).ok


def test_a_backward_that_adds_into_the_held_grad_and_returns_it_counts_twice(worker: Worker) -> None:
    """Accumulation fusion done halfway: torch.autograd.grad modifies the held .grad (a changed input), and .backward() adds
    the gradient twice, which the verdict reports as what .backward() added."""
    outcome = _held_outcome("fused_and_returned", worker)
    assert outcome.changed_inputs == [0] and np.array_equal(outcome.grads[0], np.full((2, 3), 6.0))
    assert np.array_equal(outcome.accumulated[0], np.full((2, 3), HELD_GRAD + 12.0))
    verdict = grads_verdict(outcome, 0, "fused_and_returned", {"x": Truth(np.full((2, 3), 6.0), np.full((2, 3), 1e-12))}, {"x": 0})
    assert not verdict.ok and "what .backward() added to the .grad x already held" in verdict.message


def test_a_backward_that_only_adds_into_the_held_grad_gives_torch_autograd_grad_nothing(worker: Worker) -> None:
    """A backward that writes into x.grad and returns None: torch.autograd.grad gets no gradient and the held .grad changes."""
    outcome = _held_outcome("fused_only", worker)
    assert outcome.grads[0] is None and outcome.changed_inputs == [0]
    verdict = grads_verdict(outcome, 0, "fused_only", {"x": Truth(np.full((2, 3), 6.0), np.full((2, 3), 1e-12))}, {"x": 0})
    assert not verdict.ok and "no gradient reached x" in verdict.message


def test_leaves_without_a_held_grad_are_differentiated_by_backward_alone(worker: Worker) -> None:
    """Without a held .grad the gradients come from .backward() (reentrant checkpointing's only way) and nothing is accumulated."""
    values = TensorInput(np.arange(6.0).reshape(2, 3), "float64", requires_grad=True)
    outcome = invoke(worker, Request((Call("fused_only", (values,)),), backward_from=0, cotangent=np.ones((2, 3)), inputs=(values,)))
    assert np.array_equal(outcome.grads[0], np.full((2, 3), 3.0)) and outcome.accumulated == {}


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_the_cotangent_arrives_in_the_layout_the_request_names(worker: Worker, layout: str) -> None:
    """A backward pass that views its incoming gradient as flat works with a contiguous cotangent and raises with a transposed one."""
    values = TensorInput(np.arange(6.0).reshape(2, 3), "float64", requires_grad=True)
    request = Request((Call("flat_backward", (values,)),), backward_from=0, cotangent=np.full((2, 3), 2.0), inputs=(values,), cotangent_layout=layout)
    outcome = invoke(worker, request)
    if layout == "contiguous":
        assert outcome.backward_error is None and np.array_equal(outcome.grads[0], np.full((2, 3), 6.0))
    else:
        assert outcome.backward_error is not None and "view size is not compatible" in outcome.backward_error


@pytest.mark.parametrize("function", ["fresh_start", "zeroed_first"])
def test_resetting_or_zeroing_a_held_grad_is_a_change(worker: Worker, function: str) -> None:
    """`x.grad = None` and `x.grad.zero_()` on an input's held .grad both modify the caller's tensor."""
    changed, grad = _held(function, worker)
    assert changed and np.array_equal(grad, np.full((2, 3), 6.0))


def test_without_a_held_grad_resetting_one_changes_nothing(worker: Worker) -> None:
    """An input that held no .grad is left as it came by `x.grad = None`: only a grad the caller had can be lost."""
    values = TensorInput(np.arange(6.0).reshape(2, 3), "float64", requires_grad=True)
    outcome = invoke(worker, Request((Call("fresh_start", (values,)),), backward_from=0, cotangent=np.ones((2, 3)), inputs=(values,)))
    assert outcome.changed_inputs == []


@pytest.mark.parametrize("parameter", [True, False])
def test_a_parameter_input_is_an_nn_parameter_leaf_whose_gradient_is_read(worker: Worker, parameter: bool) -> None:
    """Given as a parameter, an input that requires grad arrives as a torch.nn.Parameter, and its gradient comes back; as a plain
    leaf, as a torch.Tensor."""
    values = TensorInput(np.arange(6.0).reshape(2, 3), "float64", requires_grad=True, parameter=parameter)
    outcome = invoke(worker, Request((Call("kind", (values,)),), backward_from=0, cotangent=np.ones(()), inputs=(values,)))
    assert float(outcome.results[0].value) == float(parameter) and np.array_equal(outcome.grads[0], np.zeros((2, 3)))
    assert outcome.changed_inputs == []


@pytest.mark.parametrize("seed", [1, 2])
def test_gradient_cases_alternate_activations_and_leaves_with_and_without_a_held_grad(seed: int) -> None:
    """Both exercises' gradient and frozen-subset sets alternate leaves and activations, every other leaf case holding a
    .grad and every other of the rest given as torch.nn.Parameter, and the label says which."""
    for found in (attention_suite.attention_gradients(seed), attention_suite.frozen_subsets(seed), attention_suite.lambda_frozen_subsets(seed),
                  v2_suite.gqa_gradients(seed), v2_suite.diff_gradients(seed)):  # fmt: skip
        assert [c.activations for c in found] == [i % 2 == 1 for i in range(len(found))]
        assert [c.held_grads for c in found] == [i % 4 == 2 for i in range(len(found))]
        assert [c.parameters for c in found] == [i % 8 == 4 for i in range(len(found))] and any(c.parameters for c in found)
        assert all(("non-leaf" in c.label()) == c.activations and ("holding a .grad" in c.label()) == c.held_grads
                   and ("nn.Parameter" in c.label()) == c.parameters for c in found)  # fmt: skip
        if hasattr(found[0], "cotangent_layout"):  # outputs of several axes: every third case's gradient arrives in another layout
            for i, case in enumerate(found):
                swapped = [axes for layout, axes in domain.SWAPPED_AXES.items() if layout == case.cotangent_layout]
                assert (i % 3 == 1) == bool(swapped) or (i % 3 == 1 and min(case.cotangent.shape[1:]) == 1)
                assert all(case.cotangent.shape[axis] > 1 for axes in swapped for axis in axes)  # a layout that moves memory
                assert ("swapped in memory" in case.label(grads=True)) == bool(swapped)
            assert any(c.cotangent_layout != "contiguous" for c in found)


def test_a_parameter_read_through_data_loses_points_and_is_named_with_that_attribute(tmp_path: Path) -> None:
    """A blind corpus's λ that reads nn.Parameter vectors through .data (a detached output for a model's weights): the graph
    check fails and the first root cause is λ's cut graph, when the inputs are leaves given as torch.nn.Parameter."""
    run = grade(ROOT / "tests/corpus/diagnosis_tide/wrong/lam_parameter_vectors_read_as_values.py", tmp_path, 2, "--no-preview")
    assert run.report["score"] < 100.0
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("differential_lambda", "graph")
    assert "leaves given as torch.nn.Parameter" in first["title"]


def test_a_layer_that_keeps_a_graph_for_leaves_only_loses_points(tmp_path: Path) -> None:
    """DIFF V2 with grad mode decided by which inputs are leaves: its output is detached for activations."""
    run = grade(COLD / "graph_needed_only_for_leaf_inputs.py", tmp_path, 1, "--exercise", "diff_v2")
    assert run.check("graph_attached")["status"] == "failed" and run.report["score"] < 100.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_saturated_set_shuts_and_opens_the_gate_everywhere_without_autograd(seed: int) -> None:
    """Two float64 cases, every logit at −[22, 28] under no_grad and at +[22, 28] under inference_mode."""
    shut, opened = v2_suite.diff_saturated(seed)[-2:]
    assert shut.lambda_logits is not None and opened.lambda_logits is not None
    low, high = v2_cases.RESOLVED_BY_FLOAT64_ONLY
    assert (shut.dtype, shut.grad_mode, opened.dtype, opened.grad_mode) == ("float64", "no_grad", "float64", "inference_mode")
    assert np.all((-high <= shut.lambda_logits) & (shut.lambda_logits <= -low))
    assert np.all((low <= opened.lambda_logits) & (opened.lambda_logits <= high))


def test_a_shortcut_for_a_shut_gate_loses_points(tmp_path: Path) -> None:
    """Dropping the odd maps when every gate logit is below −20 is wrong in float64 there."""
    run = grade(COLD / "inference_skips_odd_heads_below_logit_minus_20.py", tmp_path, 1, "--exercise", "diff_v2")
    assert run.check("saturated_gate_values")["status"] == "failed" and run.report["score"] < 100.0


def test_an_output_cut_only_for_activations_is_named_with_that_attribute(tmp_path: Path) -> None:
    """The leaf-only graph file's first root cause is the graph, cut when the inputs that require grad are activations."""
    run = grade(COLD / "graph_needed_only_for_leaf_inputs.py", tmp_path, 20261201, "--exercise", "diff_v2")
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("diff_v2_attention", "graph")
    assert "activations (non-leaf views)" in first["title"]
