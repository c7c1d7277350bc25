"""A gradient check's call whose output was right and whose gradient was not places the fault in the backward pass.

Unit tests of :func:`grader.toolkit.backward_calls.finding` on judged calls
made up here, then three blind files whose backward pass goes wrong only at the
checks' own inputs (past 512 tokens, a future key far above the visible ones,
gates below 1e-6): the gradient probe's small inputs never show them, the
checks' calls do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import first_root_cause

from grader.core.invoke import Outcome, Returned
from grader.exercises.diffv2.cases import DIFF_V2, GQA
from grader.toolkit import backward_calls
from grader.toolkit.backward_calls import GradientCall
from grader.toolkit.tolerance import Truth

CUSTOM = "class F(torch.autograd.Function):\n    @staticmethod\n    def backward(ctx, g):\n        return g\n"
LONG, SHORT = {"the number of tokens": "more than 512"}, {"the number of tokens": "2 to 512"}


def _call(attributes: dict[str, str], right: bool, wrong: tuple[str, ...] = (), *, missing: tuple[str, ...] = (), not_finite: tuple[str, ...] = (),
          coarse: tuple[str, ...] = (), public: bool = True) -> GradientCall:  # fmt: skip
    return GradientCall(attributes, right, wrong, missing, not_finite, coarse, public)


class TestFinding:
    """What the judged calls of one function say."""

    def test_nothing_when_no_right_output_has_a_wrong_gradient(self) -> None:
        """Wrong gradients of wrong outputs are the forward's consequence: no finding."""
        calls = [_call(LONG, False, ("q",)), _call(SHORT, True)]
        assert backward_calls.finding(GQA, calls, CUSTOM) is None

    def test_a_hand_written_backward_wrong_past_512_tokens(self) -> None:
        """Two long calls with right outputs and wrong gradients: the backward, placed by the length, the inputs listed."""
        calls = [_call(LONG, True, ("q", "k")), _call(LONG, True, ("v",)), _call(SHORT, True), _call(SHORT, True), _call(SHORT, False, ("q",))]
        found = backward_calls.finding(GQA, calls, CUSTOM)
        assert found is not None
        assert (found.function, found.component, found.stage, found.inputs) == (GQA, "backward", "gradients", ("q", "k", "v"))
        assert found.title == "The backward pass is wrong for q, k and v"
        assert found.evidence == ("In 2 of the gradient checks' calls, every one made when the number of tokens is more than 512, your output "
                                  "matched the expected one, yet the gradient for q, k and v did not match the VJP; the other 2 calls whose "
                                  "output was right had right gradients.")  # fmt: skip

    def test_without_a_hand_written_backward_a_piece_is_hidden_from_autograd(self) -> None:
        """No backward method or hook in the source: autograd differentiated a forward with a piece cut out, ``graph``."""
        found = backward_calls.finding(DIFF_V2, [_call(SHORT, True, ("lambda_logits",)), _call(SHORT, True)], "def f(x):\n    return x\n")
        assert found is not None and (found.component, found.inputs) == ("graph", ("lambda_logits",))
        assert "graph" in found.explains and "no hand-written backward" in found.evidence

    def test_saved_tensor_hooks_are_a_hand_written_part_of_the_backward(self) -> None:
        """Tensors saved through pack and unpack hooks of one's own (compressed to bfloat16): ``backward``, not ``graph``."""
        source = "def f(x):\n    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):\n        return x.exp()\n"
        found = backward_calls.finding(GQA, [_call(LONG, True, ("q",)), _call(SHORT, True)], source)
        assert found is not None and found.component == "backward"

    def test_non_finite_gradients_of_right_outputs_are_stability(self) -> None:
        """NaN in every wrong gradient of a right output, even under a hand-written backward: ``stability``."""
        found = backward_calls.finding(GQA, [_call(SHORT, True, ("q", "k"), not_finite=("q", "k")), _call(SHORT, True)], CUSTOM)
        assert found is not None and found.component == "stability"
        assert found.title == "The gradient for q and k is not finite where the output is right" and "held NaN or infinity" in found.evidence

    def test_float64_gradients_off_by_float32_rounding_are_dtype(self) -> None:
        """Every wrong gradient of a right output off by float32's rounding in a float64 call: ``dtype``, even when other float64
        calls were right (a float32 accumulator of the later key blocks); another input wrong beyond that makes it the backward."""
        coarse = _call(LONG, True, ("v",), coarse=("v",))
        found = backward_calls.finding(GQA, [coarse, coarse, _call(SHORT, True)], CUSTOM)
        assert found is not None and found.component == "dtype" and "right only to float32's accuracy in float64" in found.evidence
        mixed = backward_calls.finding(GQA, [_call(SHORT, True, ("q", "v"), coarse=("v",))], CUSTOM)
        assert mixed is not None and mixed.component == "backward"

    def test_a_gradient_wrong_for_an_input_a_part_handles_alone_is_that_parts(self) -> None:
        """Only the gate logits' gradient wrong (a floored slope in a hand-written backward): the gate, not the whole backward."""
        calls = [_call(SHORT, True, ("lambda_logits",)), _call(LONG, True, ("lambda_logits",)), _call(SHORT, True)]
        found = backward_calls.finding(DIFF_V2, calls, CUSTOM, {"lambda_logits": "gate"})
        assert found is not None and (found.component, found.title) == ("gate", "The gradient for lambda_logits is wrong")
        both = backward_calls.finding(DIFF_V2, [_call(SHORT, True, ("q", "lambda_logits")), _call(SHORT, True)], CUSTOM, {"lambda_logits": "gate"})
        assert both is not None and both.component == "backward"

    def test_missing_gradients_of_right_outputs_are_the_graph(self) -> None:
        """No gradient at all for the coefficient from a hand-written backward: ``graph``, "No gradient reaches"; without one,
        the coefficient's own path (made a Python number)."""
        calls = [_call(SHORT, True, ("coefficient",), missing=("coefficient",)), _call(SHORT, True)]
        found = backward_calls.finding(GQA, calls, CUSTOM, {"coefficient": "coefficient"})
        assert found is not None and (found.component, found.title) == ("graph", "No gradient reaches coefficient")
        number = backward_calls.finding(GQA, calls, "def f(c):\n    return c.item()\n", {"coefficient": "coefficient"})
        assert number is not None and number.component == "coefficient"

    def test_one_call_is_not_placed_by_its_attributes(self) -> None:
        """A single call parts itself from the others by some attribute by chance: no "made when" is said."""
        found = backward_calls.finding(GQA, [_call(LONG, True, ("q",)), _call(SHORT, True)], CUSTOM)
        assert found is not None and "made when" not in found.evidence and found.evidence.startswith("In one of the gradient checks' calls,")

    def test_public_calls_alone_are_counted_when_one_shows_it(self) -> None:
        """A hidden check's calls are left out of a finding a public call shows, and make it private when they alone do."""
        hidden_call = _call(LONG, True, ("k",), public=False)
        mixed = backward_calls.finding(GQA, [_call(LONG, True, ("q",)), hidden_call, _call(SHORT, True)], CUSTOM)
        assert mixed is not None and mixed.public and mixed.inputs == ("q",)
        hidden = backward_calls.finding(GQA, [hidden_call, _call(SHORT, True)], CUSTOM)
        assert hidden is not None and not hidden.public


