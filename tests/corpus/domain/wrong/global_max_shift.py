"""BUG: the softmax shift uses the maximum over the whole logits tensor instead of per row, so rows far below the global max underflow to 0/0 in float32."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _softmax(s, causal):
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    e = torch.exp(s - s.max())
    return e / e.sum(dim=-1, keepdim=True)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    D = q1.shape[-1]
    a1 = _softmax(q1 @ k1.transpose(-1, -2) / math.sqrt(D), causal)
    a2 = _softmax(q2 @ k2.transpose(-1, -2) / math.sqrt(D), causal)
    return (a1 - coefficient * a2) @ value
