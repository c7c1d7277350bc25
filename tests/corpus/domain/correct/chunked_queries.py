"""CORRECT: queries processed in chunks of 48, each chunk sees keys up to its end."""
import math

import torch

CHUNK = 48


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return (q1 @ k1).exp() - (q2 @ k2).exp() + lambda_init


def _branch(q, k, v, causal):
    T = q.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    outs = []
    for s in range(0, T, CHUNK):
        e = min(s + CHUNK, T)
        kend = e if causal else T
        logits = q[..., s:e, :] @ k[..., :kend, :].transpose(-1, -2) * scale
        if causal:
            qi = torch.arange(s, e).unsqueeze(-1)
            kj = torch.arange(kend).unsqueeze(0)
            logits = logits.masked_fill(kj > qi, float("-inf"))
        outs.append(torch.softmax(logits, -1) @ v[..., :kend, :])
    return torch.cat(outs, dim=-2)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _branch(q1, k1, value, causal) - coefficient * _branch(q2, k2, value, causal)
