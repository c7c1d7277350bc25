"""Root causes: their order and the checks they explain, contract slips, what students see, and every output leading with them."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
import re
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, first_root_cause, grade, run_cli, run_warm
from test_ci_outputs import sample_report

from grader.core import diagnosis, registry
from grader.core.invoke import Outcome, Returned
from grader.core.plugin import GradingContext
from grader.exercises.diffattn.diagnosis import DECLARATIONS
from grader.reports import audience, gradescope, junit, markdown, report
from grader.reports.schema import validate
from grader.toolkit import rootcause, slips
from grader.toolkit.rootcause import Finding, Role
from grader.toolkit.slips import Observed

A, L = "differential_attention", "differential_lambda"
VALUES = frozenset({"values", "gradients"})


def _record(check_id: str, status: str = "failed", message: str = "failed", visibility: str = "public") -> dict[str, Any]:
    return {"id": check_id, "status": status, "message": message, "visibility": visibility, "hint": None}


ROLES = {
    "returns_tensor": Role((A,), "type"),
    "keeps_dtype": Role((A,), "dtype"),
    "not_modified": Role((A, L), "mutation"),
    "values": Role((A,), "values"),
    "value_gradient": Role((A,), "gradients", {A: ("value",)}),
    "branch_gradients": Role((A,), "gradients", {A: ("q1", "k1")}),
    "lambda_values": Role((L,), "values"),
}
MASK = Finding(A, "mask", "forward", "Queries see future keys", "The map has no mask.", "mask the future", aspect="values",
               explains=VALUES, note="the forward is already wrong")  # fmt: skip
SHAPE = Finding(A, "shape", "contract", "Wrong shape", "It returned [2].", "return [4]", aspect="type", blocks=True, note="wrong shape")
DETACHED = Finding(A, "graph", "gradients", "No gradient reaches value", "…", "keep the graph", aspect="gradients",
                   explains=frozenset({"gradients"}), inputs=("value",))  # fmt: skip


def test_causes_are_ordered_load_contract_forward_gradients() -> None:
    """Whatever order they were found in, the file's failure comes first, then the contract, the forward, the gradients."""
    load = Finding(None, "load", "load", "The file does not load", "SyntaxError", "fix it")
    found = rootcause.assemble([_record(i) for i in ROLES], ROLES, [DETACHED, MASK, SHAPE, load])
    assert [c.stage for c in found.causes] == ["load"]  # the file's failure explains every check: the others explain nothing
    found = rootcause.assemble([_record(i) for i in ROLES], ROLES, [DETACHED, MASK, SHAPE])
    assert [c.component for c in found.causes] == ["shape"]
    found = rootcause.assemble([_record(i) for i in ("values", "value_gradient", "branch_gradients")], ROLES, [DETACHED, MASK])
    assert [c.component for c in found.causes] == ["mask", "graph"]


def test_within_a_stage_a_function_the_other_calls_comes_first() -> None:
    """Of two functions wrong at one stage, the one the other calls (through a helper too) leads; unrelated ones, or one that
    only names the other in a docstring, keep their order."""
    records = [_record("values"), _record("lambda_values")]
    wrong_lambda = Finding(L, "lambda", "forward", "λ is wrong", "…", "…", aspect="values", explains=VALUES)
    source = "def _coefficient(q):\n    return differential_lambda(q, q, q, q)\n\ndef differential_attention(q):\n    return _coefficient(q)\n\n" \
             "def differential_lambda(q1, k1, q2, k2):\n    return 0\n"  # fmt: skip
    callers = diagnosis.callers(source, (L, A))
    assert callers == {L: 1, A: 0}
    found = rootcause.assemble(records, ROLES, [MASK, wrong_lambda], callers)
    assert [c.function for c in found.causes] == [L, A]
    unrelated = rootcause.assemble(records, ROLES, [MASK, wrong_lambda], diagnosis.callers(source.replace("differential_lambda(q, q", "abs(q"), (L, A)))
    assert [c.function for c in unrelated.causes] == [A, L]
    mentioned = source.replace("return differential_lambda(q, q, q, q)", '"""Unlike differential_lambda(q1, k1, q2, k2)."""\n    return q  # not differential_lambda')
    assert diagnosis.callers(mentioned, (L, A)) == {L: 0, A: 0}  # a docstring or comment that names a function is no call


def test_a_check_goes_to_the_cause_of_its_own_property_and_consequences_say_so() -> None:
    """A gradient check with a named detached input goes to that cause; the others follow the wrong forward, with a note."""
    records = [_record("values", message="Mismatched"), _record("value_gradient"), _record("branch_gradients", message="numbers")]
    found = rootcause.assemble(records, ROLES, [MASK, DETACHED])
    assert dict(zip([c.component for c in found.causes], found.checks)) == {"mask": ("values", "branch_gradients"), "graph": ("value_gradient",)}
    assert set(found.notes) == {"branch_gradients"}
    assert found.notes["branch_gradients"].startswith("Not judged: the forward is already wrong") and "“Queries see future keys”" in found.notes["branch_gradients"]


def test_a_blocking_contract_cause_explains_every_check_of_its_function() -> None:
    """A wrong shape explains the function's checks of every kind; the one that tests the shape keeps its message."""
    records = [_record(i) for i in ("returns_tensor", "keeps_dtype", "not_modified", "values", "lambda_values")]
    found = rootcause.assemble(records, ROLES, [SHAPE])
    assert found.checks == (("returns_tensor", "keeps_dtype", "not_modified", "values"),)
    assert found.unexplained == ("lambda_values",) and set(found.notes) == {"keeps_dtype", "not_modified", "values"}


def test_an_exception_explains_the_checks_whose_messages_carry_it() -> None:
    """A signature found in a failed check's message (in any case) explains it whatever the check judges."""
    raised = Finding(A, "strided", "contract", "view on strided inputs", "…", "reshape", aspect="strided", signature="view size is not compatible")
    records = [_record("not_modified", message="could not be checked: RuntimeError: View size is not compatible with ..."), _record("values")]
    found = rootcause.assemble(records, ROLES, [raised])
    assert found.checks == (("not_modified",),) and found.unexplained == ("values",) and not found.notes


def test_an_exception_a_probe_reproduced_is_the_probes_cause_and_its_messages_stand() -> None:
    """A contract slip whose exception a later-stage finding reproduced (sizes that clash in non-contiguous memory only) gives
    way to that finding, which explains every check showing the exception without replacing its message."""
    sizes = "Expected size for first two dimensions"
    slip = Finding(A, "shape", "contract", "raises: sizes do not fit", "…", "check the shapes", aspect="type", signature=sizes)
    layout = Finding(A, "strided", "forward", "Non-contiguous inputs give other results", "…", "…", aspect="values", explains=VALUES | {"strided"},
                     note="the forward is already wrong", signature=sizes)  # fmt: skip
    message = f"differential_attention raised RuntimeError: {sizes} of batch2 tensor to be: [6, 3] but got: [6, 4]"
    records = [_record("not_modified", message=f"could not be checked: {message}"), _record("values", message=message)]
    found = rootcause.assemble(records, ROLES, [slip, layout])
    assert [c.component for c in found.causes] == ["strided"] and found.checks == (("not_modified", "values"),) and not found.notes
    alone = rootcause.assemble(records, ROLES, [slip])
    assert [c.component for c in alone.causes] == ["shape"]


def test_a_fault_seen_only_through_another_functions_result_is_that_functions_when_it_has_one() -> None:
    """An exception only when the coefficient is λ's result is no cause of its own once λ has a fault: λ's cause explains it."""
    roles = {**ROLES, "end_to_end": Role((L, A), "gradients")}
    through = Finding(A, "coefficient", "contract", "raises only with λ's coefficient", "…", "…", aspect="type", explains=frozenset({"type"}),
                      signature="must be finite", via=L)  # fmt: skip
    wrong_lambda = Finding(L, "lambda", "forward", "λ is wrong", "…", "…", aspect="values", explains=VALUES)
    records = [_record("lambda_values"), _record("end_to_end", message="ValueError: 'coefficient' must be finite (got nan)")]
    found = rootcause.assemble(records, roles, [through, wrong_lambda])
    assert [c.title for c in found.causes] == ["λ is wrong"] and found.checks == (("lambda_values", "end_to_end"),)
    alone = rootcause.assemble(records[1:], roles, [through])  # λ with no fault of its own: the exception stays a cause
    assert [c.title for c in alone.causes] == ["raises only with λ's coefficient"]


