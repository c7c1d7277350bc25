"""Turn what the worker observed into findings a student can act on, for any exercise's functions.

A finding is a :class:`~grader.toolkit.compare.Comparison` whose message says
what was expected and what came back, and whose context names the call. The
wording names the function concerned (from the outcome, or as given), never a
particular exercise. :func:`summarise` folds the findings of a check into one
verdict, grouping identical problems so that a stub's "not implemented yet"
is said once, not once per call.
"""

from __future__ import annotations

import numpy as np

from grader.core.invoke import HELD_GRAD, SKIPPED, Outcome, Returned
from grader.core.plugin import GradingContext
from grader.toolkit.compare import Comparison, combine, compare
from grader.toolkit.tolerance import Truth

OVERWRITTEN = "overwritten by a later call"
"""How a check's message says that a tensor the function returned was written into by a later call."""

FLOATING = ("float16", "bfloat16", "float32", "float64")
"""The floating-point dtypes a result may have when the contract asks only for "a floating tensor"."""


# One wording for each finding that both the checks and the student handout's runner report. The
# handout writes these templates into its data file and the runner formats them from there, so the
# grader and the runner cannot drift apart (grader.toolkit.handout, handout_runner).
PHRASES: dict[str, str] = {
    "not_implemented": "{function} is not implemented yet (it raised NotImplementedError: {message})",
    "several_items": "{function} returned a {type} of {count} item(s); expected one torch.Tensor (return only the output, not extra values)",
    "subclass": "{function} returned a {type}, a subclass of torch.Tensor; return a plain torch.Tensor",
    "not_a_tensor": "{function} returned {type} {repr}; expected a torch.Tensor",
    "shape": "expected shape {expected}, got {got}",
    "dtype": "expected dtype {expected} (the inputs' dtype), got {got}",
    "device": "expected device cpu (the inputs' device), got {got}",
    "modified": "modified its input(s) {names} (values, version counter, place in memory, requires_grad, or .grad: one added, or the one the caller's tensor already held reset or changed); compute on new tensors and leave the inputs as they came",
    "inference_outside": "expected an ordinary tensor, got an inference tensor (one made under torch.inference_mode) from a call made "
    "outside inference mode: its caller can neither modify it in place nor use it where autograd records; leave the mode to the caller",
    "made_anew": "the output requires grad but has no autograd history (grad_fn is None): it was made anew from values "
    "(torch.tensor(...), .detach().requires_grad_()), so no gradient reaches the inputs; keep every step in torch",
    "accumulation_lost": "{name} held a .grad of {held} everywhere (earlier micro-batches of gradient accumulation) and .backward() "
    "left it none: a backward pass must add its gradient to the .grad a caller's tensor holds",
    "accumulated": "{what}, what .backward() added to the .grad {name} already held ({held} everywhere, as gradient accumulation "
    "leaves it; torch.autograd.grad was asked first and must leave that .grad as it was)",
    "detached": "the output does not require grad although its inputs do: it was detached (.detach(), .numpy(), torch.no_grad()); "
    "keep every step in torch",
}


def phrase(key: str, **fields: object) -> str:
    """The finding ``key`` of :data:`PHRASES` with its fields filled in."""
    return PHRASES[key].format(**fields)


def modified_inputs(names: list[str]) -> str:
    """The finding for a call that changed the named inputs (values, version counters, place in memory, requires_grad, .grad)."""
    return phrase("modified", names=", ".join(names))


def graph_problem(requires_grad: bool, has_grad_fn: bool) -> str | None:
    """The finding for an output of inputs that require grad, or None when it is attached to their graph."""
    if requires_grad and has_grad_fn:
        return None
    return phrase("made_anew" if requires_grad else "detached")


def function_problem(grading: GradingContext, name: str) -> str | None:
    """Why ``name`` cannot be called at all (missing, not callable), from what the worker said when it loaded the submission, or None."""
    described = grading.functions.get(name, {})
    kind = described.get("kind")
    if kind == "missing":
        return f"the submission does not define {name}"
    if kind == "not_callable":
        return f"{name} must be a function (got a {described.get('type', 'non-callable object')})"
    return None


def raised(name: str, error: dict[str, str], note: str | None = None) -> str:
    """What a call of ``name`` that raised ``error`` (the worker's type, message, traceback) did, for a student.

    ``note`` says why the function's signature breaks the grader's calls; it
    is added to a TypeError, which such a signature causes.
    """
    if error["type"] == "NotImplementedError":
        return phrase("not_implemented", function=name, message=error["message"])
    trace = f"\n{error['traceback'].rstrip()}" if error["traceback"].strip() else ""
    hint = f"\n(Probably because {note}.)" if note and error["type"] == "TypeError" else ""
    return f"{name} raised {error['type']}: {error['message']}{trace}{hint}"


