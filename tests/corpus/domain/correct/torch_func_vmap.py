"""CORRECT: per-head function vectorised with torch.func.vmap over batch and heads."""
import math

import torch
from torch.func import vmap


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    dots = torch.stack([q1 @ k1, q2 @ k2])
    return dots.exp()[0] - dots.exp()[1] + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    bias = torch.zeros(T, T, dtype=q1.dtype)
    if causal:
        bias = bias.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    c = coefficient

    def one_head(a, b, x, y, v):
        p1 = torch.softmax(a @ b.T / math.sqrt(D) + bias, -1)
        p2 = torch.softmax(x @ y.T / math.sqrt(D) + bias, -1)
        return (p1 - c * p2) @ v

    return vmap(vmap(one_head))(q1, k1, q2, k2, value)
