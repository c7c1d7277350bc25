"""BUG: an optional `scale` parameter is inserted before `causal`, so a positional causal flag is taken as the scale (False -> scale 0, uniform attention) and causal stays True."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, scale=None, causal=True):
    T, D = q1.shape[-2:]
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    s1 = q1 @ k1.transpose(-1, -2) * scale
    s2 = q2 @ k2.transpose(-1, -2) * scale
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool, device=q1.device).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
