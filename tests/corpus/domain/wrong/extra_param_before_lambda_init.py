"""BUG: a `temperature` parameter is inserted before `lambda_init`, so a positional lambda_init divides the dot products instead of being added."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, temperature=1.0, lambda_init=0.2):
    a = torch.dot(q1, k1) / temperature
    b = torch.dot(q2, k2) / temperature
    return torch.exp(a) - torch.exp(b) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (s1.softmax(-1) - coefficient * s2.softmax(-1)) @ value