class TestJudged:
    """A check's outcome judged against the oracle."""

    @staticmethod
    def _outcome(out: np.ndarray, grad: np.ndarray, backward_error: str | None = None) -> Outcome:
        returned = Returned(type_name="Tensor", is_tensor=True, exact_tensor=True, shape=out.shape, device="cpu",
                            layout="torch.strided", value=out)  # fmt: skip
        return Outcome(functions=[GQA], results=[returned], grads={0: grad}, backward_error=backward_error)

    def test_a_right_output_with_a_nan_gradient(self) -> None:
        """The output within its allowance, the gradient NaN where the VJP is finite: right output, wrong and not finite."""
        truth = Truth(np.ones(3), np.full(3, 1e-12))
        outcome = self._outcome(np.ones(3), np.array([1.0, np.nan, 1.0]))
        call = backward_calls.judged(outcome, 0, truth, {"q": truth}, {"q": 0}, "float64", SHORT, True)
        assert call == GradientCall(SHORT, True, ("q",), not_finite=("q",))

    def test_a_float64_gradient_off_by_float32_rounding(self) -> None:
        """Every element off by about 1e-7 of itself in a float64 call: marked; the same in a float32 call is not, nor in a float64
        call one element wholly wrong (a path cut out) among others off by a rounding's share."""
        truth = Truth(np.array([0.1, -2.3, 3.7]), np.full(3, 1e-12))
        rounded = truth.values.astype(np.float32).astype(np.float64)
        coarse = backward_calls.judged(self._outcome(truth.values, rounded), 0, truth, {"q": truth}, {"q": 0}, "float64", SHORT, True)
        assert coarse == GradientCall(SHORT, True, ("q",), float32_like=("q",))
        plain = backward_calls.judged(self._outcome(truth.values, rounded), 0, truth, {"q": truth}, {"q": 0}, "float32", SHORT, True)
        assert plain == GradientCall(SHORT, True, ("q",))
        cut = np.array([1.0, 0.0, 0.0])  # two small elements lost: within 1e-4 of the largest, yet wholly wrong where they are
        small = Truth(np.array([1.0, 1e-6, -1e-6]), np.full(3, 1e-12))
        lost = backward_calls.judged(self._outcome(small.values, cut), 0, small, {"q": small}, {"q": 0}, "float64", SHORT, True)
        assert lost == GradientCall(SHORT, True, ("q",))
        few = np.array([1.0, 1e-6, -1e-6 * (1 + 1e-3)])  # one element of three off, the rest exact: no rounding of every element
        once = backward_calls.judged(self._outcome(small.values, few), 0, small, {"q": small}, {"q": 0}, "float64", SHORT, True)
        assert once == GradientCall(SHORT, True, ("q",))

    def test_a_float64_gradient_past_float32s_range_overflowed(self) -> None:
        """Infinite exactly where the VJP is past float32's largest number, rounded to float32 elsewhere: kept in float32 too."""
        truth = Truth(np.array([1e300, -2.0, 3.0]), np.full(3, 1e-12))
        got = np.array([np.inf, *np.float32([-2.0, 3.0]).astype(np.float64) * (1 + 1e-8)])
        call = backward_calls.judged(self._outcome(np.ones(3), got), 0, Truth(np.ones(3), np.full(3, 1e-12)), {"q": truth}, {"q": 0}, "float64",
                                     SHORT, True)  # fmt: skip
        assert call == GradientCall(SHORT, True, ("q",), float32_like=("q",))

    def test_a_backward_pass_that_raised_is_noted_with_its_exception(self) -> None:
        """An exception in the backward pass is kept, with whether the output was right."""
        truth = Truth(np.ones(3), np.full(3, 1e-12))
        outcome = self._outcome(np.ones(3), np.ones(3), "RuntimeError: boom")
        call = backward_calls.judged(outcome, 0, truth, {"q": truth}, {"q": 0}, "float64", SHORT, True)
        assert call == GradientCall(SHORT, True, raised="RuntimeError: boom")


