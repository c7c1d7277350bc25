# style: stacks both branches on a new leading axis so one masked softmax serves both maps
from __future__ import annotations

import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    e = torch.stack([q1 @ k1, q2 @ k2]).exp()
    return e[0] - e[1] + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    queries = torch.stack((q1, q2))  # [2, B, H, T, D]
    keys = torch.stack((k1, k2))
    logits = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    if causal:
        n = logits.shape[-1]
        visible = torch.ones(n, n, dtype=torch.bool, device=logits.device).tril_()
        logits = torch.where(visible, logits, logits.new_tensor(float("-inf")))
    maps = logits.softmax(dim=-1)
    signed = maps[0] - coefficient * maps[1]
    return signed @ value
