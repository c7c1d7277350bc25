"""CORRECT: manual stable softmax (detached row max taken after masking)."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    a = (q1 * k1).sum()
    b = (q2 * k2).sum()
    return a.exp() - b.exp() + lambda_init


def _softmax(x, causal):
    if causal:
        T = x.shape[-1]
        idx = torch.arange(T, device=x.device)
        x = x.masked_fill(idx[None, :] > idx[:, None], float("-inf"))
    x = x - x.amax(dim=-1, keepdim=True).detach()
    w = x.exp()
    return w / w.sum(dim=-1, keepdim=True)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    d = q1.shape[-1]
    a1 = _softmax(q1 @ k1.transpose(-1, -2) / math.sqrt(d), causal)
    a2 = _softmax(q2 @ k2.transpose(-1, -2) / math.sqrt(d), causal)
    return a1 @ value - (coefficient * a2) @ value
