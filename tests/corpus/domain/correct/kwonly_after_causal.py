"""CORRECT: keyword-only extras placed after causal; bmm over flattened batch-heads."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2, *, eps=0.0):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + (lambda_init + eps)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True, *, scale=None):
    B, H, T, D = q1.shape
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    flat = lambda x: x.reshape(B * H, T, x.shape[-1])
    l1 = torch.bmm(flat(q1), flat(k1).transpose(1, 2)) * scale
    l2 = torch.bmm(flat(q2), flat(k2).transpose(1, 2)) * scale
    if causal:
        m = torch.ones(T, T, dtype=torch.bool, device=q1.device).triu(diagonal=1)
        l1 = l1.masked_fill(m, float("-inf"))
        l2 = l2.masked_fill(m, float("-inf"))
    p = torch.softmax(l1, -1) - coefficient * torch.softmax(l2, -1)
    return torch.bmm(p, flat(value)).reshape(B, H, T, 2 * D)
