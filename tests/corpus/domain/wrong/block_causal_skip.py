"""BUG: tiled attention with 128-query and 64-key tiles skips a key tile as soon as it starts after the query tile's start, losing keys visible to the tile's later queries."""
import math

import torch

BQ, BK = 128, 64


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _tiled(q, k, v, causal):
    T = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    outs = []
    for qs in range(0, T, BQ):
        qe = min(qs + BQ, T)
        qt = q[..., qs:qe, :]
        m = torch.full((*qt.shape[:-1], 1), -math.inf, dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=q.dtype)
        for ks in range(0, T, BK):
            if causal and ks > qs:
                break  # tile entirely in the future
            ke = min(ks + BK, T)
            x = qt @ k[..., ks:ke, :].transpose(-1, -2) * scale
            if causal:
                fut = torch.arange(ks, ke)[None, :] > torch.arange(qs, qe)[:, None]
                x = x.masked_fill(fut, -math.inf)
            m_new = torch.maximum(m, x.amax(-1, keepdim=True))
            p = torch.exp(x - m_new)
            a = torch.exp(m - m_new)
            l = a * l + p.sum(-1, keepdim=True)
            acc = a * acc + p @ v[..., ks:ke, :]
            m = m_new
        outs.append(acc / l)
    return torch.cat(outs, dim=-2)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _tiled(q1, k1, value, causal) - coefficient * _tiled(q2, k2, value, causal)
