"""The public checks of an exercise, precomputed for a student handout that runs them without the grader.

:meth:`Handout.files` draws, for one seed, the inputs of every public check
with the grader's own case sets and requests, and what each call must produce
with the exercise's truths and allowances: the output values, and for
gradient checks the cotangent and the gradients. It returns them as
``public_checks.json``, with the runner ``run_checks.py`` (the text of
:mod:`grader.toolkit.handout_runner`, which needs only torch and numpy and
knows no exercise) and a README. Hidden checks are left out with their case
sets, and so is any public check's call on a hidden set
(:attr:`~grader.toolkit.casesets.CaseSet.hidden`): the handout holds no input
of a hidden probe, no oracle and no reference code.

How each public check is replayed is the :class:`Recipe` its declaration
gives (``replay`` of :func:`grader.core.plugin.check`); a check without one
(or marked hidden) is not in the handout, and the README says so.

The handout's inputs can never be a graded run's: they are drawn with
:func:`inputs_seed`, the handout's seed moved above every seed the grader
accepts (``--seed`` is in [0, 2**32 - 1]), so that a table of the public
calls and their expected values earns nothing, even when the class is graded
with the very seed the handout was made with. The data file records both.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grader.core.invoke import HELD_GRAD, Request, ResultOf, TensorInput
from grader.core.plugin import declared_checks
from grader.toolkit.casesets import CaseSet
from grader.toolkit.domain import CallSequence
from grader.toolkit.tolerance import Truth
from grader.toolkit.verdicts import PHRASES

DATA_FILE = "public_checks.json"
RUNNER_FILE = "run_checks.py"
# 2: the runner's "difference" judge (two calls' outputs subtracted) replaced diff_attention's "offset";
# 3: "phrases", the grader's own wording of the findings both make (grader.toolkit.verdicts.PHRASES)
DATA_FORMAT = 3
HANDOUT_DOMAIN = 2**32  # handout inputs are drawn with seeds from here on; graded runs use [0, 2**32 - 1]
HANDOUT_ELEMENTS = 4096  # the largest output a handout call keeps (graded runs also make larger calls)
Calls = dict[str, dict[str, Any]]
"""The data file's calls by key: label, dtype, output shape, request, and the truths the checks need."""


def inputs_seed(seed: int) -> int:
    """The seed the handout's case sets are drawn with: ``seed`` moved out of the range any graded run can use."""
    return HANDOUT_DOMAIN + seed


@dataclass(frozen=True)
class Recipe:
    """How the runner replays one check: what it judges (``kind``) in which calls.

    ``kind`` names a judge of the runner (handout_runner.JUDGES: "kind",
    "dtype", "unchanged", "graph", "values", "grads", "sequence" for the
    call sequences of the sets), or a kind whose entry the exercise builds
    itself (:attr:`Handout.extra`, e.g. for the runner's "difference");
    ``sets`` are (case set, with a backward pass); ``grads`` names the
    gradients a "grads" check compares.
    """

    kind: str
    sets: tuple[tuple[CaseSet[Any], bool], ...] = ()
    grads: tuple[str, ...] = ()


