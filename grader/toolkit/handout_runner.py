"""Run the public checks of the exercise on your file.

    python run_checks.py [SUBMISSION]

SUBMISSION defaults to the exercise file named in public_checks.json, relative
to this script's folder. The inputs of every call, the expected results and
the error allowed on each element were computed by the grader when the
handout was made; this script only calls your functions and compares. It
needs Python 3.9 or later, torch and numpy. Exit code: 0 when every check
passes, 1 when one fails or the file cannot be imported, 2 when the file or
the data cannot be found.

(In the grader's source this file is grader/toolkit/handout_runner.py: it is
copied into every exercise's handout and never imported by the grader. It
knows no exercise: the data file names the functions, their inputs, how each
check judges its calls, and what each call must produce.)
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import io
import json
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
DATA = HERE / "public_checks.json"
FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MORE = "  (and {} more call(s) with problems)"
PHRASES: Dict[str, str] = {}  # the grader's wording of the findings both make, read from the data file by main()


def say(key: str, **fields: Any) -> str:
    """A finding in the grader's own words (its template from the data file, with the fields filled in)."""
    return PHRASES[key].format(**fields)


class Outcome:
    """What one call (and its backward pass) did: results or the exception, gradients, changed inputs."""

    def __init__(self) -> None:
        self.results: List[Any] = []
        self.values: List[Optional[torch.Tensor]] = []  # a copy of each tensor result, taken when it was returned
        self.problem: Optional[str] = None  # the first call that raised, or a missing function
        self.grads: Dict[str, Optional[torch.Tensor]] = {}
        self.accumulated: Dict[str, Optional[torch.Tensor]] = {}  # the .grad, after .backward(), of each input that held one
        self.held: Dict[str, float] = {}  # what those held (every element)
        self.backward_problem: Optional[str] = None
        self.changed: List[str] = []


def load(path: Path) -> Any:
    """Import the submission from its file (whatever its suffix); exit 1 with one clear line when it cannot be."""
    loader = importlib.machinery.SourceFileLoader("submission", str(path))
    spec = importlib.util.spec_from_loader("submission", loader)
    assert spec is not None  # a loader always has a spec
    module = importlib.util.module_from_spec(spec)
    try:
        loader.exec_module(module)
    except SyntaxError as exc:
        stop(1, f"{path.name} could not be imported: {type(exc).__name__} at line {exc.lineno}: {exc.msg}")
    except BaseException as exc:  # any error in the student's file (SystemExit included) is reported, never raised
        stop(1, raised(f"importing {path.name}", exc, path))
    return module


def raised(who: str, exc: BaseException, path: Path) -> str:
    """What ``who`` (a function, "importing the file", "the backward pass") did when it raised ``exc``, in one line,
    with the last place in the submission the exception passed through."""
    if isinstance(exc, NotImplementedError):
        return say("not_implemented", function=who, message=exc)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path]
    where = f" (at line {frames[-1].lineno} of {path.name}, in {frames[-1].name})" if frames else ""
    return f"{who} raised {type(exc).__name__}: {exc}{where}"


def make_tensor(spec: Dict[str, Any]) -> torch.Tensor:
    """An input tensor: the float64 values cast to its dtype, a leaf that requires grad when asked."""
    values = torch.from_numpy(np.asarray(spec["values"], dtype=np.float64))
    made = values.to(getattr(torch, spec["dtype"])).requires_grad_(spec["requires_grad"])
    if "held_grad" in spec:  # the .grad an earlier micro-batch of gradient accumulation left, which a call must keep
        made.grad = torch.full_like(made, spec["held_grad"])
    return made


