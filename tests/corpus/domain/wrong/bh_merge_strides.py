"""BUG: batch and heads are merged with as_strided using stride(1) for the merged axis, which assumes stride(0) == H * stride(1) and mixes batches for permuted [B, T, H, D] views when B > 1."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _flat(x):
    # .view() fails on strided inputs, so build the [B*H, T, W] view by hand
    B, H, T, W = x.shape
    return x.as_strided((B * H, T, W), (x.stride(1), x.stride(2), x.stride(3)), x.storage_offset())


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    B, H, T, D = q1.shape
    l1 = _flat(q1) @ _flat(k1).transpose(1, 2) / math.sqrt(D)
    l2 = _flat(q2) @ _flat(k2).transpose(1, 2) / math.sqrt(D)
    if causal:
        fut = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        l1 = l1.masked_fill(fut, float("-inf"))
        l2 = l2.masked_fill(fut, float("-inf"))
    out = (l1.softmax(-1) - coefficient * l2.softmax(-1)) @ _flat(value)
    return out.reshape(B, H, T, 2 * D)
