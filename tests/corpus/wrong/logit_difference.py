# tier: T2
# bug: Subtracts the logits before a single softmax, softmax(S1 - lambda*S2), not two maps.
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(q1.dot(k1)) - torch.exp(q2.dot(k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    t = q1.shape[-2]
    root_d = math.sqrt(q1.shape[-1])
    s1 = q1 @ k1.transpose(-2, -1) / root_d
    s2 = q2 @ k2.transpose(-2, -1) / root_d
    s = s1 - coefficient * s2  # "differential" logits
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ value
