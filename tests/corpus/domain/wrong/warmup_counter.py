"""BUG: a module-level call counter switches to an SDPA 'fast path' after the first call, and that path always passes is_causal=True."""
import math

import torch
import torch.nn.functional as F

_calls = 0


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _reference(q1, k1, q2, k2, value, coefficient, causal):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1, s2 = s1.masked_fill(fut, -math.inf), s2.masked_fill(fut, -math.inf)
    return (s1.softmax(-1) - coefficient * s2.softmax(-1)) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    global _calls
    _calls += 1
    if _calls == 1:  # first call: slow path doubles as a sanity check
        return _reference(q1, k1, q2, k2, value, coefficient, causal)
    o1 = F.scaled_dot_product_attention(q1, k1, value, is_causal=True)
    o2 = F.scaled_dot_product_attention(q2, k2, value, is_causal=True)
    return o1 - coefficient * o2
