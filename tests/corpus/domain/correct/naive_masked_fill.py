"""CORRECT: plain matmul, masked_fill(-inf) and torch.softmax."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2], q1.shape[-1]
    scale = 1.0 / math.sqrt(D)
    s1 = q1 @ k1.transpose(-2, -1) * scale
    s2 = q2 @ k2.transpose(-2, -1) * scale
    if causal:
        future = torch.ones(T, T, dtype=torch.bool, device=q1.device).triu(1)
        s1 = s1.masked_fill(future, float("-inf"))
        s2 = s2.masked_fill(future, float("-inf"))
    a1 = torch.softmax(s1, dim=-1)
    a2 = torch.softmax(s2, dim=-1)
    return (a1 - coefficient * a2) @ value
