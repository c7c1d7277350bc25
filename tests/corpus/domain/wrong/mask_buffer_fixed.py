"""BUG: causal mask precomputed for up to 256 tokens; the fallback for longer sequences uses tril(-1), hiding each query's own key."""
import math

import torch

MAX_LEN = 256
_CAUSAL = torch.ones(MAX_LEN, MAX_LEN, dtype=torch.bool).tril()


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _allowed(T):
    if T <= MAX_LEN:
        return _CAUSAL[:T, :T]
    return torch.ones(T, T, dtype=torch.bool).tril(-1)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        keep = _allowed(T)
        s1 = s1.masked_fill(~keep, -1e30)
        s2 = s2.masked_fill(~keep, -1e30)
    a1 = torch.softmax(s1, dim=-1)
    a2 = torch.softmax(s2, dim=-1)
    return (a1 - coefficient * a2) @ value
