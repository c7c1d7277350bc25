"""CORRECT: flash-style online softmax over key blocks of 32 with rescaling."""
import math

import torch

BLOCK = 32


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return (q1 * k1).sum().exp() - (q2 * k2).sum().exp() + lambda_init


def _online(q, k, v, causal):
    T = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    qi = torch.arange(T).unsqueeze(1)
    for start in range(0, T, BLOCK):
        end = min(start + BLOCK, T)
        s = q @ k[..., start:end, :].transpose(-1, -2) * scale
        if causal:
            s = s.masked_fill(torch.arange(start, end) > qi, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        # rows whose keys in this block are all masked keep m = -inf until later
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        alpha = torch.exp(m - safe)
        l = alpha * l + p.sum(-1, keepdim=True)
        acc = alpha * acc + p @ v[..., start:end, :]
        m = m_new
    return acc / l


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _online(q1, k1, value, causal) - coefficient * _online(q2, k2, value, causal)
