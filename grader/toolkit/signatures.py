"""A function's contract signature, and why a submitted signature cannot honour it.

Each function of a contract takes some tensors and numbers by position and
one last parameter with a default (``causal=True``, ...); the checks call it
with every argument by position, by name, or the tensors by position and the
last one by name (:data:`grader.toolkit.domain.BINDINGS`). A signature that
cannot take such a call gets a sentence naming the parameter at fault, which
the report adds to the TypeError the call then raises. ``parameters`` is the
worker's description of the submitted function's parameters (name, kind,
has_default), or anything else when it could not describe them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from grader.toolkit.rootcause import Finding

POSITIONAL_KINDS = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
"""The kinds of inspect.Parameter (as the worker names them) that a positional argument can bind to."""


@dataclass(frozen=True)
class Signature:
    """One function of a contract: ``name(*positional, keyword=default)``, the default as written."""

    name: str
    positional: tuple[str, ...]
    keyword: str
    default: str

    @property
    def parameters(self) -> tuple[str, ...]:
        """Every parameter, in the contract's order."""
        return (*self.positional, self.keyword)

    @property
    def text(self) -> str:
        """The expected signature, e.g. ``f(q, k, v, causal=True)``."""
        return f"{self.name}({', '.join(self.positional)}, {self.keyword}={self.default})"


def call_problem(signature: Signature, parameters: Any) -> str | None:
    """Why ``parameters`` cannot take the contract's calls of ``signature``'s function, or None."""
    if not isinstance(parameters, list):
        return None
    positional, keyword = signature.positional, signature.keyword
    kinds = [str(p.get("kind")) for p in parameters if isinstance(p, dict)]
    names = [str(p.get("name")) for p in parameters if isinstance(p, dict)]
    slots = [p for p in parameters if isinstance(p, dict) and p.get("kind") in POSITIONAL_KINDS]
    found = None
    if len(slots) < len(positional) and "VAR_POSITIONAL" not in kinds:
        found = f"it takes {len(slots)} positional parameter(s), but the grader passes {len(positional)}"
    elif keyword not in names[len(positional):] and "VAR_KEYWORD" not in kinds:
        found = f"it has no parameter '{keyword}' after the first {len(positional)}"
    else:
        extra = [p["name"] for p in slots[len(positional):] if not p.get("has_default") and p.get("name") != keyword]
        extra += [p["name"] for p in parameters if p.get("kind") == "KEYWORD_ONLY" and not p.get("has_default") and p.get("name") != keyword]
        if extra:
            found = f"it requires extra parameter(s) {', '.join(extra)}"
    if found is None:
        return None
    return f"the signature of {signature.name}({', '.join(names)}) does not match the contract {signature.text}: {found}"


def misplaced(signature: Signature, parameters: Any) -> tuple[int, str, str | None] | None:
    """(the place, from 1; the contract's parameter there; the submitted one in its place, or None when there is none) at
    the first place where ``parameters`` stops following ``signature``'s order and names, or None.

    Callers may pass every argument by position or by name: the contract's
    parameters must come first, in its order and with its names (more
    optional parameters may follow them, or ``*args``/``**kwargs``).
    """
    if not isinstance(parameters, list):
        return None
    described = [p for p in parameters if isinstance(p, dict)]
    slots = [p for p in described if p.get("kind") in POSITIONAL_KINDS]
    for place, (expected, got) in enumerate(zip(signature.parameters, slots), start=1):
        if got.get("name") != expected:
            return place, expected, str(got.get("name"))
    if len(slots) < len(signature.parameters) and not any(p.get("kind") == "VAR_POSITIONAL" for p in described):
        return len(slots) + 1, signature.parameters[len(slots)], None
    return None


def order_problem(signature: Signature, parameters: Any) -> str | None:
    """Which parameter of ``parameters`` stands where the contract has another, so that a call binds it wrongly, or None
    (:func:`misplaced`)."""
    found = misplaced(signature, parameters)
    return None if found is None else _order_text(signature, *found)


def _order_text(signature: Signature, place: int, expected: str, got: str | None) -> str:
    """What :func:`order_problem` says of the parameter ``got`` at ``place``, where the contract has ``expected``."""
    if got is None:
        return f"the signature of {signature.name} does not follow the contract {signature.text}: '{expected}' cannot be passed by position"
    where = f"parameter {place} is '{got}' where the contract has '{expected}'"
    return (f"the signature of {signature.name} does not follow the contract {signature.text}: {where}, so a caller "
            f"passing {expected} by position sets {got}, and one passing {expected} by name fails")  # fmt: skip


def swallowed(signature: Signature, parameters: Any) -> str | None:
    """The contract's parameter that ``parameters``' ``*args`` takes when callers pass it by position (the first one with no
    positional slot of its own before the ``*args``), or None. The function may read it back from ``*args``: only its
    calls tell whether it does (:func:`evidenced`)."""
    if not isinstance(parameters, list):
        return None
    described = [p for p in parameters if isinstance(p, dict)]
    slots = [p for p in described if p.get("kind") in POSITIONAL_KINDS]
    if len(slots) >= len(signature.parameters) or not any(p.get("kind") == "VAR_POSITIONAL" for p in described):
        return None
    return signature.parameters[len(slots)]


def positional_only(signature: Signature, parameters: Any) -> tuple[str, ...]:
    """The contract's parameters that ``parameters`` declares positional-only (before a ``/``), which a caller passing
    them by name cannot set."""
    if not isinstance(parameters, list):
        return ()
    refused = {p.get("name") for p in parameters if isinstance(p, dict) and p.get("kind") == "POSITIONAL_ONLY"}
    return tuple(name for name in signature.parameters if name in refused)


