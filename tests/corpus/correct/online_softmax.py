# style: streams over blocks of keys with a running maximum and running denominator (flash-style)
from __future__ import annotations

import math

import torch

BLOCK = 2


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.matmul(q1, k1)) + lambda_init - torch.exp(torch.matmul(q2, k2))


def _stream(q, k, v, causal):
    """Return softmax(q k^T / sqrt(D) + M) v without materialising the full map."""
    t = q.shape[-2]
    q = q / math.sqrt(q.shape[-1])
    running_max = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype, device=q.device)
    denom = torch.zeros_like(running_max)
    acc = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=v.dtype, device=v.device)
    for start in range(0, t, BLOCK):
        stop = min(start + BLOCK, t)
        s = q @ k[..., start:stop, :].transpose(-1, -2)
        if causal:
            key_pos = torch.arange(start, stop, device=q.device)
            too_late = key_pos[None, :] > torch.arange(t, device=q.device)[:, None]
            s = s.masked_fill(too_late, -math.inf)
        new_max = torch.maximum(running_max, s.amax(dim=-1, keepdim=True))
        decay = torch.exp(running_max - new_max)  # block 0 always holds key 0, so new_max is finite
        p = torch.exp(s - new_max)
        denom = denom * decay + p.sum(dim=-1, keepdim=True)
        acc = acc * decay + p @ v[..., start:stop, :]
        running_max = new_max
    return acc / denom


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _stream(q1, k1, value, causal) - coefficient * _stream(q2, k2, value, causal)
