"""T1, the contract: a tensor of the input's shape and dtype, and the input left as it was."""

from __future__ import annotations

from grader.core.plugin import GradingContext, check
from grader.toolkit.compare import Comparison
from softmax_exercise.cases import outcomes, problem


@check("T1", 10, "Returns a tensor of the input's shape and dtype")
def test_returns_shaped_tensor(grading: GradingContext) -> None:
    found = outcomes(grading, "values", 10.0)
    problems = [why for case, outcome in found if (why := problem(outcome, case)) is not None]
    message = problems[0] if problems else f"All {len(found)} calls returned a tensor of the input's shape and dtype."
    grading.conclude(Comparison(not problems and bool(found), message, None))


@check("T1", 10, "The input is never modified")
def test_input_unchanged(grading: GradingContext) -> None:
    found = outcomes(grading, "values", 10.0)
    answered = [(case, outcome) for case, outcome in found if problem(outcome, case) is None]
    changed = [case for case, outcome in answered if outcome.changed_inputs]
    if not answered:
        message = "could not be checked: no call returned a result" + "".join(f" ({problem(o, c)})" for c, o in found[:1])
    elif changed:
        message = f"stable_softmax modified its input x in {len(changed)} of {len(answered)} calls; compute on a copy"
    else:
        message = f"None of the {len(answered)} calls modified its input."
    grading.conclude(Comparison(bool(answered) and not changed, message, None))
