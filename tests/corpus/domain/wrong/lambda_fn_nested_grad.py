"""BUG: custom autograd Function for lambda computes k1's gradient only inside q1's needs_input_grad branch (and k2's inside q2's), so a trainable key gets none when its query is frozen."""
import math

import torch


class _Lambda(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, lambda_init):
        e1 = torch.exp(torch.dot(q1, k1))
        e2 = torch.exp(torch.dot(q2, k2))
        ctx.save_for_backward(q1, k1, q2, k2, e1, e2)
        return e1 - e2 + lambda_init

    @staticmethod
    def backward(ctx, g):
        q1, k1, q2, k2, e1, e2 = ctx.saved_tensors
        dq1 = dk1 = dq2 = dk2 = None
        if ctx.needs_input_grad[0]:
            dq1 = g * e1 * k1
            if ctx.needs_input_grad[1]:
                dk1 = g * e1 * q1
        if ctx.needs_input_grad[2]:
            dq2 = -g * e2 * k2
            if ctx.needs_input_grad[3]:
                dk2 = -g * e2 * q2
        return dq1, dk1, dq2, dk2, None


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return _Lambda.apply(q1, k1, q2, k2, lambda_init)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D)
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
