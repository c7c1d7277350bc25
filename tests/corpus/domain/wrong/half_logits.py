"""BUG: for long sequences (T >= 64) the QK^T products are computed in float16 to save memory, so large logits lose several bits and the maps are visibly wrong."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    dt = q1.dtype
    lp = torch.float16 if T >= 64 else dt  # the T x T logits dominate memory
    s1 = (q1.to(lp) @ k1.to(lp).transpose(-1, -2)).to(dt) / math.sqrt(D)
    s2 = (q2.to(lp) @ k2.to(lp).transpose(-1, -2)).to(dt) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
