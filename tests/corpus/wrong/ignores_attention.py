# tier: T2
# bug: Returns (1 - coefficient) * value without computing either attention map: it satisfies every identity of the signed map (row sums, cancellation) and nothing else.
import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(q1.dot(k1)) - torch.exp(q2.dot(k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return (1 - coefficient) * value + 0 * (q1.sum() + k1.sum() + q2.sum() + k2.sum())
