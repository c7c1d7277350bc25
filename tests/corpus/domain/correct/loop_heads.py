"""CORRECT: explicit Python loops over batch and heads, stacked back together."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.inner(q1, k1)) - torch.exp(torch.inner(q2, k2)) + lambda_init


def _head(q, k, causal):
    s = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        n = s.shape[0]
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), -math.inf)
    s = s - s.max(dim=1, keepdim=True).values
    e = s.exp()
    return e / e.sum(dim=1, keepdim=True)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    B, H = q1.shape[0], q1.shape[1]
    batches = []
    for b in range(B):
        heads = []
        for h in range(H):
            a1 = _head(q1[b, h], k1[b, h], causal)
            a2 = _head(q2[b, h], k2[b, h], causal)
            heads.append((a1 - coefficient * a2) @ value[b, h])
        batches.append(torch.stack(heads))
    return torch.stack(batches)
