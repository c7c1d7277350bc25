"""The public checks of the differential-attention exercise, runnable without the grader.

:func:`files` precomputes, for one seed, the inputs of the public checks and
what each call must produce, with the grader's own case sets, oracle and
allowances: the output values, and for gradient checks the cotangent and the
gradients. It returns them as ``public_checks.json``, with the runner
``run_checks.py`` (the text of :mod:`grader.exercises.diffattn.handout_runner`, which
needs only torch and numpy) and a README. Hidden checks are left out with
their case sets, and so is any public check's call on a hidden set (strided
layouts): the handout holds no input of a hidden probe, no oracle and no
reference code.

How each public check is replayed is in :data:`RECIPES`; a check missing
there (or marked hidden) is not in the handout, and the README says so.

The handout's inputs can never be a graded run's: they are drawn with
:func:`inputs_seed`, the handout's seed moved above every seed the grader
accepts (``--seed`` is in [0, 2**32 - 1]), so that a table of the public
calls and their expected values earns nothing, even when the class is graded
with the very seed the handout was made with. The data file records both.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from grader.core.invoke import Request, ResultOf, TensorInput
from grader.core.plugin import MARKER
from grader.exercises.diffattn import expected, suite, toy
from grader.exercises.diffattn.cases import (
    INPUT_NAMES,
    AttentionCase,
    LambdaCase,
)
from grader.exercises.diffattn.expected import Truth
from grader.toolkit.casesets import CaseSet
from grader.toolkit.domain import CallSequence

SUBMISSION = "exercise/diff_attention.py"  # where the handout puts the stub (the exercise's default submission)
DATA_FILE = "public_checks.json"
RUNNER_FILE = "run_checks.py"
DATA_FORMAT = 1
CHECK_MODULES = ("test_t1_contract", "test_t2_values", "test_t3_gradients")
LAMBDA_NAMES = ("q1", "k1", "q2", "k2")
TOY_SET = "toy_experiment"
HANDOUT_DOMAIN = 2**32  # handout inputs are drawn with seeds from here on; graded runs use [0, 2**32 - 1]
HANDOUT_ELEMENTS = 4096  # the largest value tensor a handout call keeps (graded runs also make longer calls)


def inputs_seed(seed: int) -> int:
    """The seed the handout's case sets are drawn with: ``seed`` moved out of the range any graded run can use."""
    return HANDOUT_DOMAIN + seed


@dataclass(frozen=True)
class Recipe:
    """How the runner replays one check: what it judges (``kind``) in which calls.

    ``sets`` are (case set, with a backward pass);
    ``grads`` names the gradients a "grads" check compares.
    """

    kind: str
    sets: tuple[tuple[CaseSet[Any], bool], ...] = ()
    grads: tuple[str, ...] = ()


_LAMBDA = ((suite.lambda_values, False),)
_LAMBDA_GRADS = ((suite.lambda_values, True),)
_OUTPUTS = ((suite.attention_causal, False), (suite.attention_noncausal, False))
_GRADIENTS = ((suite.attention_gradients, True),)

RECIPES: dict[str, Recipe] = {
    "lambda_returns_0dim_tensor": Recipe("kind", _LAMBDA),
    "lambda_keeps_dtype": Recipe("dtype", _LAMBDA),
    "attention_returns_one_tensor": Recipe("kind", _OUTPUTS),
    "attention_keeps_dtype": Recipe("dtype", _OUTPUTS),
    "coefficient_kinds_accepted": Recipe("dtype", ((suite.attention_coefficients, False), *_GRADIENTS)),
    "inputs_not_modified": Recipe("unchanged", ((suite.attention_coefficients, False), *_GRADIENTS, *_LAMBDA, *_LAMBDA_GRADS)),
    "graph_attached": Recipe("graph", (*_GRADIENTS, *_LAMBDA_GRADS)),
    "lambda_values": Recipe("values", _LAMBDA),
    "causal_values": Recipe("values", ((suite.attention_causal, False),)),
    "noncausal_values": Recipe("values", ((suite.attention_noncausal, False),)),
    "coefficient_values": Recipe("values", ((suite.attention_coefficients, False),)),
    "row_sums": Recipe("values", ((suite.row_sums, False),)),
    "lambda_zero_is_attention": Recipe("values", ((suite.lambda_zero, False),)),
    "identical_maps_cancel": Recipe("values", ((suite.identical_maps, False),)),
    "value_gradient": Recipe("grads", _GRADIENTS, ("value",)),
    "branch_one_gradients": Recipe("grads", _GRADIENTS, ("q1", "k1")),
    "branch_two_gradients": Recipe("grads", _GRADIENTS, ("q2", "k2")),
    "coefficient_gradient": Recipe("grads", _GRADIENTS, ("coefficient",)),
    "lambda_gradients": Recipe("grads", _LAMBDA_GRADS, LAMBDA_NAMES),
    "end_to_end_gradients": Recipe(
        "grads", ((suite.end_to_end, True),), (*(f"lambda_{n}" for n in LAMBDA_NAMES), *INPUT_NAMES)
    ),
    "toy_offset_scaling": Recipe("offset"),
    "arguments_bind": Recipe("values", ((suite.lambda_bindings, False), (suite.attention_bindings, False))),
    "values_with_gradients": Recipe("values", ((suite.lambda_values, True), (suite.attention_gradients, True), (suite.end_to_end, True))),
    "repeated_calls": Recipe("sequence", ((suite.sequences, False),)),
}

