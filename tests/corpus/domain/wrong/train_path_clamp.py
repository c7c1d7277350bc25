"""BUG: when grad is enabled and an input requires grad, a 'stable training' path clamps the scaled logits to [-30, 30], changing the forward (and its exact backward) for large logits."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _maps(q, k, causal, clamp):
    T, D = q.shape[-2:]
    s = q @ k.transpose(-1, -2) / math.sqrt(D)
    if clamp:
        s = s.clamp(-30.0, 30.0)  # keep exp() well-behaved for the backward pass
    if causal:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    training = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in (q1, k1, q2, k2, value, coefficient))
    a1 = _maps(q1, k1, causal, training)
    a2 = _maps(q2, k2, causal, training)
    return (a1 - coefficient * a2) @ value
