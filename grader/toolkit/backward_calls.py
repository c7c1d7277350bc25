"""The gradient checks' own calls as evidence: a call whose output was right and whose gradient was not has a wrong backward pass.

The gradient probe (:func:`grader.toolkit.findings.gradients_probe`) compares
a submission's gradients with finite differences of its own forward on the
probe's inputs. A fault of the backward pass that shows only at the checks'
inputs (past a block size, at one length or dtype) or is too small for finite
differences to tell (weights saved in bfloat16 for the backward pass: 0.4 %)
leaves it with nothing to say. The checks' calls answer it without a new call:
one whose output matched the oracle ran a right forward, so a gradient of it
that does not match the oracle's VJP was made wrong after that forward, by
the student's own backward or hook, by a piece of the forward hidden from
autograd, or by a NaN that a discarded branch sent into the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from grader.core.invoke import Outcome
from grader.toolkit import slips
from grader.toolkit.findings import FLOAT32_LIKE, is_right, listed, uses_custom_backward
from grader.toolkit.rootcause import Finding
from grader.toolkit.tolerance import Truth
from grader.toolkit.verdicts import grads_verdict, values_verdict


@dataclass(frozen=True)
class GradientCall:
    """One call of the gradient checks, judged: how it was made (its attributes, in words), whether its output was right,
    the inputs whose gradients were wrong; of these, the ones that got no gradient at all, those whose gradient holds NaN
    or infinity where the VJP is finite and, in a float64 call, those as float32 holds them (:func:`_in_float32`); and
    whether its check is public; ``raised``: what its backward pass raised instead ("Type: message"), if it did."""

    attributes: Mapping[str, str]
    output_right: bool
    wrong: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    not_finite: tuple[str, ...] = ()
    float32_like: tuple[str, ...] = ()
    public: bool = True
    raised: str | None = None


def judged(outcome: Outcome, index: int, output: Truth, gradients: Mapping[str, Truth], positions: Mapping[str, int], dtype: str,
           attributes: Mapping[str, str], public: bool, degenerate: bool = False) -> GradientCall:  # fmt: skip
    """Call ``index`` of ``outcome`` (a check's call in ``dtype`` with inputs that require grad, at input ``positions``: name ->
    tensor number) against the oracle's ``output`` and ``gradients``; a backward pass that raised is noted as such. A
    ``degenerate`` call (an input constant or all zeros) may give the right output from a wrong function: its output counts
    as right for the backward's diagnosis only when every wrong gradient of it is missing, which no right function does
    (and never when its backward pass raised)."""
    if outcome.backward_error is not None:
        return GradientCall(attributes, values_verdict(outcome, index, "", output).ok and not degenerate, public=public, raised=outcome.backward_error)
    wrong, missing, not_finite, coarse = [], [], [], []
    truths = dict(gradients)
    for name, position in positions.items():
        if grads_verdict(outcome, index, "", truths, {name: position}).ok:
            continue
        wrong.append(name)
        got, truth = outcome.grads.get(position), gradients[name].values
        if got is None:
            missing.append(name)
        elif dtype == "float64" and _in_float32(got, truth):
            coarse.append(name)
        elif not np.isfinite(got).all() and np.isfinite(truth).all():
            not_finite.append(name)
    right = values_verdict(outcome, index, "", output).ok and not (degenerate and set(wrong) - set(missing))
    return GradientCall(attributes, right, tuple(wrong), tuple(missing), tuple(not_finite), tuple(coarse), public)


ROUNDED = (1e-10, 1e-5)
"""The median relative error of a gradient whose elements were all rounded to float32 on the way (about 6e-8 each, times the
few operations after): a float64 computation is off by less (most elements of a gradient wrong in a few places not at all),
an error of the formula or of a path cut out by more in the elements it touches."""


def _in_float32(got: np.ndarray, truth: np.ndarray) -> bool:
    """Whether ``got`` is ``truth`` as float32 holds it: infinite where the truth is past float32's range and right to float32's
    accuracy elsewhere, most elements off by a rounding's share (the median relative error over the elements that are not 0
    within :data:`ROUNDED`), as an intermediate kept in float32 leaves a gradient."""
    beyond = np.abs(truth) > np.finfo(np.float32).max
    held = ~beyond
    if not np.array_equal(~np.isfinite(got), beyond) or (held.any() and not is_right(got[held], truth[held], FLOAT32_LIKE)):
        return False
    nonzero = (truth != 0) & held
    if not nonzero.any():
        return bool(beyond.any())
    low, high = ROUNDED
    return low <= float(np.median(np.abs(got[nonzero] - truth[nonzero]) / np.abs(truth[nonzero]))) <= high


def _kind(shown: Sequence[GradientCall]) -> str:
    """What the wrong gradients of right outputs (``shown``) have in common: "missing" (no gradient at all), "not finite",
    "float32" (float64 calls' gradients as float32 holds them: only float64 calls mark any), else "wrong"."""
    if all(set(c.wrong) <= set(c.missing) for c in shown):
        return "missing"
    if all(c.not_finite for c in shown):
        return "not finite"
    if all(set(c.wrong) <= set(c.float32_like) for c in shown):
        return "float32"
    return "wrong"


HOW = {"missing": "got none", "not finite": "held NaN or infinity", "float32": "was right only to float32's accuracy in float64",
       "wrong": "did not match the VJP"}  # fmt: skip
"""What the gradient of a call with a right output did, by :func:`_kind`."""


def _calls_said(count: int) -> str:
    """How many of the gradient checks' calls, in words."""
    return f"{count} of the gradient checks' calls" if count > 1 else "one of the gradient checks' calls"


def _gradients_finding(function: str, component: str, title: str, evidence: str, advice: str, public: bool,
                       inputs: tuple[str, ...] = ()) -> Finding:  # fmt: skip
    """A finding of the gradients stage; a ``graph`` one explains the graph checks' failures too."""
    explains = frozenset({"gradients", "graph"} if component == "graph" else {"gradients"})
    return Finding(function, component, "gradients", title, evidence, advice, aspect="gradients", explains=explains, inputs=inputs,
                   public=public)  # fmt: skip


def _raised_finding(function: str, calls: Sequence[GradientCall], source: str | None) -> Finding | None:
    """The backward pass raised on a call whose output was right: ``backward`` when the file has a hand-written one (it must
    take any incoming gradient: of any strides, one element expanded as ``output.sum()`` gives it, never written into),
    else the part torch's wording of the exception names, else ``graph`` (a tensor autograd saved, changed in place)."""
    shown = [c for c in calls if c.output_right and c.raised]
    if not shown:
        return None
    public = any(c.public for c in shown)
    first = next(c for c in shown if c.public or not public)
    assert first.raised is not None
    said = first.raised.strip().splitlines()[0] if first.raised.strip() else first.raised
    evidence = f"In {_calls_said(len(shown))}, your output matched the expected one, yet the backward pass raised {said}"
    evidence += "" if evidence.endswith(".") else "."
    told = slips.exception_kind(first.raised)
    if uses_custom_backward(source):
        component, advice = "backward", ("your own backward pass must take any incoming gradient: one of any strides, or one element "
                                         "expanded as output.sum() gives it (stride 0); never write into it in place (clone it, or "
                                         "use out-of-place operations) and reshape rather than view it")  # fmt: skip
    elif told is not None:
        component, advice = told[0], told[2]
    else:
        component, advice = "graph", ("keep every tensor that autograd saved unchanged until the backward pass: write into new "
                                      "tensors, not in place into one the forward used")  # fmt: skip
    return _gradients_finding(function, component, "The backward pass raises", evidence, advice, public)


def finding(function: str, calls: Sequence[GradientCall], source: str | None, parts: Mapping[str, str] | None = None) -> Finding | None:
    """The fault of ``function``'s backward pass that its gradient checks' ``calls`` show, or None: some call's output was
    right and a gradient of it was wrong. By what those gradients have in common (:func:`_kind`): none at all is ``graph``
    (a path cut, or a hand-written backward returning None), or the part's that handles the one input concerned when the
    file has no hand-written backward (a coefficient made a Python number); NaN or infinity is ``stability``; float64
    calls' gradients off by float32's rounding is ``dtype``; else the student's own backward pass (a ``backward`` method, a
    gradient or saved-tensor hook) is ``backward``, and without one a piece of the forward hidden from autograd is
    ``graph``. The way
    of calling that alone parts two or more such calls from the calls whose gradients were right, if one does, says
    where. ``parts``: an input -> the component that handles it (a gate, a coefficient); a gradient wrong for that input
    alone is that component's. Public when a public check's call shows it; it then counts those calls alone. A backward pass
    that raised after a right output comes first (:func:`_raised_finding`)."""
    raised = _raised_finding(function, calls, source)
    if raised is not None:
        return raised
    shown = [c for c in calls if c.output_right and c.wrong]
    if not shown:
        return None
    public = any(c.public for c in shown)
    considered = [c for c in calls if c.public or not public]
    shown = [c for c in considered if c.output_right and c.wrong]
    right = [c for c in considered if c.output_right and not c.wrong]
    inputs = list(dict.fromkeys(n for c in shown for n in c.wrong))
    contrast = slips.separating([c.attributes for c in shown], [c.attributes for c in right])
    when = f", every one made when {contrast[0][0]} is {contrast[0][1]}" if len(contrast) == 1 and len(shown) > 1 else ""
    calls_said = _calls_said(len(shown))
    named, kind = listed(inputs), _kind(shown)
    others = f"; the other {len(right)} calls whose output was right had right gradients" if right else ""
    evidence = f"In {calls_said}{when}, your output matched the expected one, yet the gradient for {named} {HOW[kind]}{others}."

    def made(component: str, title: str, advice: str, said: str = evidence) -> Finding:
        return _gradients_finding(function, component, title, said, advice, public, tuple(inputs))

    part = (parts or {}).get(inputs[0]) if len(inputs) == 1 else None
    custom = uses_custom_backward(source)
    if kind == "missing":
        return made(part if part is not None and not custom else "graph", f"No gradient reaches {named}",
                    "return a gradient for every input that requires grad (a hand-written backward returns None only where "
                    "ctx.needs_input_grad is False) and keep the path from every input to the output in torch: no .item(), "
                    "float() or .detach() on it")
    if kind == "not finite":
        return made("stability", f"The gradient for {named} is not finite where the output is right",
                    "a value the forward discards (a masked score, a clamped or selected-away branch) still enters the backward pass: an "
                    "exp that overflows there gives 0 · inf = NaN; make every discarded value finite before it is discarded (mask the "
                    "scores before exp, not the exponentials after)")
    if kind == "float32":
        return made("dtype", f"The gradient for {named} is computed in float32 for float64 inputs",
                    "make every tensor of the backward pass in the inputs' dtype: a buffer made without dtype= (torch.zeros(shape), "
                    "torch.empty(...)), a .float() or a tensor saved in float32 rounds the gradient")
    if part is not None:
        return made(part, f"The gradient for {named} is wrong", "the backward pass of the part that handles it does not compute its "
                    "VJP for those calls: check that part's derivative against the contract's formula over the whole range of its inputs")
    if custom:
        return made("backward", f"The backward pass is wrong for {named}",
                    "your own backward pass (or gradient or saved-tensor hook) does not compute the forward's VJP for those calls: check "
                    "it against the contract's formula there, in full precision and over every block of rows and keys")
    return made("graph", f"Part of the computation of {named}'s gradient is hidden from autograd",
                "look for .detach(), .data, torch.no_grad() or a value turned into a Python number or a new tensor on the path those "
                "calls take, and keep that piece in the graph",
                f"{evidence} Your file has no hand-written backward, so autograd differentiated a forward with a piece taken out of "
                "its graph in those calls.")