def test_hidden_causes_put_no_note_on_checks_and_unexplaining_causes_are_dropped() -> None:
    """A cause students may not see names no check in its place; a cause that explains no failed check is no root cause."""
    hidden = Finding(A, "stability", "forward", "Overflow", "…", "…", aspect="values", explains=VALUES, note="wrong", public=False)
    found = rootcause.assemble([_record("values"), _record("branch_gradients")], ROLES, [hidden, DETACHED])
    assert [c.title for c in found.causes] == ["Overflow"] and not found.notes


def test_named_misconceptions_are_kept_only_where_the_probes_agree() -> None:
    """Same function and component: merged; another component at the same stage: dropped; nothing found there: kept."""
    agreeing = Finding(A, "mask", "forward", "no mask", "It matches a known mistake: no mask.", "…")
    contradicting = Finding(A, "scale", "forward", "1/D", "It matches a known mistake: 1/D.", "…")
    elsewhere = Finding(L, "lambda", "forward", "no exp", "It matches a known mistake: no exp.", "…")
    found = rootcause.with_hints([MASK], [agreeing, contradicting, elsewhere])
    assert [f.title for f in found] == ["Queries see future keys", "no exp"]
    assert found[0].evidence == "The map has no mask. It matches a known mistake: no mask."


def test_a_misconception_of_the_values_places_a_shape_fault_nothing_placed() -> None:
    """Sizes that clash in some calls, and a known mistake in the values of the others: one cause, of the mistake's part."""
    clash = Finding(A, rootcause.UNPLACED, "contract", "raises RuntimeError", "It raised RuntimeError at line 9.", "check the shapes",
                    aspect="type", blocks=True)  # fmt: skip
    gate = Finding(A, "gate", "forward", "The gate is applied along the wrong axis", "It matches a known mistake: …", "…")
    backward = Finding(A, "backward", "gradients", "no exp in the backward", "It matches a known mistake: …", "…")
    found = rootcause.with_hints([clash], [backward, gate])
    assert [(f.component, f.stage, f.title) for f in found] == [("gate", "contract", "raises RuntimeError"),
                                                                  ("backward", "gradients", "no exp in the backward")]
    assert found[0].advice == "check the shapes; …" and found[0].evidence == ("It raised RuntimeError at line 9. The calls that ran match a known mistake: "
                                 "The gate is applied along the wrong axis")
    placed = replace(clash, component="heads")  # a probe placed it already: the mistake of another part stays apart
    assert [f.component for f in rootcause.with_hints([placed], [gate])] == ["heads", "gate"]


def test_root_causes_json_validates() -> None:
    """The report's diagnosis section: every key, a component of the vocabulary, a visibility."""
    found = rootcause.assemble([_record("values")], ROLES, [MASK])
    document = sample_report()
    document["diagnosis"] = {**diagnosis.empty(), "root_causes": rootcause.to_json(found)}
    assert validate(document) == []
    document["diagnosis"]["root_causes"][0]["component"] = "weather"
    assert validate(document) and pytest.raises(ValueError, Finding, A, "weather", "forward", "t", "e", "a")


# ---- contract slips -----------------------------------------------------------------------------

SOURCE = '''def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    x = torch.exp(torch.dot(q1, k1)).item()
    return x


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    q1 /= 2  # halves the queries
    return value
'''


def _call(result: Returned, function: str = A, changed: tuple[int, ...] = (), **attributes: str) -> Observed:
    shape, names = ((1, 1, 2, 4), ("q1", "k1", "q2", "k2", "value")) if function == A else ((), ("q1", "k1", "q2", "k2"))
    outcome = Outcome(functions=[function], results=[result], changed_inputs=list(changed))
    return Observed(function, outcome, 0, shape, "float32", {"the memory layout": "contiguous", **attributes}, names, False)


def _tensor(shape: tuple[int, ...] = (1, 1, 2, 4), dtype: str = "float32") -> Returned:
    return Returned(type_name="torch.Tensor", is_tensor=True, exact_tensor=True, shape=shape, dtype=dtype, requires_grad=True, has_grad_fn=True)


def _raised(message: str, kind: str = "RuntimeError", line: int = 7) -> Returned:
    trace = f'  File "sub.py", line {line}, in differential_attention\n    flat = q1.view(-1)\n'
    return Returned(raised={"type": kind, "message": message, "traceback": trace})


def test_a_python_number_is_named_with_the_line_that_makes_it() -> None:
    """.item(), float() and math.exp on the way give a number: a blocking type slip quoting the student's line."""
    (found,) = slips.findings([_call(Returned(type_name="builtins.float", repr="0.53"), L)], SOURCE, DECLARATIONS)
    assert (found.function, found.component, found.blocks) == (L, "type", True)
    assert "(line 2: `x = torch.exp(torch.dot(q1, k1)).item()`)" in found.evidence


def test_a_wrong_shape_is_named_by_the_exercise() -> None:
    """Half of value's width: the exercise names the component (value); a λ of the vectors' shape is element by element; an
    output short of tokens is the value's assembly."""
    (half,) = slips.findings([_call(_tensor((1, 1, 2, 2)))], None, DECLARATIONS)
    assert (half.component, half.blocks) == ("value", True)
    (elementwise,) = slips.findings([_call(_tensor((3,)), L)], None, DECLARATIONS)
    assert elementwise.component == "lambda"
    (short,) = slips.findings([_call(_tensor((1, 1, 1, 4)))], None, DECLARATIONS)  # tokens lost putting chunks together
    assert (short.component, short.title) == ("value", f"{A} returns 1 tokens instead of 2")


def test_an_exception_is_classified_by_torchs_wording_or_by_the_calls_it_alone_hits() -> None:
    """`.view` on a strided input (with the student's line), an error only for one kind of coefficient, a NameError
    everywhere, a tensor kept from a call under inference mode, a computed tensor's requires_grad switched off."""
    view = "view size is not compatible with input tensor's size and stride"
    calls = [_call(_raised(view), **{"the memory layout": "non-contiguous"}), _call(_tensor())]
    (found,) = slips.findings(calls, SOURCE, DECLARATIONS)
    assert (found.component, found.blocks, found.signature) == ("strided", False, "view size is not compatible")
    assert "at line 7 (in differential_attention): `flat = q1.view(-1)`" in found.evidence
    calls = [_call(_raised("'float' object has no attribute 'item'", "AttributeError"), **{"the coefficient": "Python float"}),
             _call(_tensor(), **{"the coefficient": "0-dim tensor"})]  # fmt: skip
    assert [f.component for f in slips.findings(calls, None, DECLARATIONS)] == ["coefficient"]
    (typo,) = slips.findings([_call(_raised("name '_mapp' is not defined", "NameError"))], None, DECLARATIONS)
    assert (typo.component, typo.blocks) == ("load", True)
    kept = "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode"
    (cached,) = slips.findings([_call(_raised(kept)), _call(_tensor())], None, DECLARATIONS)
    assert cached.component == "graph" and "torch.inference_mode()" in cached.title
    flagged = "you can only change requires_grad flags of leaf variables."
    (unflagged,) = slips.findings([_call(_raised(flagged)), _call(_tensor())], None, DECLARATIONS)
    assert unflagged.component == "graph" and "requires_grad_(False)" in unflagged.title


def test_a_result_a_later_call_overwrites_is_a_buffer_of_the_functions_answer() -> None:
    """A returned tensor that a later call wrote into: one cause, under the component of the function's answer, matched to
    the checks by the words of their message; results left alone give none."""
    tensor = _tensor()
    (found,) = slips.findings([_call(replace(tensor, overwritten=True)), _call(tensor)], None, DECLARATIONS)
    assert (found.function, found.component, found.signature) == (A, "value", "overwritten by a later call")
    assert found.signature in "the returned tensor was overwritten by a later call (is it a buffer shared between calls?)"
    assert slips.findings([_call(tensor), _call(tensor)], None, DECLARATIONS) == []