class TestRaised:
    """A backward pass that raised after a right output."""

    def test_a_hand_written_backward_that_raised_is_the_backward_and_comes_first(self) -> None:
        """With a hand-written backward the raise is that backward's, before any wrong gradient of other calls."""
        calls = [GradientCall(SHORT, True, raised="RuntimeError: unsupported operation: more than one element"),
                 _call(LONG, True, ("q",)), _call(SHORT, True)]  # fmt: skip
        found = backward_calls.finding(GQA, calls, CUSTOM)
        assert found is not None and (found.component, found.title) == ("backward", "The backward pass raises")
        assert "raised RuntimeError: unsupported operation: more than one element." in found.evidence
        assert "output.sum()" in found.advice

    def test_without_one_an_in_place_write_is_the_graph(self) -> None:
        """Without a hand-written backward, a raise torch's wording does not place is a saved tensor changed: ``graph``."""
        calls = [GradientCall(SHORT, True, raised="RuntimeError: something went wrong")]
        found = backward_calls.finding(GQA, calls, "def gqa_attention(q, k, v):\n    return q\n")
        assert found is not None and found.component == "graph" and "graph" in found.explains

    def test_a_raise_after_a_wrong_output_is_not_this_rules(self) -> None:
        """A call whose output was already wrong says nothing about the backward pass."""
        assert backward_calls.finding(GQA, [GradientCall(SHORT, False, raised="RuntimeError: boom")], CUSTOM) is None


@pytest.mark.parametrize(("name", "function", "component", "says"), [
    ("weights_saved_bfloat16_for_long_rows", GQA, "backward", "every one made when the number of tokens is more than 512"),
    ("exponentials_clamped_after_exp", GQA, "stability", "held NaN or infinity"),
    ("closed_gates_odd_stream_without_graph", DIFF_V2, "graph", "hidden from autograd"),
])  # fmt: skip
def test_faults_of_the_backward_pass_at_the_checks_inputs_are_placed(name: str, function: str, component: str, says: str,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    """Weights saved in bfloat16 past 512 tokens, exponentials clamped after exp, gates below 1e-6 leaving the odd heads
    without a graph: the gradient probe finds nothing, the checks' calls with right outputs and wrong gradients place it."""
    first = first_root_cause(f"v2_frost/wrong/{name}.py", tmp_path, "T3", "--exercise", "diff_v2")
    assert (first["function"], first["component"]) == (function, component)
    assert says in first["evidence"] or says in first["title"]


def test_a_backward_that_writes_into_its_incoming_gradient_fails_at_output_sum(tmp_path: Path) -> None:
    """A hand-written backward scaling its incoming gradient in place is right for a weighted sum of the output, and raises
    when the output is differentiated as output.sum() (the gradient arrives as one element expanded): the gradient sets'
    summed call meets it, and the root cause quotes the exception."""
    first = first_root_cause("diagnosis_dusk/wrong/att_fn_backward_scales_incoming_gradient_in_place.py", tmp_path, "T3")
    assert (first["function"], first["component"], first["title"]) == ("differential_attention", "backward", "The backward pass raises")
    assert "refers to a single memory location" in first["evidence"]
