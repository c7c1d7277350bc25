"""The diagnosis of one graded submission: its root causes, worked out after its checks ran.

Nothing here runs for a submission whose checks all passed. Otherwise the
file's own failures come first (it does not load, a function is missing),
then whatever the exercise's ``diagnose`` finds (contract slips, probes,
named misconceptions; see grader/exercises/diffattn/diagnosis.py), ordered
and matched to the failed checks by :mod:`grader.toolkit.rootcause`. A
diagnosis is explanation only: it never changes a verdict or a score, and an
error while working it out leaves the report with the causes found without
the exercise's part.
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from grader.core.exercise import Exercise
from grader.core.plugin import GradingContext
from grader.toolkit import rootcause, slips
from grader.toolkit.rootcause import Evidence, Finding

LOAD_ADVICE = "fix this first: no check can call a function from a file that does not import"
_ASSIGNED = re.compile(r"^(\w+)\s*(?::[^=]*)?=(?!=)")
_NAMED = re.compile(r"No module named '([\w.]+)'|name '(\w+)' is not defined|cannot import name '(\w+)'")


@dataclass(frozen=True)
class Diagnosis:
    """The report's ``diagnosis`` section, and the notes that replace the messages of checks failed only as consequences."""

    section: dict[str, Any]
    notes: dict[str, str] = field(default_factory=dict)


def empty() -> dict[str, Any]:
    """The section of a submission with nothing to diagnose."""
    return {"root_causes": [], "unexplained": [], "probes": [], "maps": [], "duration_s": 0.0}


def _load_function(load_failure: str, source: str | None, required: Sequence[str]) -> str | None:
    """The required function whose code the load error is in, or None (the whole file).

    The traceback's innermost frame in one of ``required`` (every function
    of the file when that is empty) wins: a module-level smoke test that
    calls it, or its own syntax error; else the function that uses the name
    the error is about (itself or through the helpers it calls), the one the
    message says is missing or one the failing line defines at the top level
    (a module constant that cannot be computed, or one computed from it, is
    the fault of the function that needs it), or the helper
    function the failing line is in or decorates (a helper compiled at import,
    such as a TorchScript function, is the fault of the function that calls it).
    """
    definitions = re.findall(r"^(?:async\s+)?def\s+(\w+)", source or "", flags=re.M)
    wanted = set(required) or set(definitions)
    frames = [name for name in re.findall(r"line \d+, in (\S+)", load_failure) if name in wanted]
    lines = [int(n) for n in re.findall(r"line (\d+)", load_failure)]
    by_line = slips.function_of_line(source, lines[-1]) if lines else None
    if frames or by_line in wanted or not source:
        return frames[-1] if frames else by_line if by_line in wanted else None
    named = _NAMED.search(load_failure)
    every = source.splitlines()
    failing = every[lines[-1] - 1] if lines and lines[-1] <= len(every) else ""
    names = [next(g for g in named.groups() if g).split(".")[0]] if named else [by_line] if by_line else _ASSIGNED.findall(failing)
    names += _imported(failing)  # an import that fails serves whatever uses the names it binds
    derived = _derived(every, set(names))
    using = [f for f in definitions if f in wanted and _uses(source, f, derived, set(definitions), set())]
    return using[0] if using else None


def _derived(lines: Sequence[str], names: set[str]) -> set[str]:
    """``names`` and every module-level name assigned from them, directly or through other such names
    (``_VERSION = ...`` failing, ``_FAST = _VERSION >= (2, 0)`` derived from it)."""
    found = set(names)
    assignments = [(match.group(1), line) for line in lines if (match := _ASSIGNED.match(line))]
    grown = True
    while grown:
        grown = False
        for name, line in assignments:
            if name not in found and set(re.findall(r"\b\w+\b", line.split("=", 1)[1])) & found:
                found.add(name)
                grown = True
    return found


def _imported(line: str) -> list[str]:
    """The names an import statement binds (``from m import a, b as c``: a, c; ``import m.n as k``: k; ``import m.n``: m)."""
    found = re.match(r"\s*(?:from\s+[\w.]+\s+)?import\s+\(?([^#)]*)", line)
    if found is None:
        return []
    return [part.split(" as ")[-1].strip().split(".")[0] for part in found.group(1).split(",") if part.strip()]


def _uses(source: str, function: str, names: set[str], helpers: set[str], seen: set[str]) -> bool:
    """Whether the body of module-level ``function`` mentions one of ``names``, itself or through the helpers it calls."""
    seen.add(function)
    body = " ".join(text.split("#", 1)[0] for _, text in slips.function_lines(source, function)[1:])
    mentioned = set(re.findall(r"\b\w+\b", body))
    return bool(mentioned & names) or any(_uses(source, helper, names, helpers, seen) for helper in (mentioned & helpers) - seen)


def callers(source: str | None, functions: Sequence[str]) -> dict[str, int]:
    """For each of ``functions``, how many of the others call it in ``source``, directly or through the file's helpers
    (calls by name in the code; a docstring or comment that mentions a function is no call)."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, ValueError):
        return {}
    bodies = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    called = {name: {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)} for name, node in bodies.items()}

    def reaches(caller: str, callee: str, seen: set[str]) -> bool:
        seen.add(caller)
        return callee in called[caller] or any(reaches(helper, callee, seen) for helper in (called[caller] & bodies.keys()) - seen)

    present = [f for f in functions if f in bodies]
    return {callee: sum(reaches(caller, callee, set()) for caller in present if caller != callee) for callee in present}


def file_findings(context: GradingContext, required: Sequence[str] = ()) -> list[Finding]:
    """The file does not load (in which of the ``required`` functions, when it can tell), or a required function is missing or not callable."""
    if context.load_failure is not None:
        shown = " ".join(line.strip() for line in context.load_failure.strip().splitlines()[:2])
        function = _load_function(context.load_failure, context.source, required)
        return [Finding(function, "load", "load", "The file does not load", f"Loading it failed: {shown}", LOAD_ADVICE)]
    found = []
    for name, described in context.functions.items():
        kind = described.get("kind")
        if kind == "missing":
            found.append(Finding(name, "load", "load", f"{name} is not defined", f"The file defines no function named {name}.",
                                 f"define {name} with the contract's name and signature"))  # fmt: skip
        elif kind == "not_callable":
            found.append(Finding(name, "load", "load", f"{name} is not a function", f"{name} is a {described.get('type', 'value')}, not a function.",
                                 f"define {name} as a function"))  # fmt: skip
    return found


def diagnose(exercise: Exercise, context: GradingContext, records: list[dict[str, Any]]) -> Diagnosis:
    """The diagnosis of a submission whose checks gave ``records`` (the report's check objects)."""
    if not any(r.get("status") == "failed" for r in records):
        return Diagnosis(empty())
    started = time.monotonic()
    evidence = Evidence()
    if exercise.diagnose is not None:
        try:
            evidence = exercise.diagnose(context, records)
        except Exception as exc:  # explanation only: a failure here must not cost the report its other causes
            evidence = Evidence(probes=[f"the exercise's diagnosis stopped ({type(exc).__name__}: {exc}): only the file's causes are given"])
    findings = file_findings(context, exercise.functions) + rootcause.with_hints(evidence.findings, evidence.hints)
    found = rootcause.assemble(records, context.roles, findings, callers(context.source, exercise.functions))
    section = {
        "root_causes": rootcause.to_json(found),
        "unexplained": list(found.unexplained),
        "probes": list(evidence.probes),
        "maps": list(evidence.maps),
        "duration_s": round(time.monotonic() - started, 3),
    }
    return Diagnosis(section, dict(found.notes))
