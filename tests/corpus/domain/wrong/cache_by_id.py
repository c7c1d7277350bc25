"""BUG: attention results are memoised by the id() of the input tensors, so in-place updates (or a new tensor reusing a freed id) return a stale result."""
import math

import torch

_cache = {}


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _compute(q1, k1, q2, k2, value, coefficient, causal):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        m = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1, s2 = s1.masked_fill(m, -math.inf), s2.masked_fill(m, -math.inf)
    return (s1.softmax(-1) - coefficient * s2.softmax(-1)) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    c_key = id(coefficient) if isinstance(coefficient, torch.Tensor) else coefficient
    key = (id(q1), id(k1), id(q2), id(k2), id(value), c_key, causal, torch.is_grad_enabled())
    if key not in _cache:
        if len(_cache) > 64:
            _cache.clear()
        _cache[key] = _compute(q1, k1, q2, k2, value, coefficient, causal)
    return _cache[key]
