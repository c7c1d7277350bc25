"""CORRECT: trailing optional parameters after causal plus **kwargs; finfo.min mask; sum-based lambda."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2, **kwargs):
    a = torch.sum(q1 * k1)
    b = torch.sum(q2 * k2)
    return torch.exp(a) - torch.exp(b) + torch.as_tensor(lambda_init, dtype=a.dtype)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True, dropout=0.0, **kwargs):
    T = q1.shape[-2]
    neg = torch.finfo(q1.dtype).min
    scale = q1.shape[-1] ** -0.5
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), neg)
        maps.append(torch.softmax(s, dim=-1))
    return torch.matmul(maps[0], value) - coefficient * torch.matmul(maps[1], value)
