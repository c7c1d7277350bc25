"""The contract's signatures, and why a submitted signature cannot honour them.

The checks call ``differential_lambda(q1, k1, q2, k2[, lambda_init=...])`` and
``differential_attention(q1, k1, q2, k2, value, coefficient[, causal=...])``.
A signature that cannot take such a call gets a sentence naming the parameter
at fault, which the report adds to the TypeError the call then raises.
"""

from __future__ import annotations

from typing import Any

POSITIONAL_KINDS = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
CONTRACT = {
    "differential_lambda": (("q1", "k1", "q2", "k2"), "lambda_init", "0.2"),
    "differential_attention": (("q1", "k1", "q2", "k2", "value", "coefficient"), "causal", "True"),
}


def contract_text(name: str) -> str:
    """The expected signature, e.g. ``differential_lambda(q1, k1, q2, k2, lambda_init=0.2)``."""
    positional, keyword, default = CONTRACT[name]
    return f"{name}({', '.join(positional)}, {keyword}={default})"


def signature_problem(name: str, parameters: Any) -> str | None:
    """Why ``parameters`` (as the worker described them) cannot take the contract's calls, or None."""
    if name not in CONTRACT or not isinstance(parameters, list):
        return None
    positional, keyword, _ = CONTRACT[name]
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
    return f"the signature of {name}({', '.join(names)}) does not match the contract {contract_text(name)}: {found}"


def signature_order_problem(name: str, parameters: Any) -> str | None:
    """Which parameter of ``parameters`` stands where the contract has another, so that a call binds it wrongly, or None.

    Callers may pass every argument by position or by name: the contract's
    parameters must come first, in its order and with its names (more
    optional parameters may follow them, or ``*args``/``**kwargs``).
    """
    if name not in CONTRACT or not isinstance(parameters, list):
        return None
    positional, keyword, _ = CONTRACT[name]
    wanted = [*positional, keyword]
    described = [p for p in parameters if isinstance(p, dict)]
    slots = [p for p in described if p.get("kind") in POSITIONAL_KINDS]
    for place, (expected, got) in enumerate(zip(wanted, slots), start=1):
        if got.get("name") != expected:
            where = f"parameter {place} is '{got.get('name')}' where the contract has '{expected}'"
            return (f"the signature of {name} does not follow the contract {contract_text(name)}: {where}, so a caller "
                    f"passing {expected} by position sets {got.get('name')}, and one passing {expected} by name fails")  # fmt: skip
    if len(slots) < len(wanted) and not any(p.get("kind") == "VAR_POSITIONAL" for p in described):
        missing = wanted[len(slots)]
        return (f"the signature of {name} does not follow the contract {contract_text(name)}: "
                f"'{missing}' cannot be passed by position")  # fmt: skip
    return None
