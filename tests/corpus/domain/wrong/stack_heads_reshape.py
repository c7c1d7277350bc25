"""BUG: per-head outputs are stacked head-major ([H, B, T, 2D]) and then reshaped to [B, H, T, 2D], which shuffles batches and heads when B > 1 and H > 1."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _one_head(q1, k1, q2, k2, v, c, causal):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - c * torch.softmax(s2, -1)) @ v


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    B, H, T, D = q1.shape
    heads = [
        _one_head(q1[:, h], k1[:, h], q2[:, h], k2[:, h], value[:, h], coefficient, causal)
        for h in range(H)
    ]
    return torch.stack(heads).reshape(B, H, T, 2 * D)
