"""BUG: when none of q1, k1, q2, k2 requires grad the tensor coefficient is turned into a Python float, so a trainable coefficient silently gets no gradient."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    trains_maps = any(t.requires_grad for t in (q1, k1, q2, k2))
    if isinstance(coefficient, torch.Tensor) and not trains_maps:
        coefficient = coefficient.item()  # maps are fixed: lambda is just a number
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
