"""CORRECT: both branches stacked on a new leading axis, one softmax, signed weights."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    q = torch.stack([q1, q2])
    k = torch.stack([k1, k2])
    e = (q * k).sum(-1).exp()
    return e[0] - e[1] + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    q = torch.stack([q1, q2])            # [2, B, H, T, D]
    k = torch.stack([k1, k2])
    T, D = q.shape[-2:]
    logits = q @ k.transpose(-1, -2) * D ** -0.5
    if causal:
        logits = logits.masked_fill(
            torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), 1), -torch.inf)
    attn = logits.softmax(dim=-1)
    c = torch.as_tensor(coefficient, dtype=q.dtype, device=q.device)
    sign = torch.stack([torch.ones_like(c), -c]).reshape(2, 1, 1, 1, 1)
    return ((attn * sign).sum(0)) @ value