def test_a_coefficient_left_out_is_named_by_the_offset_that_vanishes(tmp_path: Any) -> None:
    """The coefficient left out of the difference (as when a softmax cancels it): the signed map's rows sum to 0, so the cause
    is the coefficient, the second map weighted 1."""
    source = (ROOT / "tests" / "corpus" / "correct" / "einsum.py").read_text()
    path = tmp_path / "unweighted.py"
    path.write_text(source.replace("coefficient * s2.softmax(-1)", "s2.softmax(-1)"))
    run = run_warm([str(path), "--seed", "3", "--no-preview", "--tiers", "T2"], tmp_path)
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("differential_attention", "coefficient"), first


def test_a_fault_of_tensor_coefficients_only_is_probed_with_tensor_coefficients(tmp_path: Any) -> None:
    """The second map added when the coefficient is a tensor (torch.addcmul's default sign), right for Python numbers: the
    probes pass tensor coefficients, so the cause is the sign, not "only the causal path is wrong"."""
    source = (ROOT / "tests" / "corpus" / "correct" / "einsum.py").read_text()
    path = tmp_path / "added_for_tensors.py"
    path.write_text(source.replace("coefficient * s2.softmax(-1)",
                                   "(-coefficient if isinstance(coefficient, torch.Tensor) else coefficient) * s2.softmax(-1)"))
    run = run_warm([str(path), "--seed", "3", "--no-preview", "--tiers", "T2"], tmp_path)
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("differential_attention", "sign"), first


def test_a_call_that_returns_with_grad_mode_switched_is_a_graph_cause_quoting_the_switch() -> None:
    """`torch.set_grad_enabled(flag)` as a statement leaves the caller's mode switched: a graph cause with the line, once per
    function; calls that return in the mode they were called in give none."""
    source = "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n    torch.set_grad_enabled(q1.requires_grad)\n"
    tensor = _tensor()
    (found,) = slips.findings([_call(replace(tensor, grad_mode_left=False)), _call(tensor)], source, DECLARATIONS)
    assert (found.function, found.component, found.title) == (A, "graph", f"{A} leaves autograd switched off for its caller")
    assert found.evidence.startswith("1 of 2 calls returned with grad mode off") and "(line 2: `torch.set_grad_enabled(q1.requires_grad)`)" in found.evidence
    assert slips.findings([_call(tensor)], source, DECLARATIONS) == []


def test_the_worker_reports_a_call_that_leaves_grad_mode_switched() -> None:
    """A function that switches grad mode off as a statement returns with `grad_mode_left` False; one using a block, none."""
    from grader.core.invoke import Call, Request, TensorInput, invoke
    from grader.worker.client import ForkServer, Worker, WorkerLimits

    source = ("import torch\n\ndef leaky(x):\n    torch.set_grad_enabled(False)\n    return x * 2\n\n"
              "def tidy(x):\n    with torch.no_grad():\n        return x * 2\n")  # fmt: skip
    values = TensorInput(np.ones(3), "float64")
    with ForkServer() as forks:
        worker = Worker(source, "modes.py", ["leaky", "tidy"], WorkerLimits(call_timeout_s=10), forks)
        try:
            leaky, tidy = invoke(worker, Request((Call("leaky", (values,)), Call("tidy", (values,))), inputs=(values,))).results
        finally:
            worker.close()
    assert (leaky.grad_mode_left, tidy.grad_mode_left) == (False, None)


def test_a_write_into_shared_memory_is_a_mutation_unless_the_buffer_was_made_with_chosen_strides() -> None:
    """torch refusing a write whose elements share memory: into an input or an alias of it (`.to` of the same dtype), a
    mutation; into a buffer the function made with empty_strided or as_strided, the strided layout."""
    message = ("unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
               "Please clone() the tensor before performing the operation.")  # fmt: skip

    def written(lines: list[str]) -> list[str]:
        source = "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n" + "".join(f"    {line}\n" for line in lines)
        trace = f'  File "sub.py", line {len(lines) + 1}, in differential_attention\n    {lines[-1]}\n'
        raised = Returned(raised={"type": "RuntimeError", "message": message, "traceback": trace})
        return [f.component for f in slips.findings([_call(raised)], source, DECLARATIONS)]

    assert written(["q1 = q1.mul_(0.5)"]) == ["mutation"]
    assert written(["q = q1.to(torch.float64)", "q /= 2.0"]) == ["mutation"]
    assert written(["out = torch.empty_strided(value.size(), value.stride())", "out[..., 0] = 1.0"]) == ["strided"]


def test_sizes_that_do_not_fit_on_a_mask_line_are_the_masks_fault() -> None:
    """A size mismatch where the mask is applied (a mask buffer of a fixed length), or on a line that reads a name the
    mask's operation assigned (itself or through a helper of the module), is a mask cause; a dtype mismatch on such a line, or a size mismatch elsewhere, keeps the
    exception's own component."""
    def at(code: str, message: str) -> list[str]:
        trace = f'  File "sub.py", line 9, in differential_attention\n    {code}\n'
        raised = Returned(raised={"type": "RuntimeError", "message": message, "traceback": trace})
        return [f.component for f in slips.findings([_call(raised)], None, DECLARATIONS)]

    sizes = "The size of tensor a (64) must match the size of tensor b (83) at non-singleton dimension 3"
    assert at('s = s.masked_fill(~visible[:t, :t], float("-inf"))', sizes) == ["mask"]
    assert at("s = q @ k.transpose(-2, -1)", sizes) == ["shape"]
    assert at("s = s + mask", "expected scalar type Double but found Float") == ["dtype"]
    assert at('s = s.masked_fill(hidden, torch.finfo(torch.float64).min)', "value cannot be converted to type float without overflow") == ["dtype"]
    source = ("def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n    s = q1 @ k1.transpose(-2, -1)\n"
              "    bias = torch.triu(torch.full((64, 64), float('-inf')), 1)\n    s = s + bias\n    w = s.softmax(-1)\n    return w @ value[..., :2]\n")  # fmt: skip

    def traced(line: int, code: str) -> list[str]:
        trace = f'  File "sub.py", line {line}, in differential_attention\n    {code}\n'
        return [f.component for f in slips.findings([_call(Returned(raised={"type": "RuntimeError", "message": sizes, "traceback": trace}))],
                                                    source, DECLARATIONS)]  # fmt: skip

    assert traced(4, "s = s + bias") == ["mask"]  # bias, one assignment back: the triu
    assert traced(6, "return w @ value[..., :2]") == ["shape"]  # w comes from a softmax: no further back than one assignment
    helper = ("def _bias(t):\n    return torch.triu(torch.full((64, 64), float('-inf')), 1)\n\n"
              "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n    s = q1 @ k1.transpose(-2, -1)\n"
              "    scale = 1 / math.sqrt(4)\n    bias = _bias(s.shape[-1])\n    return torch.baddbmm(bias, s, value, alpha=scale)\n")  # fmt: skip
    trace = '  File "sub.py", line 8, in differential_attention\n    return torch.baddbmm(bias, s, value, alpha=scale)\n'
    by_helper = slips.findings([_call(Returned(raised={"type": "RuntimeError", "message": sizes, "traceback": trace}))], helper, DECLARATIONS)
    assert [f.component for f in by_helper] == ["mask"]  # bias, made by a helper whose body builds the mask; a scale never clashes in size


