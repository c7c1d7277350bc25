"""Instructor reference for the differential-attention exercise.

Not part of the student handout. It implements exactly the contract stated in
``exercise/diff_attention.py`` and nothing more: no per-head normalisation, no
``(1 - lambda_init)`` multiplier, no projections, no dropout.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["differential_attention", "differential_lambda"]


def differential_lambda(
    q1: Tensor, k1: Tensor, q2: Tensor, k2: Tensor, lambda_init: float = 0.2
) -> Tensor:
    """Return ``exp(q1 . k1) - exp(q2 . k2) + lambda_init`` as a 0-dim tensor.

    The result keeps the vectors' dtype and device and stays differentiable
    with respect to all four of them. It is deliberately not clamped.
    """
    assert q1.dim() == 1 and q1.shape == k1.shape == q2.shape == k2.shape
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _attention_map(q: Tensor, k: Tensor, causal: bool) -> Tensor:
    """Softmax over keys of ``q k^T / sqrt(D)``, future keys hidden when causal."""
    logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(diagonal=1)
        # The diagonal is never masked, so no row is entirely -inf and
        # torch.softmax (which subtracts the row maximum) stays finite.
        logits = logits.masked_fill(future, float("-inf"))
    return torch.softmax(logits, dim=-1)


def differential_attention(
    q1: Tensor, k1: Tensor, q2: Tensor, k2: Tensor, value: Tensor,
    coefficient: float | Tensor, causal: bool = True,
) -> Tensor:
    """Return ``(A1 - coefficient * A2) @ value`` with shape [B, H, T, 2D].

    ``A1`` and ``A2`` are the separately normalised maps of the two branches.
    Inputs may be strided; nothing is modified in place, and gradients flow
    to every tensor argument, including a tensor ``coefficient``.
    """
    assert q1.dim() == 4 and q1.shape == k1.shape == q2.shape == k2.shape
    assert value.shape == (*q1.shape[:-1], 2 * q1.shape[-1])
    signed_map = _attention_map(q1, k1, causal) - coefficient * _attention_map(q2, k2, causal)
    return torch.matmul(signed_map, value)
