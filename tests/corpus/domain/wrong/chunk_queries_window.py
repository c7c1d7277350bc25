"""BUG: queries are processed in chunks of 64 but each chunk only attends to keys inside its own chunk, dropping earlier keys for every chunk after the first."""
import math

import torch

CHUNK = 64


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _branch(q, k, v, causal):
    T = q.shape[-2]
    out = []
    for s in range(0, T, CHUNK):
        e = min(s + CHUNK, T)
        ks, ke = (s, e) if causal else (0, T)
        logits = q[..., s:e, :] @ k[..., ks:ke, :].transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            n = e - s
            logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        out.append(torch.softmax(logits, dim=-1) @ v[..., ks:ke, :])
    return torch.cat(out, dim=-2)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _branch(q1, k1, value, causal) - coefficient * _branch(q2, k2, value, causal)