def test_an_unworded_error_for_some_calls_is_traced_from_the_marked_operation_to_what_made_its_operands() -> None:
    """An IndexError only for one head width, where Python's markers underline a lookup in a table of square roots built at
    import, is the scale's; the same error under a marked operation whose operands nothing known made stays unplaced."""
    source = ("import math\n_INV = [1 / math.sqrt(d) for d in range(1, 64)]\n_ONES = list(range(64))\n\n"
              "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n"
              "    s = (q1 @ k1.transpose(-2, -1)) * _INV[q1.shape[-1] - 1] * _ONES[q1.shape[-1] - 1]\n    return s @ value\n")  # fmt: skip

    def raised(marked: str) -> list[Any]:
        code = "s = (q1 @ k1.transpose(-2, -1)) * _INV[q1.shape[-1] - 1] * _ONES[q1.shape[-1] - 1]"
        start = code.index(marked)
        trace = f'  File "sub.py", line 6, in differential_attention\n    {code}\n    {" " * start}{"^" * len(marked)}\n'
        failing = Returned(raised={"type": "IndexError", "message": "list index out of range", "traceback": trace})
        calls = [_call(failing, **{slips.HEAD_WIDTH: "64"}), _call(_tensor(), **{slips.HEAD_WIDTH: "8"})]
        return slips.findings(calls, source, DECLARATIONS)

    (scale,) = raised("_INV[q1.shape[-1] - 1]")
    assert scale.component == "scale" and "only when the head width D is 64" in scale.title
    assert raised("_ONES[q1.shape[-1] - 1]") == []  # a table of no known part: nothing to place it by
    assert slips.marked_operation('  File "f.py", line 2, in g\n    y = a + b[i]\n            ^^^^\n') == "b[i]"
    assert slips.marked_operation('  File "f.py", line 2, in g\n    y = a + b[i]\n') is None


def test_an_error_for_every_head_width_from_some_size_on_is_contrasted_by_that_bound() -> None:
    """A lookup in a table of square roots that raises at head widths 64 and 72 and works at 8 and 40 fails "only when the head
    width D is 64 or more" (and at 2 and 3 against 8 and 40, "3 or less"); widths that do not part say no bound."""
    source = ("import math\n_INV = [1 / math.sqrt(d) for d in range(1, 64)]\n\n"
              "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n"
              "    s = (q1 @ k1.transpose(-2, -1)) * _INV[q1.shape[-1] - 1]\n    return s @ value\n")  # fmt: skip
    code = "s = (q1 @ k1.transpose(-2, -1)) * _INV[q1.shape[-1] - 1]"
    trace = f'  File "sub.py", line 5, in differential_attention\n    {code}\n    {" " * code.index("_INV")}{"^" * 22}\n'
    failing = Returned(raised={"type": "IndexError", "message": "list index out of range", "traceback": trace})

    def contrast(failing_widths: tuple[str, ...], working_widths: tuple[str, ...]) -> list[str]:
        calls = [_call(failing, **{slips.HEAD_WIDTH: w}) for w in failing_widths] + [_call(_tensor(), **{slips.HEAD_WIDTH: w}) for w in working_widths]
        return [finding.title for finding in slips.findings(calls, source, DECLARATIONS)]

    assert contrast(("64", "72"), ("8", "40")) == [f"{A} raises IndexError: the call fails only when the head width D is 64 or more"]
    assert contrast(("2", "3"), ("8", "40")) == [f"{A} raises IndexError: the call fails only when the head width D is 3 or less"]
    assert contrast(("8", "72"), ("40", "64")) == []


def test_a_signature_out_of_the_contracts_order_is_a_contract_cause_naming_the_parameter() -> None:
    """A parameter renamed or moved is named with the component the exercise gives it; a right signature, or one that adds
    optional parameters after the contract's, is no cause."""
    from grader.exercises.diffattn.probes import PARAMETER_COMPONENTS
    from grader.exercises.diffattn.signatures import CONTRACT
    from grader.toolkit import signatures

    def described(*names: str, extra: str | None = None) -> dict[str, object]:
        found = [{"name": n, "kind": "POSITIONAL_OR_KEYWORD", "has_default": n == names[-1]} for n in names]
        return {"parameters": found + ([{"name": extra, "kind": "POSITIONAL_OR_KEYWORD", "has_default": True}] if extra else [])}

    renamed = {A: described("q1", "k1", "q2", "k2", "value", "coefficient", "is_causal"), L: described("q1", "k1", "q2", "k2", "lambda_init")}
    (found,) = signatures.findings(CONTRACT, renamed, PARAMETER_COMPONENTS)
    assert (found.function, found.component, found.stage, found.signature) == (A, "mask", "contract", "argument 'causal'")
    assert "'causal' is 'is_causal'" in found.title
    swapped = {L: described("q1", "q2", "k1", "k2", "lambda_init")}
    assert [(f.function, f.component) for f in signatures.findings(CONTRACT, swapped, PARAMETER_COMPONENTS)] == [(L, "lambda")]
    right = {A: described("q1", "k1", "q2", "k2", "value", "coefficient", "causal", extra="scale"), L: described("q1", "k1", "q2", "k2", "lambda_init")}
    assert signatures.findings(CONTRACT, right, PARAMETER_COMPONENTS) == []


def test_a_signature_cause_explains_value_checks_only_when_the_usually_bound_calls_are_right() -> None:
    """Wrong calls all bound otherwise and every usually bound (keyword) call right: the signature also explains value and
    gradient checks; a wrong keyword call, no keyword call, or no wrong call leaves it explaining the binding check alone."""
    from grader.exercises.diffattn.probes import PARAMETER_COMPONENTS
    from grader.exercises.diffattn.signatures import CONTRACT
    from grader.toolkit import signatures

    parameters = [{"name": n, "kind": "POSITIONAL_OR_KEYWORD", "has_default": False} for n in ("q1", "k1", "q2", "k2", "value", "coefficient")]
    parameters += [{"name": n, "kind": "POSITIONAL_OR_KEYWORD", "has_default": True} for n in ("scale", "causal")]
    (found,) = signatures.findings(CONTRACT, {A: {"parameters": parameters}}, PARAMETER_COMPONENTS)
    assert found.explains == {"binding"}
    widened = signatures.confirmed(found, [("keyword", True), ("positional", False), ("positional", True), ("names", True)])
    assert widened.explains == {"binding", "values", "gradients"} and widened.title == found.title
    for calls in ([("keyword", False), ("positional", False)], [("positional", False), ("names", False)], [("keyword", True), ("positional", True)]):
        assert signatures.confirmed(found, calls) is found


def test_a_parameter_taken_by_varargs_is_a_cause_only_when_the_calls_bound_by_position_are_wrong() -> None:
    """`*args` where the contract has causal: named with the mask's component when every keyword-bound call is right and
    some bound by position are wrong; a `*args` the function reads causal back from (every call right), or a wrapper's
    `*args, **kwargs` whose calls go wrong only by name, is no cause."""
    from grader.exercises.diffattn.probes import PARAMETER_COMPONENTS
    from grader.exercises.diffattn.signatures import CONTRACT
    from grader.toolkit import signatures

    parameters = [{"name": n, "kind": "POSITIONAL_OR_KEYWORD", "has_default": False} for n in ("q1", "k1", "q2", "k2", "value", "coefficient")]
    parameters += [{"name": "args", "kind": "VAR_POSITIONAL", "has_default": False}, {"name": "causal", "kind": "KEYWORD_ONLY", "has_default": True}]
    functions = {A: {"parameters": parameters}}
    lost = [("keyword", True), ("positional", False), ("names", True)]
    (found,) = signatures.evidenced(CONTRACT, functions, PARAMETER_COMPONENTS, lambda function: lost if function == A else [])
    assert (found.function, found.component, found.title) == (A, "mask", f"{A} loses 'causal' when it is passed by position")
    assert {"values", "gradients"} <= found.explains
    read_back = [("keyword", True), ("positional", True), ("names", True)]
    assert signatures.evidenced(CONTRACT, functions, PARAMETER_COMPONENTS, lambda function: read_back) == []
    wrapper = {A: {"parameters": [{"name": "args", "kind": "VAR_POSITIONAL", "has_default": False},
                                  {"name": "kwargs", "kind": "VAR_KEYWORD", "has_default": False}]}}  # fmt: skip
    by_name_fails = [("keyword", True), ("positional", True), ("names", False)]  # q1 by position is fine: not lost there
    assert signatures.evidenced(CONTRACT, wrapper, PARAMETER_COMPONENTS, lambda function: by_name_fails) == []


