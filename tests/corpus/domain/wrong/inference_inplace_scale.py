"""BUG: the no_grad path saves memory by scaling q1 and q2 in place by 1/sqrt(D), modifying the caller's tensors so repeated inference calls drift."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    scale = 1.0 / math.sqrt(D)
    if torch.is_grad_enabled():
        q1 = q1 * scale
        q2 = q2 * scale
    else:
        q1.mul_(scale)  # inference only: no autograd history to corrupt
        q2.mul_(scale)
    s1 = q1 @ k1.transpose(-1, -2)
    s2 = q2 @ k2.transpose(-1, -2)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
