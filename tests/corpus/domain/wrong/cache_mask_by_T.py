"""BUG: the additive mask is cached by sequence length only, ignoring causal, so a length first seen with causal=False stays unmasked for causal calls (and vice versa)."""
import math

import torch

_MASKS = {}


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _mask(T, causal, dtype):
    if T not in _MASKS:
        m = torch.zeros(T, T, dtype=torch.float64)
        if causal:
            m = m.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        _MASKS[T] = m
    return _MASKS[T].to(dtype)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    m = _mask(T, causal, q1.dtype)
    a1 = torch.softmax(q1 @ k1.mT / math.sqrt(D) + m, dim=-1)
    a2 = torch.softmax(q2 @ k2.mT / math.sqrt(D) + m, dim=-1)
    return (a1 - coefficient * a2) @ value