def test_parameters_made_positional_only_are_a_contract_cause_naming_them() -> None:
    """A `/` after the contract's vectors: a cause of λ's component naming them, which the TypeError's wording matches."""
    from grader.exercises.diffattn.probes import PARAMETER_COMPONENTS
    from grader.exercises.diffattn.signatures import CONTRACT
    from grader.toolkit import signatures

    parameters = [{"name": n, "kind": "POSITIONAL_ONLY", "has_default": False} for n in ("q1", "k1", "q2", "k2")]
    parameters.append({"name": "lambda_init", "kind": "POSITIONAL_OR_KEYWORD", "has_default": True})
    (found,) = signatures.findings(CONTRACT, {L: {"parameters": parameters}}, PARAMETER_COMPONENTS)
    assert (found.function, found.component, found.aspect) == (L, "lambda", "binding")
    assert found.title == "differential_lambda cannot take 'q1', 'k1', 'q2', 'k2' by name"
    message = "TypeError: differential_lambda() got some positional-only arguments passed as keyword arguments: 'q1, k1, q2, k2'"
    assert found.signature is not None and found.signature in message
    every = [{**p, "kind": "POSITIONAL_ONLY"} for p in parameters]  # causal too: the parameter callers pass by name most
    attention = [{"name": n, "kind": "POSITIONAL_ONLY", "has_default": n == "causal"} for n in CONTRACT[A].parameters]
    assert [f.component for f in signatures.findings(CONTRACT, {L: {"parameters": every}, A: {"parameters": attention}},
                                                     PARAMETER_COMPONENTS)] == ["lambda", "mask"]  # fmt: skip


def test_a_dtype_clash_only_for_one_kind_of_coefficient_is_the_coefficients() -> None:
    """Dtypes that clash only when the coefficient is a float64 tensor: the coefficient is not cast (its component, not dtype);
    the same clash only for float32 inputs stays a dtype cause."""
    clash = _raised("expected scalar type Float but found Double")
    calls = [_call(clash, **{"the coefficient": "0-dim float64 tensor", "the inputs' dtype": "float32"}),
             _call(_tensor(), **{"the coefficient": "Python float", "the inputs' dtype": "float32"}),
             _call(_tensor(), **{"the coefficient": "0-dim tensor", "the inputs' dtype": "float64"})]
    assert [f.component for f in slips.findings(calls, SOURCE, DECLARATIONS)] == ["coefficient"]
    calls = [_call(clash, **{"the coefficient": "Python float", "the inputs' dtype": "float32"}),
             _call(_tensor(), **{"the coefficient": "Python float", "the inputs' dtype": "float64"})]
    assert [f.component for f in slips.findings(calls, SOURCE, DECLARATIONS)] == ["dtype"]


def test_a_python_number_used_as_a_tensor_is_the_component_of_the_input_that_may_be_one() -> None:
    """`coefficient.to(...)` on a Python float, raised only for calls by name: the coefficient's fault, not the binding's."""
    failing = _call(_raised("'float' object has no attribute 'to'", "AttributeError"), **{"the argument binding": "names"})
    (found,) = slips.findings([failing, _call(_tensor(), **{"the argument binding": "positions"})], SOURCE, DECLARATIONS)
    assert (found.component, found.blocks) == ("coefficient", False)
    assert "only when the argument binding is names" in found.evidence


def test_a_tuple_used_as_a_tensor_is_a_type_cause() -> None:
    """`out.transpose(...)` on a tuple a helper returned, raised only without gradients: a type cause quoting the line."""
    failing = _call(_raised("'tuple' object has no attribute 'transpose'", "AttributeError"), **{"the autograd mode": "no_grad"})
    (found,) = slips.findings([failing, _call(_tensor(), **{"the autograd mode": "enabled"})], SOURCE, DECLARATIONS)
    assert (found.component, found.aspect) == ("type", "type") and "a tuple" in found.title and "line 7" in found.evidence


def test_a_wrong_shape_takes_the_component_of_the_line_that_refuses_sizes_in_other_calls() -> None:
    """Some calls return too many rows, others raise on the mask's line: one fault, the mask's; without that line, a shape cause."""
    trace = '  File "sub.py", line 4, in differential_attention\n    s = s.masked_fill(cols > rows, float("-inf"))\n'
    sizes = Returned(raised={"type": "RuntimeError", "message": "The size of tensor a (128) must match the size of tensor b (85)", "traceback": trace})
    long = _call(_tensor((1, 1, 384, 4)))
    found = slips.findings([long, _call(sizes, causal="True")], SOURCE, DECLARATIONS)
    assert [(f.component, f.blocks) for f in found] == [("mask", True), ("mask", False)] and "line 4" in found[0].evidence
    assert [f.component for f in slips.findings([long, _call(_tensor())], SOURCE, DECLARATIONS)] == ["shape"]
    source = "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n    bias = torch.triu(ones, 1)\n    s = s + bias\n"
    traced = Returned(raised={**(sizes.raised or {}), "traceback": '  File "sub.py", line 3, in differential_attention\n    s = s + bias\n'})
    found = slips.findings([long, _call(traced, causal="True")], source, DECLARATIONS)
    assert [f.component for f in found] == ["shape", "mask"]  # a line that only reads the mask places no wrong shape


def test_a_reduction_over_an_empty_block_of_keys_is_the_softmaxs() -> None:
    """amax over zero keys (a key block past the last one) raises on the line of the running maximum: a softmax cause."""
    trace = '  File "sub.py", line 5, in _online\n    m_new = torch.maximum(m, s.amax(-1, keepdim=True))\n'
    empty = Returned(raised={"type": "IndexError", "message": "amax(): Expected reduction dim -1 to have non-zero size.", "traceback": trace})
    (found,) = slips.findings([_call(empty), _call(_tensor())], SOURCE, DECLARATIONS)
    assert (found.component, found.blocks) == ("softmax", False) and "line 5" in found.evidence


def test_a_modified_input_is_named_with_the_in_place_line() -> None:
    """An input whose values or version changed: the mutation slip names it and the line that writes into it."""
    (found,) = slips.findings([_call(_tensor(), changed=(0,)), _call(_tensor())], SOURCE, DECLARATIONS)
    assert found.component == "mutation" and "q1" in found.evidence and "(line 7: `q1 /= 2`)" in found.evidence


def test_an_in_place_write_into_a_leaf_the_function_made_is_the_graph_and_into_an_input_a_mutation() -> None:
    """torch's "leaf Variable that requires grad" error on a line writing into a buffer created with requires_grad is a graph
    cause; on a line writing into an input (or a name made without requires_grad) it stays a mutation."""
    source = (
        "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n"
        "    out = torch.zeros_like(value, requires_grad=value.requires_grad)\n"
        "    tmp = q1.reshape(-1)\n"
        "    out[:, 0] = value[:, 0]\n"
        "    tmp.mul_(2)\n"
    )  # fmt: skip
    leaf = "a view of a leaf Variable that requires grad is being used in an in-place operation."

    def at(line: int, code: str) -> list[str]:
        trace = f'  File "sub.py", line {line}, in differential_attention\n    {code}\n'
        raised = Returned(raised={"type": "RuntimeError", "message": leaf, "traceback": trace})
        return [f.component for f in slips.findings([_call(raised), _call(_tensor())], source, DECLARATIONS)]

    assert at(4, "out[:, 0] = value[:, 0]") == ["graph"]
    assert at(5, "tmp.mul_(2)") == ["mutation"]
    assert at(4, "q1[:, 0] = value[:, 0]") == ["mutation"]


def test_an_output_without_history_is_a_slip_when_every_graded_call_or_one_way_of_calling_has_none() -> None:
    """A wholly detached output is a contract slip; so is one detached only in the calls made one way (one token with value
    and the coefficient frozen, three attributes together); a path cut in calls that share no such way is left to the gradient probes."""
    detached = Returned(type_name="torch.Tensor", is_tensor=True, exact_tensor=True, shape=(1, 1, 2, 4), dtype="float32")

    def graded(result: Returned, **made: str) -> Observed:
        return Observed(A, Outcome(functions=[A], results=[result]), 0, (1, 1, 2, 4), "float32", made, ("q1",), True)

    assert [f.component for f in slips.findings([graded(detached), graded(detached)], None, DECLARATIONS)] == ["graph"]
    assert slips.findings([graded(detached), graded(_tensor())], None, DECLARATIONS) == []
    ways = [dict(zip(("tokens", "value", "coefficient"), w)) for w in
            (("1", "frozen", "frozen"), ("1", "trained", "frozen"), ("1", "frozen", "trained"), ("9", "frozen", "frozen"))]  # fmt: skip
    found = slips.findings([graded(detached, **ways[0])] + [graded(_tensor(), **w) for w in ways[1:]], None, DECLARATIONS)
    assert [f.title for f in found] == [f"{A}'s output is cut off from autograd, when tokens is 1, value is frozen and coefficient is frozen"]