def request_json(request: Request, names: list[str]) -> dict[str, Any]:
    """A request as plain JSON: calls whose arguments are tensors, earlier results or values.

    ``names`` names the tensors of ``request.inputs``, in order (others are
    "input N"). Every tensor must be contiguous: the runner makes no other layout.
    """
    tensors: list[dict[str, Any]] = []
    name_of = {id(tensor): name for tensor, name in zip(request.inputs, names)}
    numbered: dict[int, int] = {}  # a tensor passed to several calls is one tensor

    def argument(value: Any) -> dict[str, Any]:
        if isinstance(value, TensorInput):
            if value.layout != "contiguous":
                raise ValueError(f"the handout runner makes contiguous tensors only (got layout {value.layout!r})")
            if id(value) not in numbered:
                numbered[id(value)] = len(tensors)
                tensors.append({"name": name_of.get(id(value), f"input {len(tensors)}"), "values": array_json(value.values),
                                "dtype": value.dtype, "requires_grad": value.requires_grad}
                               | ({"held_grad": HELD_GRAD} if value.held_grad and value.requires_grad and not value.activation else {}))  # fmt: skip
            return {"tensor": numbered[id(value)]}
        if isinstance(value, ResultOf):
            return {"result": value.call}
        return {"value": value}

    calls = []
    for call in request.calls:
        made: dict[str, Any] = {"function": call.function, "args": [argument(a) for a in call.args],
                                "kwargs": {name: argument(a) for name, a in call.kwargs.items()}}  # fmt: skip
        if call.refill:
            made["refill"] = [[argument(tensor)["tensor"], array_json(values)] for tensor, values in call.refill]
        extras = {"release": call.release, "refill_through_data": call.refill_through_data, "grad_mode": call.grad_mode}
        made.update({key: value for key, value in extras.items() if value not in (False, "enabled")})
        calls.append(made)
    described: dict[str, Any] = {"calls": calls, "tensors": tensors}
    if request.backward_from is not None:
        described["backward"] = {"call": request.backward_from, "cotangent": array_json(request.cotangent)}
        if request.also_backward:
            described["backward"]["also"] = [[call, array_json(cotangent)] for call, cotangent in request.also_backward]
    return described


def truth_json(truth: Truth) -> dict[str, Any]:
    """Expected values and the absolute error allowed per element."""
    return {"values": array_json(truth.values), "allowed": array_json(np.broadcast_to(truth.allowed, np.shape(truth.values)))}


def array_json(values: Any) -> Any:
    """float64 values as nested lists (exact: JSON keeps every digit Python's repr writes)."""
    return np.asarray(values, dtype=np.float64).tolist()


