"""BUG: the lambda exponents are clamped to [-10, 10] to 'avoid overflow', which changes lambda and zeroes its gradients once a dot product leaves that range."""
import math

import torch

_EXP_RANGE = 10.0


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    a = torch.dot(q1, k1).clamp(-_EXP_RANGE, _EXP_RANGE)
    b = torch.dot(q2, k2).clamp(-_EXP_RANGE, _EXP_RANGE)
    return torch.exp(a) - torch.exp(b) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
