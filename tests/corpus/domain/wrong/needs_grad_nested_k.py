"""BUG: custom autograd Function computes each key gradient only inside its query's needs_input_grad branch, so a trainable key gets no gradient when its query is frozen."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _probs(q, k, causal):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return s.softmax(-1)


class DiffAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, v, c, causal):
        a1, a2 = _probs(q1, k1, causal), _probs(q2, k2, causal)
        ctx.save_for_backward(q1, k1, q2, k2, v, c, a1, a2)
        return (a1 - c * a2) @ v

    @staticmethod
    def backward(ctx, g):
        q1, k1, q2, k2, v, c, a1, a2 = ctx.saved_tensors
        need = ctx.needs_input_grad
        scale = 1.0 / math.sqrt(q1.shape[-1])
        dp = g @ v.transpose(-1, -2)
        dq1 = dk1 = dq2 = dk2 = dv = dc = None
        if need[4]:
            dv = (a1 - c * a2).transpose(-1, -2) @ g
        if need[5]:
            dc = -(dp * a2).sum().reshape(c.shape)
        if need[0]:
            ds1 = a1 * (dp - (dp * a1).sum(-1, keepdim=True)) * scale
            dq1 = ds1 @ k1
            if need[1]:
                dk1 = ds1.transpose(-1, -2) @ q1
        if need[2]:
            da2 = -c * dp
            ds2 = a2 * (da2 - (da2 * a2).sum(-1, keepdim=True)) * scale
            dq2 = ds2 @ k2
            if need[3]:
                dk2 = ds2.transpose(-1, -2) @ q2
        return dq1, dk1, dq2, dk2, dv, dc, None


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    c = torch.as_tensor(coefficient, dtype=q1.dtype)
    return DiffAttn.apply(q1, k1, q2, k2, value, c, causal)
