"""The contract's signatures of the differential-attention exercise.

The checks call ``differential_lambda(q1, k1, q2, k2[, lambda_init=...])`` and
``differential_attention(q1, k1, q2, k2, value, coefficient[, causal=...])``;
why a submitted signature cannot take such calls is the toolkit's to say
(:mod:`grader.toolkit.signatures`).
"""

from __future__ import annotations

from typing import Any

from grader.exercises.diffattn.cases import ATTENTION, INPUT_NAMES, LAMBDA, LAMBDA_NAMES
from grader.toolkit.signatures import Signature, call_problem, order_problem

CONTRACT = {
    LAMBDA: Signature(LAMBDA, LAMBDA_NAMES, "lambda_init", "0.2"),
    ATTENTION: Signature(ATTENTION, (*INPUT_NAMES, "coefficient"), "causal", "True"),
}


def signature_problem(name: str, parameters: Any) -> str | None:
    """Why ``parameters`` (as the worker described them) cannot take the contract's calls of ``name``, or None."""
    return None if name not in CONTRACT else call_problem(CONTRACT[name], parameters)


def signature_order_problem(name: str, parameters: Any) -> str | None:
    """Which parameter of ``name``'s ``parameters`` stands where the contract has another, or None."""
    return None if name not in CONTRACT else order_problem(CONTRACT[name], parameters)
