"""BUG: batch and head axes are merged with as_strided(..., storage_offset=0), which reads the wrong memory for views with a non-zero storage offset (e.g. slices of a fused projection)."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _merge_bh(x):
    B, H, T, W = x.shape
    if x.stride(0) == H * x.stride(1):
        # heads evenly spaced in memory: merge B and H without copying
        return torch.as_strided(x, (B * H, T, W), (x.stride(1), x.stride(2), x.stride(3)), 0)
    return x.reshape(B * H, T, W)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    B, H, T, D = q1.shape
    q1, k1, q2, k2, v = (_merge_bh(x) for x in (q1, k1, q2, k2, value))
    s1 = torch.bmm(q1, k1.transpose(1, 2)) / math.sqrt(D)
    s2 = torch.bmm(q2, k2.transpose(1, 2)) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    p = torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)
    return torch.bmm(p, v).reshape(B, H, T, 2 * D)
