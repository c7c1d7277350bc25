# style: computes everything in float64 and casts the result back to the caller's dtype
from __future__ import annotations

import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    lam = torch.exp(q1.double().dot(k1.double())) - torch.exp(q2.double().dot(k2.double()))
    return (lam + lambda_init).to(q1.dtype)


def _probs(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    scores = torch.matmul(q, k.mT) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores + mask
    return scores.softmax(dim=-1)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    out_dtype = value.dtype
    q1, k1, q2, k2, v = (x.to(torch.float64) for x in (q1, k1, q2, k2, value))
    c = coefficient.to(torch.float64) if torch.is_tensor(coefficient) else float(coefficient)
    mask = None
    if causal:
        n = q1.shape[-2]
        mask = torch.full((n, n), -math.inf, dtype=torch.float64, device=v.device).triu(1)
    out = torch.matmul(_probs(q1, k1, mask) - c * _probs(q2, k2, mask), v)
    return out.to(out_dtype)
