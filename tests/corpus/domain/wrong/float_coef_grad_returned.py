"""BUG: custom autograd Function passes a Python-float coefficient straight to apply() and always returns its gradient, so backward raises whenever the coefficient is a float or int."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _probs(q, k, causal):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, -1)


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, v, c, causal):
        a1, a2 = _probs(q1, k1, causal), _probs(q2, k2, causal)
        ctx.save_for_backward(q1, k1, q2, k2, v, a1, a2)
        ctx.c = c
        return (a1 - c * a2) @ v

    @staticmethod
    def backward(ctx, g):
        q1, k1, q2, k2, v, a1, a2 = ctx.saved_tensors
        c = ctx.c
        scale = q1.shape[-1] ** -0.5
        dp = g @ v.transpose(-1, -2)
        dv = (a1 - c * a2).transpose(-1, -2) @ g
        dc = -(dp * a2).sum()
        ds1 = a1 * (dp - (dp * a1).sum(-1, keepdim=True)) * scale
        da2 = -c * dp
        ds2 = a2 * (da2 - (da2 * a2).sum(-1, keepdim=True)) * scale
        return (ds1 @ k1, ds1.transpose(-1, -2) @ q1, ds2 @ k2, ds2.transpose(-1, -2) @ q2,
                dv, dc, None)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _Fn.apply(q1, k1, q2, k2, value, coefficient, causal)