# The truth of a values check on a set, where it is not plain O = (A1 - λA2)V.
TRUTHS: dict[CaseSet[AttentionCase], Callable[[AttentionCase], Truth]] = {
    suite.lambda_zero: expected.branch_one_output,
    suite.identical_maps: expected.identical_maps_output,
}


def declared_checks() -> dict[str, dict[str, Any]]:
    """Every check's declaration (tier, points, title, visibility) by id, in grading order."""
    found: dict[str, dict[str, Any]] = {}
    for name in CHECK_MODULES:
        module = importlib.import_module(f"grader.exercises.diffattn.checks.{name}")
        for attribute, function in vars(module).items():
            for mark in getattr(function, "pytestmark", ()):
                if mark.name == MARKER:
                    found[attribute.removeprefix("test_")] = dict(mark.kwargs)
    return found


def public_checks(seed: int) -> dict[str, Any]:
    """The data file's document: every replayable public check and the calls it needs, for ``seed``.

    Inputs are drawn with :func:`inputs_seed`, never with ``seed`` itself.
    """
    drawn = inputs_seed(seed)
    checks, calls = [], {}
    for check_id, declared in declared_checks().items():
        recipe = RECIPES.get(check_id)
        if recipe is None or declared.get("visibility", "public") != "public":
            continue
        entry = {"id": check_id, "tier": declared["tier"], "title": declared["title"], "kind": recipe.kind}
        if recipe.kind == "offset":
            entry["pairs"] = _offset_pairs(drawn, calls)
        elif recipe.kind == "sequence":
            entry["calls"] = [_add_sequence(calls, index, sequence) for index, sequence in enumerate(suite.sequences(drawn))]
        else:
            entry["calls"] = [_add_call(calls, case_set.name, index, case, grads, recipe.kind, TRUTHS.get(case_set, expected.case_value))
                              for case_set, grads in recipe.sets
                              for index, case in enumerate(case_set(drawn))
                              if _small(case)]  # fmt: skip
            entry["grads"] = list(recipe.grads)
        checks.append(entry)
    return {"format": DATA_FORMAT, "seed": seed, "inputs_seed": drawn, "submission": SUBMISSION, "checks": checks, "calls": calls}


def _add_call(calls: dict[str, Any], name: str, index: int, case: AttentionCase | LambdaCase, grads: bool, kind: str,
              truth: Callable[[Any], Truth] = expected.case_value) -> str:  # fmt: skip
    """Describe call ``index`` of the set ``name`` once (by key), with the truths that ``kind`` needs (values: ``truth``); return its key."""
    key = f"{name}/{index}" + ("/grads" if grads else "")
    lambda_case = isinstance(case, LambdaCase)
    if key not in calls:
        request = suite.lambda_request(case, grads) if lambda_case else suite.attention_request(case, grads)
        calls[key] = {
            "label": f"{suite.LAMBDA if lambda_case else suite.ATTENTION}({case.label()})",
            "dtype": case.dtype,
            "shape": [] if lambda_case else list(case.value.shape),
            "request": _request(request, _tensor_names(case)),
        }
    if kind == "values" and "expected" not in calls[key]:
        calls[key]["expected"] = _truth(truth(case))
    if kind == "grads" and "grads" not in calls[key]:
        truths = expected.lambda_grads(case) if lambda_case else expected.attention_grads(case)
        wanted = [t["name"] for t in calls[key]["request"]["tensors"] if t["requires_grad"]]
        calls[key]["grads"] = {name: _truth(truths[name]) for name in wanted}
    return key


def _small(case: AttentionCase | LambdaCase) -> bool:
    """Whether a case is small enough for the handout: the data file stays a few megabytes, not tens."""
    return isinstance(case, LambdaCase) or case.value.size <= HANDOUT_ELEMENTS


def _add_sequence(calls: dict[str, Any], index: int, sequence: CallSequence) -> str:
    """Describe one call sequence with the truths of both of its calls; return its key."""
    key = f"sequences/{index}"
    calls[key] = {
        "label": sequence.label(),
        "dtype": sequence.second.dtype,
        "shape": [] if isinstance(sequence.second, LambdaCase) else list(sequence.second.value.shape),
        "request": _request(suite.sequence_request(sequence), _tensor_names(sequence.second)),
        "expected": [_truth(expected.case_value(case)) for case in (sequence.first, sequence.second)],
    }
    return key


def _tensor_names(case: AttentionCase | LambdaCase) -> list[str]:
    """The names of a request's input tensors, in the order of its ``inputs`` (the truths' keys)."""
    if isinstance(case, LambdaCase):
        return list(LAMBDA_NAMES)
    names = [f"lambda_{n}" for n in LAMBDA_NAMES] if case.lambda_case is not None else []
    return names + list(INPUT_NAMES) + (["coefficient"] if case.coefficient_is_tensor else [])


