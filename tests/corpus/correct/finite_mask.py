# style: finite mask value torch.finfo(dtype).min built from index comparisons instead of -inf
from __future__ import annotations

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    first = torch.exp(torch.sum(q1 * k1))
    return first - torch.exp(torch.sum(q2 * k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    t, d = q1.shape[-2:]
    rows = torch.arange(t, device=q1.device).unsqueeze(1)
    cols = torch.arange(t, device=q1.device).unsqueeze(0)
    future = cols > rows
    weights = []
    for q, k in ((q1, k1), (q2, k2)):
        s = torch.matmul(q, k.transpose(2, 3)) / d**0.5
        if causal:
            s = s.masked_fill(future, torch.finfo(s.dtype).min)
        weights.append(torch.softmax(s, dim=3))
    return torch.matmul(weights[0] - coefficient * weights[1], value)
