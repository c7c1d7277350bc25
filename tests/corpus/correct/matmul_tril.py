# style: torch.matmul / @ operators with a boolean tril mask applied through masked_fill
from __future__ import annotations

import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    t, d = q1.shape[-2], q1.shape[-1]
    logits1 = q1 @ k1.transpose(-2, -1) / math.sqrt(d)
    logits2 = q2 @ k2.transpose(-2, -1) / math.sqrt(d)
    if causal:
        keep = torch.ones(t, t, dtype=torch.bool, device=q1.device).tril()
        logits1 = logits1.masked_fill(~keep, float("-inf"))
        logits2 = logits2.masked_fill(~keep, float("-inf"))
    attn1 = torch.softmax(logits1, dim=-1)
    attn2 = torch.softmax(logits2, dim=-1)
    return (attn1 - coefficient * attn2) @ value