def tensor_result(outcome: Outcome, index: int) -> tuple[Returned | None, str | None]:
    """Call ``index``'s result if it is one plain torch.Tensor, else the problem in one sentence.

    A call that raised before it (in a composed request) is the problem named.
    """
    if outcome.failure is not None:
        return None, outcome.failure
    if index >= len(outcome.results):
        return None, "the worker did not report this call"
    for position, earlier in enumerate(outcome.results[: index + 1]):
        if earlier.raised is not None and earlier.raised is not SKIPPED:
            function = outcome.functions[position]
            return None, raised(function, earlier.raised, outcome.notes.get(function))
    result = outcome.results[index]
    name = outcome.functions[index]
    if result.exact_tensor:
        return result, None
    if result.is_tensor:
        return None, phrase("subclass", function=name, type=result.type_name)
    if result.length is not None:
        return None, phrase("several_items", function=name, type=result.type_name, count=result.length)
    return None, phrase("not_a_tensor", function=name, type=result.type_name, repr=result.repr)


def returned_values(outcome: Outcome, index: int) -> np.ndarray | None:
    """The values of call ``index`` when it returned a plain tensor whose values could be read, else None."""
    result, _ = tensor_result(outcome, index)
    return None if result is None else result.value


def finding(what: str, problem: str | None) -> Comparison | None:
    """A failed finding about the call ``what``, or None when there is no problem."""
    return None if problem is None else Comparison(False, problem, None, what)


def shape_dtype_problem(result: Returned, shape: tuple[int, ...], dtype: str) -> str | None:
    """The problem with a tensor's shape, dtype or device, or None."""
    if result.shape != shape:
        return phrase("shape", expected=list(shape), got=list(result.shape or ()))
    if result.dtype != dtype:
        return phrase("dtype", expected=dtype, got=result.dtype)
    if result.device != "cpu":
        return phrase("device", got=result.device)
    return None


def kind_problem(result: Returned, shape: tuple[int, ...], floating: tuple[str, ...] = FLOATING, like: str = "") -> str | None:
    """The problem with a tensor's shape, layout or (non-floating) dtype, or its being an inference tensor that a call made
    outside inference mode returned; or None.

    ``like`` names the input whose shape the result must have, for the
    message ("the shape of value").
    """
    if result.shape != shape:
        described = "a 0-dim tensor (shape [])" if shape == () else f"shape {list(shape)}" + (f" (the shape of {like})" if like else "")
        return f"expected {described}, got shape {list(result.shape or ())}"
    if result.layout != "torch.strided":
        return f"expected a dense tensor (layout torch.strided), got layout {result.layout}"
    if result.dtype not in floating:
        return f"expected a floating-point tensor, got dtype {result.dtype}"
    if result.inference_outside:
        return phrase("inference_outside")
    return None


def values_verdict(outcome: Outcome, index: int, what: str, truth: Truth) -> Comparison:
    """Compare call ``index``'s values with ``truth``."""
    result, problem = tensor_result(outcome, index)
    if result is None:
        return Comparison(False, str(problem), None, what)
    if result.value is None:
        return Comparison(False, unreadable(result), None, what)
    if result.overwritten:
        return Comparison(False, f"the returned tensor was {OVERWRITTEN} (is it a buffer shared between calls?); "
                          "return a new tensor from every call", None, what)  # fmt: skip
    return compare(f"{what}, output", result.value, truth.values, truth.allowed)


def unreadable(result: Returned) -> str:
    """Why a returned tensor's values could not be compared."""
    reason = result.value_error or f"a {result.layout} tensor of dtype {result.dtype} on {result.device}"
    return f"the returned tensor's values could not be read ({reason}); return a dense CPU float tensor"


def grads_verdict(outcome: Outcome, index: int, what: str, truths: dict[str, Truth], keys: dict[str, int]) -> Comparison:
    """Compare the gradients with respect to ``keys`` (name -> input tensor position) with ``truths``."""
    result, problem = tensor_result(outcome, index)
    if result is None:
        return Comparison(False, str(problem), None, what)
    if outcome.backward_error is not None:
        return Comparison(False, f"the backward pass failed: {outcome.backward_error}", None, what)
    found = []
    for key, position in keys.items():
        truth = truths[key]
        grad = outcome.grads.get(position)
        if grad is None and (truth.values != 0).any():
            found.append(Comparison(False, f"no gradient reached {key} (is it detached, turned into a Python number, or unused?)", None, what))
            continue
        got = truth.values * 0 if grad is None else grad
        found.append(compare(f"{what}, gradient with respect to {key}", got, truth.values, truth.allowed))
        if position in outcome.accumulated:
            found.append(_accumulated(what, key, outcome.accumulated[position], truth))
    return combine(found)


def _accumulated(what: str, key: str, grad: np.ndarray | None, truth: Truth) -> Comparison:
    """What ``.backward()`` added to the ``.grad`` that input ``key`` held (:data:`HELD_GRAD`), read as ``grad``, against
    ``truth``: the same gradient, allowed one more rounding (the sum's, in the gradient's dtype)."""
    if grad is None:
        return Comparison(False, phrase("accumulation_lost", name=key, held=HELD_GRAD), None, what)
    added = grad.astype(np.float64) - HELD_GRAD
    rounding = np.finfo(grad.dtype).eps * np.abs(grad.astype(np.float64)) if np.issubdtype(grad.dtype, np.floating) else 0.0
    return compare(phrase("accumulated", what=what, name=key, held=HELD_GRAD), added, truth.values, truth.allowed + rounding)


def summarise(findings: list[Comparison | None], success: str) -> Comparison:
    """One verdict from a check's findings: the grouped failures, or ``success``."""
    failures = [f for f in findings if f is not None]
    return combine(failures) if failures else Comparison(True, success, None)
