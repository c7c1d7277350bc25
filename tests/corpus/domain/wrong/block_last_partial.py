"""BUG: key-block count is T // 128 (at least 1), so the trailing partial block of keys is dropped whenever T > 128 is not a multiple of 128."""
import math

import torch

BLOCK = 128


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _attend(q, k, v, causal):
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5
    n_blocks = max(1, T // BLOCK)
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)
    den = torch.zeros_like(m)
    num = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    qpos = torch.arange(T).unsqueeze(1)
    for b in range(n_blocks):
        s, e = b * BLOCK, min((b + 1) * BLOCK, T)
        x = q @ k[..., s:e, :].transpose(-1, -2) * scale
        if causal:
            x = x.masked_fill(torch.arange(s, e).unsqueeze(0) > qpos, float("-inf"))
        m_new = torch.maximum(m, x.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(x - m_new)
        den = den * alpha + p.sum(-1, keepdim=True)
        num = num * alpha + p @ v[..., s:e, :]
        m = m_new
    return num / den


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _attend(q1, k1, value, causal) - coefficient * _attend(q2, k2, value, causal)