def test_an_output_cut_only_when_one_undeclared_input_alone_requires_grad_waits_for_the_forward() -> None:
    """Cut only when k1 alone requires grad (k1 detached, or never read): a gradients finding, after the forward's faults."""
    detached = Returned(type_name="torch.Tensor", is_tensor=True, exact_tensor=True, shape=(1, 1, 2, 4), dtype="float32")
    attached = _tensor()

    def graded(result: Returned, names: str) -> Observed:
        return Observed(A, Outcome(functions=[A], results=[result]), 0, (1, 1, 2, 4), "float32", {slips.TRAINED: slips.trained([names])},
                        ("q1",), True)  # fmt: skip

    found = slips.findings([graded(detached, "k1"), graded(attached, "q1"), graded(attached, "value")], None, DECLARATIONS)
    assert [(f.component, f.stage) for f in found] == [("graph", "gradients")]
    found = slips.findings([graded(detached, "coefficient"), graded(attached, "q1"), graded(attached, "value")], None, DECLARATIONS)
    assert [(f.component, f.stage) for f in found] == [("coefficient", "contract")]


def test_the_sets_of_trained_inputs_whose_output_was_cut_are_replayed_by_the_gradient_probes(tmp_path: Any) -> None:
    """Each set of inputs requiring grad whose output came back without history, once each, in the call's input order; a
    branch detached unless its own query or the other branch's key requires grad is then named from k1 alone trained."""
    names = ("q1", "k1", "q2", "k2", "value")
    detached = Returned(type_name="torch.Tensor", is_tensor=True, exact_tensor=True, shape=(1, 1, 2, 4), dtype="float32")

    def graded(result: Returned, *trained: str) -> Observed:
        attributes = {n: "trained" if n in trained else "frozen" for n in names}
        return Observed(A, Outcome(functions=[A], results=[result]), 0, (1, 1, 2, 4), "float32", attributes, names, True)

    calls = [graded(detached, "k1"), graded(detached, "k2"), graded(detached, "k1"), graded(_tensor(), "q1", "k1")]
    assert slips.cut_subsets(calls, A) == (("k1",), ("k2",))
    assert slips.cut_subsets(calls, L) == ()
    source = (ROOT / "reference" / "diff_attention.py").read_text()
    path = tmp_path / "paired.py"
    path.write_text(source + PAIRED_DETACH)
    run = grade(path, tmp_path, 1, "--no-preview")
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == (A, "graph") and "q1, q2, k2, value, coefficient do not require grad" in first["title"]


PAIRED_DETACH = '''

_reference_attention = differential_attention


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    first, second = q1.requires_grad or k2.requires_grad, q2.requires_grad or k1.requires_grad
    if not first:
        q1, k1 = q1.detach(), k1.detach()
    if not second:
        q2, k2 = q2.detach(), k2.detach()
    return _reference_attention(q1, k1, q2, k2, value, coefficient, causal)
'''


def test_the_file_does_not_load_names_the_function_of_its_line() -> None:
    """A syntax error's line, the innermost required function of the traceback (a smoke test left at the top level),
    the function that uses a missing module, or the one that uses a module constant that fails, is where the load failure is."""
    context = GradingContext(1, None, {}, "SyntaxError at line 7, column 5: invalid syntax", source=SOURCE)
    (found,) = diagnosis.file_findings(context)
    assert (found.function, found.component, found.stage) == (A, "load", "load")
    context = GradingContext(1, None, {}, "importing the submission raised ModuleNotFoundError: No module named 'torch'", source=SOURCE)
    assert diagnosis.file_findings(context)[0].function == L
    constant = "import torch\n\nNEG = torch.finfo(torch.float32).minimum\n\n\ndef differential_lambda(q1, k1, q2, k2):\n    return q1\n\n\n" \
               "def differential_attention(q1, k1, q2, k2, value, coefficient):\n    return value + NEG\n"
    failure = 'File "submission.py", line 3, in <module>\nAttributeError: \'torch.finfo\' object has no attribute \'minimum\''
    assert diagnosis.file_findings(GradingContext(1, None, {}, failure, source=constant))[0].function == A
    smoke_test = 'raised ValueError: bad\n  File "s.py", line 9, in <module>\n  File "s.py", line 5, in differential_attention\n  File "s.py", line 2, in check_inputs'
    assert diagnosis.file_findings(GradingContext(1, None, {}, smoke_test, source=SOURCE), (L, A))[0].function == A
    scripted = "import torch\n\n\ndef differential_lambda(q1, k1, q2, k2):\n    return q1\n\n\n@torch.jit.script\ndef _mix(a, b):\n" \
               "    return a - b\n\n\ndef differential_attention(q1, k1, q2, k2, value, coefficient):\n    return _mix(q1, q2)\n"
    compiled = 'raised RuntimeError: cannot compile\n  File "submission.py", line 9, in <module>\n    @torch.jit.script'
    assert diagnosis.file_findings(GradingContext(1, None, {}, compiled, source=scripted), (L, A))[0].function == A  # a helper's caller
    imports = "import torch\nfrom torch.nn.functional import logsumexp, softmax\n\n\ndef differential_lambda(q1, k1, q2, k2):\n    return q1\n\n\n" \
              "def _map(s):\n    return softmax(s, -1)\n\n\ndef differential_attention(q1, k1, q2, k2, value, coefficient):\n    return _map(q1)\n"
    failed = "raised ImportError: cannot import name 'logsumexp'\n  File \"submission.py\", line 2, in <module>\n    from torch.nn.functional import logsumexp, softmax"
    assert diagnosis.file_findings(GradingContext(1, None, {}, failed, source=imports), (L, A))[0].function == A  # softmax, through _map
    derived = "import torch\n\nVERSION = tuple(int(p) for p in torch.__version__.split('.'))\nFAST = VERSION >= (2, 0)\n\n\n" \
              "def differential_lambda(q1, k1, q2, k2):\n    return q1\n\n\ndef differential_attention(q1, k1, q2, k2, value, coefficient):\n" \
              "    return value if FAST else q1\n"
    version = 'raised ValueError: invalid literal for int()\n  File "submission.py", line 3, in <module>\n    VERSION = tuple(int(p) for p in ...)'
    assert diagnosis.file_findings(GradingContext(1, None, {}, version, source=derived), (L, A))[0].function == A  # FAST comes from VERSION
    missing = GradingContext(1, None, {L: {"kind": "missing"}, A: {"kind": "callable"}})
    assert [(f.function, f.title) for f in diagnosis.file_findings(missing)] == [(L, f"{L} is not defined")]


def test_a_diagnosis_that_raises_says_so_and_keeps_the_files_causes() -> None:
    """An exception in the exercise's diagnosis is reported among the probes, not swallowed; the file's own causes stay."""

    def broken(context: GradingContext, records: list[dict[str, Any]]) -> Any:
        raise ZeroDivisionError("integer modulo by zero")

    exercise = replace(registry.named("diff_attention"), diagnose=broken)
    context = GradingContext(1, None, {L: {"kind": "missing"}, A: {"kind": "callable"}})
    section = diagnosis.diagnose(exercise, context, [_record("lambda_values")]).section
    assert section["probes"] == ["the exercise's diagnosis stopped (ZeroDivisionError: integer modulo by zero): only the file's causes are given"]
    assert [cause["title"] for cause in section["root_causes"]] == [f"{L} is not defined"]


# ---- what students see, and every output ------------------------------------------------------------

