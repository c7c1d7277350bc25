# tier: T2
# bug: Normalises the difference of the two exponentiated maps jointly, not each map on its own.
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp((q1 * k1).sum()) - torch.exp((q2 * k2).sum()) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    d = q1.shape[-1]
    s1 = torch.einsum("...qd,...kd->...qk", q1, k1) / math.sqrt(d)
    s2 = torch.einsum("...qd,...kd->...qk", q2, k2) / math.sqrt(d)
    top = torch.maximum(s1.amax(-1, keepdim=True), s2.amax(-1, keepdim=True))
    e1, e2 = torch.exp(s1 - top), torch.exp(s2 - top)
    if causal:
        keep = torch.tril(torch.ones_like(e1))
        e1, e2 = e1 * keep, e2 * keep
    signed = e1 - coefficient * e2
    return (signed / signed.sum(-1, keepdim=True)) @ value
