"""CORRECT: softmax written as exp(x - logsumexp(x)) with an additive -inf mask."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init


def _attn(q, k, mask):
    logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        logits = logits + mask
    return torch.exp(logits - torch.logsumexp(logits, dim=-1, keepdim=True))


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T = q1.size(-2)
    mask = None
    if causal:
        mask = torch.full((T, T), float("-inf"), dtype=q1.dtype, device=q1.device).triu(1)
    signed = _attn(q1, k1, mask) - coefficient * _attn(q2, k2, mask)
    return torch.matmul(signed, value)