CAUSES = [
    {"function": A, "component": "mask", "title": "Queries see future keys: the causal mask is missing (both branches)",
     "evidence": "The map read out of your output (both branches) has no mask, so every query attends to the tokens after it as well.",
     "advice": "add −∞ to the logits where key j > query i, before the softmax", "checks": ["keeps_dtype", "row_sums"], "visibility": "public"},
    {"function": A, "component": "stability", "title": "Overflow", "evidence": "found on hidden inputs", "advice": "subtract the maximum",
     "checks": ["lambda_values"], "visibility": "hidden"},
]  # fmt: skip


@pytest.fixture
def diagnosed() -> dict[str, Any]:
    """A whole (instructor) report with two root causes, one of them found through a hidden check."""
    document = sample_report()
    document["audience"] = "instructor"
    document["diagnosis"] = {**diagnosis.empty(), "root_causes": copy.deepcopy(CAUSES), "unexplained": ["graph_attached"]}
    assert validate(document) == []
    return document


def test_students_see_every_cause_but_those_found_through_hidden_inputs(diagnosed: dict[str, Any]) -> None:
    """The hidden one is left out and its checks are listed as unexplained; the instructor sees both."""
    student = audience.for_audience(diagnosed, "student")["diagnosis"]
    assert [c["title"] for c in student["root_causes"]] == [CAUSES[0]["title"]]
    assert student["unexplained"] == ["graph_attached", "lambda_values"]
    assert len(audience.for_audience(diagnosed, "instructor")["diagnosis"]["root_causes"]) == 2


def test_the_terminal_opens_with_the_causes_wrapped_at_word_boundaries(diagnosed: dict[str, Any]) -> None:
    """The causes come before the first tier, every line fits 80 columns, and no word is cut."""
    text = report.render_text(diagnosed, [])
    assert text.index("ROOT CAUSES") < text.index("T1 Contract")
    assert all(len(line) <= 80 for line in text.splitlines())
    words = " ".join(line.strip() for line in text[text.index(" 1. ") : text.index("Fix:")].splitlines())
    assert CAUSES[0]["evidence"] in words and "keeps_dtype [root cause 1]" in text


def test_the_html_report_opens_with_the_causes_and_links_them_to_their_checks(diagnosed: dict[str, Any]) -> None:
    """The root-cause section precedes the summary; each check it explains points back at it."""
    page = report.render_html(diagnosed)
    assert page.index('id="causes-heading"') < page.index('id="summary-heading"')
    assert 'href="#cause-1"' in page and re.search(r'<a href="#check-1-2"><code>keeps_dtype</code></a>', page)


def test_the_ci_summaries_open_with_the_causes(diagnosed: dict[str, Any]) -> None:
    """Gradescope's text and each explained test, JUnit's first suite and failure text, the Markdown after its title."""
    results = gradescope.results(diagnosed)
    assert results["output"].splitlines()[2] == "Root causes, to fix in this order:"
    explained = next(t for t in results["tests"] if t["tags"][-1] == "keeps_dtype")
    assert explained["output"].startswith(f"Root cause 1: {CAUSES[0]['title']}")
    root = ET.fromstring(junit.to_xml(diagnosed).split("\n", 1)[1])
    assert root[0].get("name") == "Root causes" and root[0].find("system-out").text.startswith("1. Queries see future keys")
    assert root.get("tests") == str(sum(len(t["checks"]) for t in diagnosed["tiers"]))
    summary = markdown.summary(diagnosed)
    assert summary.index("### Root causes") < summary.index("| Tier |") and "1. **Queries see future keys" in summary


def test_without_causes_every_output_is_as_before() -> None:
    """A report whose diagnosis is empty gets no root-cause block anywhere."""
    document = sample_report()
    assert "ROOT CAUSES" not in report.render_text(document, []) and "causes-heading" not in report.render_html(document)
    assert "Root causes" not in gradescope.to_text(document) + junit.to_xml(document) + markdown.summary(document)


def test_a_graded_mutant_leads_every_output_with_its_root_cause(tmp_path: Any) -> None:
    """End to end, with student reports: a half-width output is one root cause (value) for every failed check."""
    source = (ROOT / "tests" / "corpus" / "correct" / "row_loop.py").read_text()
    path = tmp_path / "half.py"
    path.write_text(source.replace("* value[:, :, :visible]).sum(dim=2)", "* value[:, :, :visible, :width]).sum(dim=2)"))
    outputs = {name: tmp_path / name for name in ("results.json", "junit.xml", "summary.md")}
    run = run_cli([str(path), "--seed", "4", "--no-preview", "--tiers", "T1,T2", "--audience", "student", "--gradescope", str(outputs["results.json"]),
                   "--junit", str(outputs["junit.xml"]), "--markdown", str(outputs["summary.md"])], tmp_path)  # fmt: skip
    causes = run.report["diagnosis"]["root_causes"]
    failed = [c["id"] for t in run.report["tiers"] for c in t["checks"] if c["status"] == "failed"]
    assert [(c["function"], c["component"]) for c in causes] == [(A, "value")] and causes[0]["checks"] == failed
    assert run.stdout.index("ROOT CAUSES") < run.stdout.index("T1 Contract") and run.html.index("causes-heading") < run.html.index("summary-heading")
    assert "Root causes" in json.loads(outputs["results.json"].read_text())["output"]
    assert "Root causes" in outputs["junit.xml"].read_text() and "### Root causes" in outputs["summary.md"].read_text()
    assert run.check("inputs_not_modified")["message"].startswith("Not judged: differential_attention returned tensors of the wrong shape")


def test_gradients_that_vanish_only_at_a_tie_are_the_lambda_formulas(tmp_path: Any) -> None:
    """λ as sign(a − b)·exp(max(a, b))·(1 − exp(−|a − b|)): right values, zero gradients at a = b; the cause is λ's form."""
    first = first_root_cause("diagnosis_cold/wrong/lam_sign_factored_tie.py", tmp_path, "T3")
    assert (first["function"], first["component"]) == ("differential_lambda", "lambda")
    assert first["title"] == "λ's gradients are wrong where q1·k1 = q2·k2" and "sign(a − b)" in first["advice"]


def test_maps_that_are_a_softmax_of_the_right_maps_name_a_softmax_applied_twice(tmp_path: Any) -> None:
    """softmax(softmax(scores)): the readout is the softmax of the right maps over every key, so the cause is the softmax, not the mask."""
    first = first_root_cause("diagnosis_cold/wrong/att_softmax_applied_twice.py", tmp_path, "T2")
    assert (first["function"], first["component"], first["title"]) == ("differential_attention", "softmax", "The softmax is applied twice")


def test_a_mean_taken_out_of_value_and_put_back_is_named_by_the_shared_offset_it_leaves_unscaled(tmp_path: Any) -> None:
    """value centred over the tokens, the mean added back after the signed map: the offset readout names a factor 1, not 1 − λ."""
    source = (ROOT / "reference" / "diff_attention.py").read_text() + (
        "\n\n_attend = differential_attention\n\n\n"
        "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n"
        "    shift = value.mean(dim=2, keepdim=True)\n"
        "    return _attend(q1, k1, q2, k2, value - shift, coefficient, causal) + shift\n"
    )
    path = tmp_path / "centred.py"
    path.write_text(source)
    run = run_warm([str(path), "--seed", "3", "--no-preview", "--tiers", "T2"], tmp_path)
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("differential_attention", "value"), first
    assert first["title"] == "A value offset shared by every token comes out scaled by 1, not 1 − λ" and "must move by 1.5" in first["evidence"]


def test_logits_left_unscaled_without_the_mask_are_the_scale_with_causal_false(tmp_path: Any) -> None:
    """1/√D applied inside the causal branch only: the map read out with causal=False fits a scale of 1, said with the condition."""
    first = first_root_cause("diagnosis_solstice/wrong/att_scale_inside_causal_block.py", tmp_path, "T2")
    assert (first["function"], first["component"]) == (A, "scale")
    assert first["title"] == "The logits are scaled by 1 (no scaling) instead of 1/√D, with causal=False"


