"""BUG: when value does not require grad the function assumes inference and runs under no_grad, so trainable queries, keys and coefficient get no gradient."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _forward(q1, k1, q2, k2, value, coefficient, causal):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    if not value.requires_grad:
        # frozen values: nothing to train here, skip building the graph
        with torch.no_grad():
            return _forward(q1, k1, q2, k2, value, coefficient, causal)
    return _forward(q1, k1, q2, k2, value, coefficient, causal)