def _request(request: Request, names: list[str]) -> dict[str, Any]:
    """A request as plain JSON: calls whose arguments are tensors, earlier results or values."""
    tensors: list[dict[str, Any]] = []
    name_of = {id(tensor): name for tensor, name in zip(request.inputs, names)}
    numbered: dict[int, int] = {}  # a tensor passed to several calls is one tensor

    def argument(value: Any) -> dict[str, Any]:
        if isinstance(value, TensorInput):
            if value.layout != "contiguous":
                raise ValueError(f"the handout runner makes contiguous tensors only (got layout {value.layout!r})")
            if id(value) not in numbered:
                numbered[id(value)] = len(tensors)
                tensors.append({"name": name_of.get(id(value), f"input {len(tensors)}"), "values": _array(value.values),
                                "dtype": value.dtype, "requires_grad": value.requires_grad})  # fmt: skip
            return {"tensor": numbered[id(value)]}
        if isinstance(value, ResultOf):
            return {"result": value.call}
        return {"value": value}

    calls = []
    for call in request.calls:
        described: dict[str, Any] = {"function": call.function, "args": [argument(a) for a in call.args],
                                     "kwargs": {name: argument(a) for name, a in call.kwargs.items()}}  # fmt: skip
        if call.refill:
            described["refill"] = [[argument(tensor)["tensor"], _array(values)] for tensor, values in call.refill]
        extras = {"release": call.release, "refill_through_data": call.refill_through_data, "grad_mode": call.grad_mode}
        described.update({key: value for key, value in extras.items() if value not in (False, "enabled")})
        calls.append(described)
    described: dict[str, Any] = {"calls": calls, "tensors": tensors}
    if request.backward_from is not None:
        described["backward"] = {"call": request.backward_from, "cotangent": _array(request.cotangent)}
    return described


def _offset_pairs(seed: int, calls: dict[str, Any]) -> list[dict[str, Any]]:
    """The toy experiment: at each λ, the call with the shared offset, the one without, and their difference."""
    with_offset, signal_only, _ = toy.sweep_cases(seed)
    pairs = []
    for index, (lam, shifted, plain) in enumerate(zip(toy.LAMBDAS, with_offset, signal_only)):
        keys = [_add_call(calls, f"{TOY_SET}/{part}", index, case, False, "offset")
                for part, case in (("with_offset", shifted), ("values_only", plain))]
        pairs.append({
            "label": f"toy experiment at λ={lam:g}: output(values + offset) - output(values), sequence 0, head 0",
            "with_offset": keys[0],
            "values_only": keys[1],
            "expected": _truth(toy.offset_contribution(shifted, plain)),
        })
    return pairs


def _truth(truth: Truth) -> dict[str, Any]:
    """Expected values and the absolute error allowed per element."""
    return {"values": _array(truth.values), "allowed": _array(np.broadcast_to(truth.allowed, np.shape(truth.values)))}


def _array(values: Any) -> Any:
    """float64 values as nested lists (exact: JSON keeps every digit Python's repr writes)."""
    return np.asarray(values, dtype=np.float64).tolist()


def runner_source() -> str:
    """The text of the runner script."""
    return Path(__file__).with_name("handout_runner.py").read_text(encoding="utf-8")


def readme(data: dict[str, Any]) -> str:
    """The handout's README: what is in it, how to run the public checks, what they cover and do not."""
    rows = "\n".join(f"| {c['tier']} | `{c['id']}` | {c['title']} |" for c in data["checks"])
    return README.format(seed=data["seed"], rows=rows, submission=data["submission"], runner=RUNNER_FILE, data=DATA_FILE)


def files(seed: int) -> dict[str, str]:
    """The handout's files besides the stub and the task statement: the runner, its data and the README."""
    data = public_checks(seed)
    return {
        RUNNER_FILE: runner_source(),
        DATA_FILE: json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n",
        "README.md": readme(data),
    }


README = """\
# Differential attention: handout

- `exercise/README.md`: the task.
- `{submission}`: the file you complete and hand in.
- `{runner}` and `{data}`: the public checks, to run on your own machine.

## Checking your work

With Python 3.9 or later, torch and numpy installed, from this folder:

```
python {runner}                       # checks {submission}
python {runner} path/to/other_file.py
```

Each check prints PASS or FAIL; a failure names the call that went wrong
and what was expected. The exit code is 0 when every check passes and 1
otherwise.

## What the public checks cover

Their inputs were drawn once, with seed {seed}, when this handout was made,
from a stream of their own that no graded run ever draws from; the expected
values and the error allowed on each element come from the grader's float64
oracle and tolerances.

| tier | check | what |
| --- | --- | --- |
{rows}

## What they do not cover

- The graded run draws fresh random inputs each time (never these: a table
  of these calls' answers earns nothing), and its checks make more calls
  than these, longer sequences (up to 320 tokens) among them: passing here
  is a good sign, not a promise.
- The grader also runs hidden checks that are not in this handout. Everything
  the task statement asks for is graded, including what no public check here
  tries.
- These checks run your code in this Python process, without time limits.
"""