def run(entry: Dict[str, Any], module: Any, path: Path) -> Outcome:
    """Make the calls of one entry, then its backward pass; observe the inputs throughout.

    Input tensors are built when a call first uses them. Before a call, "release"
    drops the inputs the call does not use, and "refill" overwrites
    inputs in place (through ``.data`` with "refill_through_data"), as a training
    loop does between steps.
    """
    request, outcome = entry["request"], Outcome()
    specs = request["tensors"]
    tensors: List[Optional[torch.Tensor]] = [None] * len(specs)
    before: List[Any] = [None] * len(specs)

    def tensor(index: int) -> torch.Tensor:
        made = tensors[index]
        if made is None:
            tensors[index] = made = make_tensor(specs[index])
            before[index] = noted(made)
        return made

    def argument(arg: Dict[str, Any]) -> Any:
        if "tensor" in arg:
            return tensor(arg["tensor"])
        return outcome.results[arg["result"]] if "result" in arg else arg["value"]

    for call in request["calls"]:
        function = getattr(module, call["function"], None)
        if not callable(function):
            outcome.problem = f"your file does not define a function {call['function']}"
            return outcome
        used = {a["tensor"] for a in [*call["args"], *call["kwargs"].values()] if "tensor" in a}
        if call.get("release"):
            for index in set(range(len(specs))) - used:
                tensors[index] = before[index] = None
        for index, values in call.get("refill", []):
            target = tensor(index).data if call.get("refill_through_data") else tensor(index)
            with torch.no_grad():
                target.copy_(torch.tensor(values, dtype=torch.float64))
            before[index] = noted(tensor(index))
        mode = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(call.get("grad_mode", ""), torch.enable_grad)
        args, kwargs = [argument(a) for a in call["args"]], {k: argument(v) for k, v in call["kwargs"].items()}
        try:
            with mode():  # (the inputs are made outside it: they are the caller's ordinary tensors)
                outcome.results.append(function(*args, **kwargs))
        except BaseException as exc:  # the student's exception (SystemExit, KeyboardInterrupt included) is the finding
            outcome.problem = raised(call["function"], exc, path)
            return outcome
        outcome.values.append(outcome.results[-1].detach().clone() if type(outcome.results[-1]) is torch.Tensor else None)
    names = [spec["name"] for spec in specs]
    outcome.changed = changed(tensors, names, before)
    backward = request.get("backward")
    if backward is not None:
        origins = [(backward["call"], backward["cotangent"]), *backward.get("also", [])]  # results differentiated together
        wanted = [(n, t) for n, t in zip(names, tensors) if t is not None and t.requires_grad]
        before_grads = [t.grad for _, t in wanted]
        outcome.held = {spec["name"]: spec["held_grad"] for spec in specs if "held_grad" in spec and spec["requires_grad"]}
        touched: List[str] = []
        try:
            results = [outcome.results[call] for call, _ in origins]
            cotangents = [torch.tensor(c, dtype=torch.float64).to(r.dtype) for (_, c), r in zip(origins, results)]
            if outcome.held:  # as a caller who accumulates asks: torch.autograd.grad, then .backward() onto the held .grad
                grads = torch.autograd.grad(results, [t for _, t in wanted], cotangents, retain_graph=True, allow_unused=True)
                outcome.grads = dict(zip((n for n, _ in wanted), grads))
                touched = [n for n, t in wanted if n in outcome.held and not _same_grad(t.grad, torch.full_like(t, outcome.held[n]))]
            for n, t in wanted:
                t.grad = torch.full_like(t, outcome.held[n]) if n in outcome.held else None
            # .backward() as a training loop calls it (reentrant checkpointing supports no other way), then each .grad
            torch.autograd.backward(results, cotangents)
            if outcome.held:
                outcome.accumulated = {n: t.grad for n, t in wanted if n in outcome.held}
            else:
                outcome.grads = {n: t.grad for n, t in wanted}
        except BaseException as exc:  # a broken graph is a finding too
            outcome.backward_problem = raised("the backward pass", exc, path)
        finally:
            for (_, t), grad in zip(wanted, before_grads):
                t.grad = grad
        outcome.changed += [n for n in [*touched, *changed(tensors, names, before)] if n not in outcome.changed]
    return outcome