def test_one_heads_values_given_to_every_head_are_values_reaching_other_heads(tmp_path: Any) -> None:
    """value[:, :1] broadcast to every head: head 0's values move head 1's output and head 1's own move nothing."""
    first = first_root_cause("diagnosis_solstice/wrong/att_value_first_head_shared.py", tmp_path, "T2")
    assert (first["function"], first["component"], first["title"]) == (A, "value", "Values reach other batch elements or heads")
    assert "changing the value of head 1 in batch element 0 left its own output unchanged" in first["evidence"]


def test_inputs_transposed_as_if_tokens_came_before_heads_are_maps_that_mix_heads(tmp_path: Any) -> None:
    """[B, H, T, D] inputs transposed as if [B, T, H, D]: head 0's keys move head 1's output, so the maps run over the heads."""
    first = first_root_cause("diagnosis_holdout/wrong/att_layout_bthd_assumed.py", tmp_path, "T2")
    assert (first["function"], first["component"]) == (A, "softmax")
    assert first["title"] == "The maps mix heads: attention runs over another axis than the tokens"


def test_a_maximum_pass_that_skips_the_last_key_block_is_unstable_at_long_lengths(tmp_path: Any) -> None:
    """Row maxima taken over key blocks of 128 but the last, shorter one: float32 logits of hundreds overflow at 300 tokens
    (the stability probe's long calls), never at the probes' own length."""
    first = first_root_cause("diagnosis_summer/wrong/att_two_pass_max_range_drops_tail.py", tmp_path, "T2")
    assert (first["function"], first["component"], first["title"]) == (A, "stability", "The softmax is not numerically stable in float32")
    assert "(at 300 tokens)" in first["evidence"]


def test_a_fault_of_integer_coefficients_only_is_placed_by_the_calls_that_met_it(tmp_path: Any) -> None:
    """An integer tensor coefficient taken as a percentage: the probes' float coefficients see nothing, and their 0-dim
    coefficients of every dtype the contract allows are wrong for the integer ones alone, where Python floats are right."""
    source = (ROOT / "tests" / "corpus" / "correct" / "einsum.py").read_text()
    path = tmp_path / "integer_percent.py"
    path.write_text(source.replace("coefficient * s2.softmax(-1)",
                                   "(coefficient / 100 if isinstance(coefficient, torch.Tensor) and not coefficient.is_floating_point() "
                                   "else coefficient) * s2.softmax(-1)"))
    first = run_warm([str(path), "--seed", "3", "--no-preview", "--tiers", "T2"], tmp_path).report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == (A, "coefficient")
    assert first["title"] == "A coefficient of another dtype than the inputs' gives wrong values"
    assert "int8 -127, int8 127, int16 -32767" in first["evidence"] and "right for tensors of float16" in first["evidence"]


def test_one_map_shared_by_tied_branches_is_found_by_the_gradients_of_tied_inputs(tmp_path: Any) -> None:
    """q2 = q1 and k2 = k1 in value: a shortcut that reuses the first map gives q2 and k2 no gradient; the gradient probe's
    tied run names them."""
    first = first_root_cause("diagnosis_harvest/wrong/att_equal_branches_share_one_map.py", tmp_path, "T3")
    assert (first["function"], first["component"], first["title"]) == (A, "graph", "No gradient reaches q2, k2")
    assert "tied branches" in first["evidence"]


def test_a_backward_recomputed_over_key_prefixes_is_wrong_past_512_tokens_without_the_mask(tmp_path: Any) -> None:
    """A backward pass recomputing query chunks of 512 against the earlier keys only: the gradient probe's run at 513 tokens
    with causal=False finds it."""
    first = first_root_cause("diagnosis_harvest/wrong/att_backward_query_chunks_keys_prefix_unmasked.py", tmp_path, "T3")
    assert (first["function"], first["component"]) == (A, "backward")
    assert "at T = 513 with causal=False" in first["evidence"]


def test_a_forward_wrong_only_past_512_tokens_is_no_backward_fault(tmp_path: Any) -> None:
    """Long rows that keep only their top keys: the gradient probe's run at 513 tokens meets a wrong forward, so it blames
    no gradient (the value checks report the forward)."""
    run = run_warm([str(ROOT / "tests" / "corpus" / "diagnosis_harvest" / "wrong" / "att_long_rows_top_k_keys.py"), "--seed", "20261201",
                   "--no-preview", "--tiers", "T3"], tmp_path)
    assert run.report["score"] < 100.0
    assert not any("T = 513" in cause["evidence"] for cause in run.report["diagnosis"]["root_causes"])


@pytest.mark.parametrize(("path", "args", "function"), [
    ("diagnosis_cold/wrong/att_max_indices_as_shift.py", (), "differential_attention"),
    ("v2_solstice/wrong/row_shift_takes_max_indices.py", ("--exercise", "diff_v2"), "gqa_attention"),
])  # fmt: skip
def test_long_sequences_whose_outputs_turn_nan_are_a_stability_fault(path: str, args: tuple[str, ...], function: str, tmp_path: Any) -> None:
    """Rows shifted by the index of their largest logit, not its value: right up to 513 tokens in float64 and NaN past 1024,
    with and without the mask, which the length probe names as a stability fault, not a blocked computation."""
    first = first_root_cause(path, tmp_path, "T2", *args)
    assert (first["function"], first["component"], first["title"]) == (function, "stability", "Long sequences give NaN or infinite outputs")
    assert "wrong from T = 1025" in first["evidence"]


def test_a_dot_product_that_drops_a_tail_past_64_elements_is_named_by_the_lengths_it_fails(tmp_path: Any) -> None:
    """λ's dot products over blocks of 64 whose last, shorter block is dropped: wrong for lengths past 64 that are no multiple
    of it, again with new vectors of those lengths, so the cause is λ's, named by the lengths."""
    source = (ROOT / "tests" / "corpus" / "correct" / "einsum.py").read_text()
    path = tmp_path / "dropped_tail.py"
    path.write_text(source.replace('dots = torch.einsum("i,i->", q1, k1), torch.einsum("i,i->", q2, k2)',
                                   'cut = lambda v: v[: len(v) // 64 * 64] if len(v) > 64 else v\n'
                                   '    dots = torch.einsum("i,i->", cut(q1), cut(k1)), torch.einsum("i,i->", cut(q2), cut(k2))'))
    run = run_warm([str(path), "--seed", "3", "--no-preview", "--tiers", "T2"], tmp_path)
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == ("differential_lambda", "lambda", "λ is wrong for vectors of some lengths")
    assert "wrong (or fails) for 65, 127, 129, 257" in first["evidence"], first


@pytest.mark.parametrize(("name", "component", "title"), [
    ("att_additive_mask_minus_1e4", "mask", "Masked keys still get weight when the logits are large: the mask is a finite number"),
    ("att_output_clamped_to_half_range", "stability", "Outputs past float16's range are wrong"),
    ("att_value_per_head_amax_scaling", "value", "A head whose values are all zero gives a wrong output"),
])  # fmt: skip
def test_domain_edges_of_the_hidden_checks_are_named_by_probes_at_those_edges(name: str, component: str, title: str, tmp_path: Any) -> None:
    """A mask of −1e4, outputs clamped to float16's range and values scaled by their head's amax fail only hidden checks;
    the probes meet the same edges with their own inputs (shown to the student), so each gets its cause."""
    first = first_root_cause(f"diagnosis_ice/wrong/{name}.py", tmp_path)
    assert (first["function"], first["component"], first["title"]) == (A, component, title)


def test_masked_logits_written_as_a_finite_number_are_named_by_visible_logits_below_it(tmp_path: Any) -> None:
    """masked_fill with −1e4 is exact until every visible logit lies below −1e4: the stability probe's float64 call whose
    visible logits are about −5·10⁶ finds the future token's value in earlier outputs, so the mask is named."""
    source = (ROOT / "reference" / "diff_attention.py").read_text()
    path = tmp_path / "finite_mask.py"
    path.write_text(source.replace('masked_fill(future, float("-inf"))', "masked_fill(future, -1e4)"))
    first = run_warm([str(path), "--seed", "5", "--no-preview", "--tiers", "T2"], tmp_path).report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == (A, "mask") and "−5·10⁶" in first["evidence"] and "float64" in first["evidence"]
