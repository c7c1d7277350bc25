"""CORRECT: einsum attention and einsum dot products for lambda."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    a = torch.einsum("d,d->", q1, k1)
    b = torch.einsum("d,d->", q2, k2)
    return torch.exp(a) - torch.exp(b) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2], q1.shape[-1]
    s1 = torch.einsum("bhid,bhjd->bhij", q1, k1) / math.sqrt(D)
    s2 = torch.einsum("bhid,bhjd->bhij", q2, k2) / math.sqrt(D)
    if causal:
        keep = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q1.device))
        s1 = torch.where(keep, s1, float("-inf"))
        s2 = torch.where(keep, s2, float("-inf"))
    p = s1.softmax(-1) - coefficient * s2.softmax(-1)
    return torch.einsum("bhij,bhje->bhie", p, value)