def noted(t: torch.Tensor) -> Any:
    """What :func:`changed` compares an input with: its values, version counter, requires_grad, where its elements lie and
    the .grad it holds."""
    return t.detach().clone(), t._version, t.requires_grad, (t.data_ptr(), t.storage_offset(), t.stride()), \
        None if t.grad is None else t.grad.clone()


def changed(tensors: List[Optional[torch.Tensor]], names: List[str], before: List[Any]) -> List[str]:
    """The inputs whose values, version counters, requires_grad, place in memory (``x.data`` replaced) or .grad are no longer
    what they were (since built or refilled): a .grad added (the submission ran a backward pass of its own), or the one
    the caller's tensor held reset or changed."""
    return [n for n, t, b in zip(names, tensors, before)
            if t is not None and (t._version != b[1] or t.requires_grad != b[2] or not _same_grad(t.grad if t.is_leaf else None, b[4])
                                  or (t.data_ptr(), t.storage_offset(), t.stride()) != b[3] or not torch.equal(t.detach(), b[0]))]


def _same_grad(grad: Optional[torch.Tensor], held: Optional[torch.Tensor]) -> bool:
    return grad is None if held is None else grad is not None and torch.equal(grad, held)


def plain_tensor(entry: Dict[str, Any], outcome: Outcome) -> Any:
    """The last call's result when it is one plain torch.Tensor, else the problem as a string."""
    if outcome.problem is not None:
        return outcome.problem
    result = outcome.results[-1]
    if type(result) is torch.Tensor:
        return result
    function = entry["request"]["calls"][-1]["function"]
    kind = f"{type(result).__module__}.{type(result).__qualname__}"
    if isinstance(result, torch.Tensor):
        return say("subclass", function=function, type=kind)
    if isinstance(result, (tuple, list)):
        return say("several_items", function=function, type=kind, count=len(result))
    return say("not_a_tensor", function=function, type=kind, repr=repr(result)[:80])


def shaped_tensor(entry: Dict[str, Any], outcome: Outcome) -> Any:
    """The plain tensor the call returned, if it has the expected shape; else the problem, as a string."""
    result = plain_tensor(entry, outcome)
    if isinstance(result, str):
        return result
    if list(result.shape) != entry["shape"]:
        return say("shape", expected=entry["shape"], got=list(result.shape))
    return result


def kind_problem(entry: Dict[str, Any], outcome: Outcome, check: Dict[str, Any]) -> Optional[str]:
    """One dense floating tensor of the expected shape."""
    result = shaped_tensor(entry, outcome)
    if isinstance(result, str):
        return result
    if result.layout != torch.strided or result.dtype not in FLOATING:
        return f"expected a dense floating-point tensor, got layout {result.layout}, dtype {result.dtype}"
    if result.is_inference() and entry["request"]["calls"][-1].get("grad_mode") != "inference_mode":
        return say("inference_outside")
    return None


def dtype_problem(entry: Dict[str, Any], outcome: Outcome, check: Dict[str, Any]) -> Optional[str]:
    """The expected shape, the inputs' dtype, the CPU."""
    result = shaped_tensor(entry, outcome)
    if isinstance(result, str):
        return result
    if str(result.dtype) != f"torch.{entry['dtype']}":
        return say("dtype", expected=entry["dtype"], got=str(result.dtype).replace("torch.", ""))
    if result.device.type != "cpu":
        return say("device", got=result.device)
    return None


def unchanged_problem(entry: Dict[str, Any], outcome: Outcome, check: Dict[str, Any]) -> Optional[str]:
    """No input modified by the forward or the backward pass."""
    result = plain_tensor(entry, outcome)
    if isinstance(result, str):
        return f"could not be checked: {result}"
    if outcome.changed:
        return say("modified", names=", ".join(outcome.changed))
    return None


