"""BUG: flash-style loop over 64-key blocks rescales the running denominator but not the output accumulator when the running max grows."""
import math

import torch

BLOCK = 64


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _flash(q, k, v, causal):
    T = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    rows = torch.arange(T)[:, None]
    for s in range(0, T, BLOCK):
        e = min(s + BLOCK, T)
        logits = q @ k[..., s:e, :].transpose(-1, -2) * scale
        if causal:
            logits = logits.masked_fill(torch.arange(s, e)[None, :] > rows, -math.inf)
        m_new = torch.maximum(m, logits.amax(-1, keepdim=True))
        p = torch.exp(logits - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc + p @ v[..., s:e, :]
        m = m_new
    return acc / l


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    o1 = _flash(q1, k1, value, causal)
    o2 = _flash(q2, k2, value, causal)
    return o1 - coefficient * o2