def _by_name_refused(signature: Signature, parameters: Any, components: Mapping[str, str]) -> Finding | None:
    """A contract finding when ``parameters`` follow ``signature``'s order but make some of its parameters
    positional-only, or None; its component that of the last parameter when it is one of them, else of the first of
    them ``components`` names."""
    refused = positional_only(signature, parameters)
    if not refused:
        return None
    names = ", ".join(f"'{name}'" for name in refused)
    # the last parameter is the one callers pass by name most (every binding but all by position)
    at_fault = signature.keyword if signature.keyword in refused else next((n for n in refused if n in components), refused[0])
    return Finding(signature.name, components.get(at_fault, components.get("*", "type")), "contract",
                   f"{signature.name} cannot take {names} by name",
                   f"The signature of {signature.name} makes {names} positional-only (they stand before a `/`), so a caller "
                   f"passing them by name, as the contract {signature.text} allows, gets a TypeError.",
                   f"remove the `/` and declare the parameters as the contract does: {signature.text}", aspect="binding",
                   explains=frozenset({"binding"}), signature="positional-only arguments passed as keyword")  # fmt: skip


def finding(signature: Signature, parameters: Any, components: Mapping[str, str]) -> Finding | None:
    """A contract finding when ``parameters`` do not follow ``signature`` (:func:`misplaced`) or make some of its
    parameters positional-only, its component the one ``components`` gives the contract's parameter at fault (else the
    one it gives "*", else "type"), or None."""
    found = misplaced(signature, parameters)
    if found is None:
        return _by_name_refused(signature, parameters, components)
    problem = _order_text(signature, *found)
    _, expected, got = found
    title = (f"{signature.name} cannot take '{expected}' by position" if got is None else
             f"{signature.name}'s parameter '{expected}' is '{got}' in the submitted signature")  # fmt: skip
    return Finding(signature.name, components.get(expected, components.get("*", "type")), "contract", title, problem[0].upper() + problem[1:] + ".",
                   f"declare the parameters as the contract does: {signature.text}", aspect="binding",
                   explains=frozenset({"binding"}), signature=f"argument '{expected}'")  # fmt: skip


def _taken_by_varargs(signature: Signature, taken: str, components: Mapping[str, str]) -> Finding:
    """A contract finding: ``signature``'s parameter ``taken`` goes into the submitted ``*args`` when passed by position
    (:func:`swallowed`, confirmed by the calls: :func:`evidenced`)."""
    return Finding(signature.name, components.get(taken, components.get("*", "type")), "contract",
                   f"{signature.name} loses '{taken}' when it is passed by position",
                   f"In the submitted signature a `*args` stands where the contract {signature.text} has '{taken}', so a caller "
                   f"passing {taken} by position puts it in args, and the calls bound that way give wrong values while those "
                   f"passing it by name are right.",
                   f"declare the parameters as the contract does: {signature.text}", aspect="binding",
                   explains=frozenset({"binding"}), signature=f"'{taken}' taken by *args")  # fmt: skip


def confirmed(found: Finding, calls: Iterable[tuple[str, bool]]) -> Finding:
    """``found`` (a finding of :func:`finding` for one function) also explaining its value and gradient checks when that
    function's own calls in the checks, as (binding, whether its value was right), show the signature at fault: some
    were wrong, every call bound the usual way ("keyword": tensors by position, the option by name) was right, and so
    each wrong one was bound otherwise (every argument by position, or every one by name)."""
    calls = list(calls)
    usual = [right for binding, right in calls if binding == "keyword"]
    if not usual or not all(usual) or all(right for _, right in calls):
        return found
    return replace(found, explains=found.explains | {"values", "gradients"})


def evidenced(contracts: Mapping[str, Signature], functions: Mapping[str, Any], components: Mapping[str, Mapping[str, str]],
              calls: Callable[[str], Iterable[tuple[str, bool]]]) -> list[Finding]:  # fmt: skip
    """:func:`finding` for each function of ``contracts``, else a parameter its ``*args`` takes (:func:`swallowed`) when the
    function's calls in the checks (``calls``: function -> (binding, whether its value was right) of each) show it lost by
    position; each :func:`confirmed` by those calls."""
    found = []
    for name, contract in contracts.items():
        parameters = functions.get(name, {}).get("parameters")
        own = components.get(name, {})
        flagged = finding(contract, parameters, own)
        taken = swallowed(contract, parameters) if flagged is None else None
        if flagged is None and taken is None:
            continue
        made = list(calls(name))
        if taken is not None and _lost_by_position(contract, taken, made):
            flagged = _taken_by_varargs(contract, taken, own)
        if flagged is not None:
            found.append(confirmed(flagged, made))
    return found


def _lost_by_position(signature: Signature, taken: str, calls: Iterable[tuple[str, bool]]) -> bool:
    """Whether the calls (binding, whether its value was right) show ``taken`` lost when passed by position: some call that
    passes it by position is wrong, and every call that passes it by name is right (there is one). The contract's last
    parameter goes by position only when every argument does ("positional"); the others also when only it goes by name."""
    by_position = ("positional",) if taken == signature.keyword else ("positional", "keyword")
    placed = [(binding in by_position, right) for binding, right in calls]
    named = [right for positional, right in placed if not positional]
    return bool(named) and all(named) and any(positional and not right for positional, right in placed)


def findings(contracts: Mapping[str, Signature], functions: Mapping[str, Any], components: Mapping[str, Mapping[str, str]]) -> list[Finding]:
    """:func:`finding` for each function of ``contracts``, from the worker's description of the submitted ones (``functions``),
    with that function's ``components``."""
    found = (finding(contract, functions.get(name, {}).get("parameters"), components.get(name, {})) for name, contract in contracts.items())
    return [f for f in found if f is not None]