def graph_problem(entry: Dict[str, Any], outcome: Outcome, check: Dict[str, Any]) -> Optional[str]:
    """An output attached to the autograd graph."""
    result = plain_tensor(entry, outcome)
    if isinstance(result, str):
        return result
    if result.requires_grad and result.grad_fn is not None:
        return None
    return say("made_anew" if result.requires_grad else "detached")


def mismatch(what: str, got: Any, truth: Dict[str, Any]) -> Optional[str]:
    """Whether ``got`` is within the allowed error of the expected values, element by element."""
    wanted = np.asarray(truth["values"], dtype=np.float64)
    allowed = np.asarray(truth["allowed"], dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != wanted.shape:
        return f"{what}: expected shape {list(wanted.shape)}, got {list(got.shape)}"
    with np.errstate(all="ignore"):  # infinities and NaNs are findings, not warnings
        error = np.array(np.abs(got - wanted))  # an array even for a 0-dim result
        error[~np.isfinite(got)] = np.inf
        bad = ~(error <= allowed)
        if not bad.any():
            return None
        worst = np.unravel_index(int(np.argmax(np.where(bad, error / np.maximum(allowed, 1e-300), -1.0))), bad.shape)
    return (f"{what}: {int(bad.sum())} of {bad.size} elements are off; at index {tuple(int(i) for i in worst)} "
            f"got {got[worst]:.9g}, expected {wanted[worst]:.9g} (allowed error {allowed[worst]:.3g})")


def values_problem(entry: Dict[str, Any], outcome: Outcome, check: Dict[str, Any]) -> Optional[str]:
    """The output's values."""
    result = plain_tensor(entry, outcome)
    if isinstance(result, str):
        return result
    return mismatch("output", result.detach().to(torch.float64).cpu().numpy(), entry["expected"])


def sequence_problem(entry: Dict[str, Any], outcome: Outcome, check: Dict[str, Any]) -> Optional[str]:
    """Both calls of a sequence: each result right when it was returned, and still right after the second call."""
    if outcome.problem is not None:
        return outcome.problem
    for position, (result, kept, truth) in enumerate(zip(outcome.results, outcome.values, entry["expected"])):
        call = ("first", "second")[position]
        if kept is None:
            return f"the {call} call returned {type(result).__name__}; expected a torch.Tensor"
        problem = mismatch(f"the {call} call's output", kept.to(torch.float64).cpu().numpy(), truth)
        if problem is None and not torch.equal(result.detach(), kept):
            problem = f"the {call} call's output was overwritten by a later call (a buffer shared between calls?)"
        if problem is not None:
            return problem
    return None


def grads_problem(entry: Dict[str, Any], outcome: Outcome, check: Dict[str, Any]) -> Optional[str]:
    """The gradients the check names (those of inputs that require grad in this call)."""
    result = plain_tensor(entry, outcome)
    if isinstance(result, str):
        return result
    if outcome.backward_problem is not None:
        return outcome.backward_problem
    for name in check["grads"]:
        truth = entry["grads"].get(name)
        if truth is None:
            continue
        grad = outcome.grads.get(name)
        if grad is None and np.any(np.asarray(truth["values"]) != 0):
            return f"no gradient reached {name} (is it detached, turned into a Python number, or unused?)"
        got = np.zeros_like(np.asarray(truth["values"])) if grad is None else grad.detach().to(torch.float64).numpy()
        problem = mismatch(f"gradient with respect to {name}", got, truth)
        if problem is None and name in outcome.accumulated:
            problem = accumulation_problem(name, outcome, truth)
        if problem is not None:
            return problem
    return None


def accumulation_problem(name: str, outcome: Outcome, truth: Dict[str, Any]) -> Optional[str]:
    """What .backward() added to the .grad that input ``name`` held, against the gradient (one more rounding allowed)."""
    held, grad = outcome.held[name], outcome.accumulated[name]
    if grad is None:
        return say("accumulation_lost", name=name, held=held)
    total = grad.detach().to(torch.float64).numpy()
    rounding = float(torch.finfo(grad.dtype).eps) * np.abs(total)
    loosened = {"values": truth["values"], "allowed": np.asarray(truth["allowed"], dtype=np.float64) + rounding}
    return mismatch(say("accumulated", what="this call", name=name, held=held), total - held, loosened)


JUDGES: Dict[str, Callable[[Dict[str, Any], Outcome, Dict[str, Any]], Optional[str]]] = {
    "kind": kind_problem,
    "dtype": dtype_problem,
    "unchanged": unchanged_problem,
    "graph": graph_problem,
    "values": values_problem,
    "grads": grads_problem,
    "sequence": sequence_problem,
}


def difference_problem(pair: Dict[str, Any], calls: Dict[str, Any], outcome_of: Callable[[str], Outcome]) -> Optional[str]:
    """Two calls' outputs, the second subtracted from the first, at the index ``select``, against the expected difference."""
    keys = pair["calls"]
    found = [dtype_problem(calls[k], outcome_of(k), {}) for k in keys]
    problem = next((p for p in found if p is not None), None)
    if problem is not None:
        return problem
    first, second = (outcome_of(k).results[-1].detach().to(torch.float64) for k in keys)
    return mismatch("difference", (first - second)[tuple(pair["select"])].numpy(), pair["expected"])


def judge(check: Dict[str, Any], calls: Dict[str, Any], outcome_of: Callable[[str], Outcome]) -> List[str]:
    """The problems one check finds, each naming its call."""
    if check["kind"] == "difference":
        found = [(pair["label"], lambda pair=pair: difference_problem(pair, calls, outcome_of)) for pair in check["pairs"]]
    else:
        judged = JUDGES[check["kind"]]
        found = [(calls[key]["label"], lambda key=key: judged(calls[key], outcome_of(key), check)) for key in check["calls"]]
    problems = []
    for label, problem_of in found:
        try:
            problem = problem_of()
        except Exception as exc:  # a result too odd to read (sparse, complex, ...) is a finding, not a crash
            problem = f"the result could not be checked ({type(exc).__name__}: {exc})"
        if problem is not None:
            problems.append(f"{label}: {problem}")
    return problems


def stop(code: int, message: str) -> None:
    """Print one line on standard error and exit."""
    print(f"run_checks: {message}", file=sys.stderr)
    sys.exit(code)


def main(argv: Optional[List[str]] = None) -> int:
    """Run every public check on the submission and print one line per check."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")  # titles hold λ and Σ; a terminal that cannot show them gets "?"
    if not DATA.is_file():
        stop(2, f"the data file {DATA.name} is missing; it must sit beside this script")
    data = json.loads(DATA.read_text(encoding="utf-8"))
    PHRASES.update(data["phrases"])
    parser = argparse.ArgumentParser(prog="run_checks.py", description="Run the public checks on your file.")
    parser.add_argument("submission", nargs="?", default=str(HERE / data["submission"]),
                        help=f"the file to check (default: {data['submission']} beside this script)")
    path = Path(parser.parse_args(argv).submission).resolve()
    if not path.is_file():
        stop(2, f"no such file: {path}")
    module = load(path)
    calls, outcomes = data["calls"], {}

    def outcome_of(key: str) -> Outcome:
        if key not in outcomes:
            outcomes[key] = run(calls[key], module, path)
        return outcomes[key]

    print(f"Public checks of {path.name} (inputs drawn with seed {data['seed']} when the handout was made)")
    passed, tier = 0, None
    for check in data["checks"]:
        if check["tier"] != tier:
            tier = check["tier"]
            print(f"\n{tier}")
        problems = judge(check, calls, outcome_of)
        passed += not problems
        print(f"  {'FAIL' if problems else 'PASS'}  {check['id']}: {check['title']}")
        if problems:
            print(f"        {problems[0]}")
            if len(problems) > 1:
                print("      " + MORE.format(len(problems) - 1))
    total = len(data["checks"])
    print(f"\n{passed} of {total} public checks passed.")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
