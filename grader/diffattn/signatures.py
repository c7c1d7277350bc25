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