def runner_source() -> str:
    """The text of the runner script."""
    return Path(__file__).with_name("handout_runner.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Handout:
    """What an exercise's handout is made of.

    ``checks_package`` holds the check modules (their declarations give the
    public checks, in grading order, and how each is replayed).
    A case's call is ``request(case, with gradients)``, its input tensors'
    names ``names(case)`` (in the order of the request's ``inputs``), its
    right output ``value(case)`` (or ``truths[case set](case)`` for a set
    whose checks compare against something else) and its gradients
    ``gradients(case)``; ``sequence_request`` makes the request of a call
    sequence (None for an exercise with no "sequence" recipe). ``extra``
    builds the entries of the exercise's own kinds: (handout, inputs seed,
    calls) -> the entry's fields. The README is
    written from ``readme``, with ``title`` and ``larger`` (what the graded
    run also calls that the handout does not) filled in.
    """

    title: str
    submission: str
    statement: str
    checks_package: str
    request: Callable[[Any, bool], Request]
    names: Callable[[Any], list[str]]
    value: Callable[[Any], Truth]
    gradients: Callable[[Any], dict[str, Truth]]
    larger: str
    sequence_request: Callable[[CallSequence[Any]], Request] | None = None
    truths: Mapping[CaseSet[Any], Callable[[Any], Truth]] = field(default_factory=dict)
    extra: Mapping[str, Callable[[Handout, int, Calls], dict[str, Any]]] = field(default_factory=dict)

    def public_checks(self, seed: int) -> dict[str, Any]:
        """The data file's document: every replayable public check and the calls it needs, for ``seed``.

        Inputs are drawn with :func:`inputs_seed`, never with ``seed`` itself.
        """
        drawn = inputs_seed(seed)
        checks: list[dict[str, Any]] = []
        calls: Calls = {}
        for check_id, declared in declared_checks(self.checks_package).items():
            recipe: Recipe | None = declared.get("replay")
            if recipe is None or declared.get("visibility", "public") != "public":
                continue
            entry: dict[str, Any] = {"id": check_id, "tier": declared["tier"], "title": declared["title"], "kind": recipe.kind}
            shown = [(case_set, grads) for case_set, grads in recipe.sets if not case_set.hidden]
            if recipe.kind in self.extra:
                entry.update(self.extra[recipe.kind](self, drawn, calls))
            elif recipe.kind == "sequence":
                entry["calls"] = [self.add_sequence(calls, f"{case_set.name}/{index}", sequence)
                                  for case_set, _ in shown for index, sequence in enumerate(case_set(drawn))]  # fmt: skip
            else:
                entry["calls"] = [self.add_call(calls, f"{case_set.name}/{index}", case, grads, recipe.kind, self.truths.get(case_set, self.value))
                                  for case_set, grads in shown
                                  for index, case in enumerate(case_set(drawn))
                                  if self.small(case)]  # fmt: skip
                entry["grads"] = list(recipe.grads)
            checks.append(entry)
        return {"format": DATA_FORMAT, "seed": seed, "inputs_seed": drawn, "submission": self.submission, "phrases": dict(PHRASES),
                "checks": checks, "calls": calls}  # fmt: skip

    def add_call(self, calls: Calls, name: str, case: Any, grads: bool, kind: str, truth: Callable[[Any], Truth] | None = None) -> str:
        """Describe the call of ``case`` (``name``: its set and index) once, with the truths that ``kind`` needs (values: ``truth``); return its key."""
        key = name + ("/grads" if grads else "")
        if key not in calls:
            calls[key] = {
                "label": f"{case.function}({case.label()})",
                "dtype": case.dtype,
                "shape": list(case.output_shape),
                "request": request_json(self.request(case, grads), self.names(case)),
            }
        if kind == "values" and "expected" not in calls[key]:
            calls[key]["expected"] = truth_json((truth or self.value)(case))
        if kind == "grads" and "grads" not in calls[key]:
            truths = self.gradients(case)
            wanted = [t["name"] for t in calls[key]["request"]["tensors"] if t["requires_grad"]]
            calls[key]["grads"] = {tensor: truth_json(truths[tensor]) for tensor in wanted}
        return key

    def add_sequence(self, calls: Calls, key: str, sequence: CallSequence[Any]) -> str:
        """Describe one call sequence with the truths of both of its calls; return its key."""
        if self.sequence_request is None:
            raise ValueError(f"{self.title}: a \"sequence\" recipe needs the handout's sequence_request")
        calls[key] = {
            "label": sequence.label(),
            "dtype": sequence.second.dtype,
            "shape": list(sequence.second.output_shape),
            "request": request_json(self.sequence_request(sequence), self.names(sequence.second)),
            "expected": [truth_json(self.value(case)) for case in (sequence.first, sequence.second)],
        }
        return key

    @staticmethod
    def small(case: Any) -> bool:
        """Whether a case is small enough for the handout: the data file stays a few megabytes, not tens."""
        return math.prod(case.output_shape) <= HANDOUT_ELEMENTS

    def difference(self, calls: Calls, keys: tuple[str, str], cases: tuple[Any, Any], label: str, select: tuple[int, ...], truth: Truth) -> dict[str, Any]:
        """A pair of the runner's "difference" judge: both ``cases``' calls (added as ``keys``) and ``truth``, output(first) - output(second) at ``select``."""
        made = [self.add_call(calls, key, case, False, "difference") for key, case in zip(keys, cases)]
        return {"label": label, "calls": made, "select": list(select), "expected": truth_json(truth)}

    def readme(self, data: dict[str, Any]) -> str:
        """The handout's README: what is in it, how to run the public checks, what they cover and do not."""
        rows = "\n".join(f"| {c['tier']} | `{c['id']}` | {c['title']} |" for c in data["checks"])
        return README.format(title=self.title, statement=self.statement, larger=self.larger, seed=data["seed"], rows=rows,
                             submission=data["submission"], runner=RUNNER_FILE, data=DATA_FILE)  # fmt: skip

    def files(self, seed: int) -> dict[str, str]:
        """The handout's files besides the stub and the task statement: the runner, its data and the README."""
        data = self.public_checks(seed)
        return {
            RUNNER_FILE: runner_source(),
            DATA_FILE: json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n",
            "README.md": self.readme(data),
        }


README = """\
# {title}: handout

- `{statement}`: the task.
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
  than these, {larger} among them: passing here
  is a good sign, not a promise.
- The grader also runs hidden checks that are not in this handout. Everything
  the task statement asks for is graded, including what no public check here
  tries.
- These checks run your code in this Python process, without time limits.
"""
