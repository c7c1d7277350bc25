"""BUG: torch.where(keep, exp(s - m), 0) evaluates exp on masked future logits; when those overflow the forward is fine but the gradient is 0 * inf = NaN."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _softmax(s, causal):
    if not causal:
        return torch.softmax(s, -1)
    T = s.shape[-1]
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    m = s.masked_fill(~keep, float("-inf")).amax(-1, keepdim=True)
    e = torch.where(keep, torch.exp(s - m), torch.zeros_like(s))
    return e / e.sum(-1, keepdim=True)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    D = q1.shape[-1]
    a1 = _softmax(q1 @ k1.transpose(-1, -2) / math.sqrt(D), causal)
    a2 = _softmax(q2 @ k2.transpose(-1, -2) / math.sqrt(D), causal)
    return (a1 - coefficient * a2) @ value
