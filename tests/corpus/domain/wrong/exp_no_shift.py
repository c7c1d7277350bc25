"""BUG: softmax computed as exp(s) / sum(exp(s)) without subtracting the row max, which overflows to inf/inf = NaN for float32 logits above ~88."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _attn(q, k, causal):
    T, D = q.shape[-2:]
    e = torch.exp(q @ k.transpose(-1, -2) / math.sqrt(D))
    if causal:
        e = e * torch.ones(T, T, dtype=e.dtype).tril()
    return e / e.sum(-1, keepdim=True)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return (_attn(q1, k1, causal) - coefficient * _attn(q2, k2, causal)) @ value
