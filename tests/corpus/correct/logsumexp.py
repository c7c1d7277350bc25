# style: softmax written by hand as exp(s - logsumexp(s)), mask selected with torch.where
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.inner(q1, k1).exp() - torch.inner(q2, k2).exp() + lambda_init


def _normalise(s):
    return torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    length, dim = q1.shape[-2:]
    allowed = torch.tril(torch.ones(length, length, device=q1.device)).bool()
    maps = []
    for q, k in [(q1, k1), (q2, k2)]:
        s = q.matmul(k.transpose(-1, -2)) / math.sqrt(dim)
        if causal:
            s = torch.where(allowed, s, torch.tensor(-math.inf, dtype=s.dtype))
        maps.append(_normalise(s))
    return (maps[0] - maps[1] * coefficient).matmul(value)
