"""CORRECT: float64 internals with a finite -1e9 mask, cast back to the input dtype."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    a = torch.dot(q1.double(), k1.double())
    b = torch.dot(q2.double(), k2.double())
    return (a.exp() - b.exp() + lambda_init).to(q1.dtype)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    dtype = q1.dtype
    q1, k1, q2, k2, v = (x.double() for x in (q1, k1, q2, k2, value))
    if isinstance(coefficient, torch.Tensor):
        coefficient = coefficient.double()
    T, D = q1.shape[-2:]
    bias = torch.zeros(T, T, dtype=torch.float64)
    if causal:
        bias = bias.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -1e9)
    w1 = torch.softmax(q1 @ k1.mT / math.sqrt(D) + bias, dim=-1)
    w2 = torch.softmax(q2 @ k2.mT / math.sqrt(D) + bias, dim=-1)
    return ((w1 - coefficient * w2) @ v).to(dtype)
