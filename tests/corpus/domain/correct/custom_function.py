"""CORRECT: custom autograd.Function with a hand-written full backward."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _probs(q, k, causal):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1)


class _DiffAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, v, c, causal):
        a1, a2 = _probs(q1, k1, causal), _probs(q2, k2, causal)
        ctx.save_for_backward(q1, k1, q2, k2, v, c, a1, a2)
        return (a1 - c * a2) @ v

    @staticmethod
    def backward(ctx, g):
        q1, k1, q2, k2, v, c, a1, a2 = ctx.saved_tensors
        scale = 1.0 / math.sqrt(q1.shape[-1])
        need = ctx.needs_input_grad
        dp = g @ v.transpose(-1, -2)
        grads = [None] * 7
        if need[4]:
            grads[4] = (a1 - c * a2).transpose(-1, -2) @ g
        if need[5]:
            grads[5] = -(dp * a2).sum().reshape(c.shape)
        for i, (a, da, q, k) in enumerate(((a1, dp, q1, k1), (a2, -c * dp, q2, k2))):
            ds = a * (da - (da * a).sum(-1, keepdim=True)) * scale
            if need[2 * i]:
                grads[2 * i] = ds @ k
            if need[2 * i + 1]:
                grads[2 * i + 1] = ds.transpose(-1, -2) @ q
        return tuple(grads)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    if not isinstance(coefficient, torch.Tensor):
        coefficient = torch.tensor(float(coefficient), dtype=q1.dtype)
    return _DiffAttn.apply(q1, k1, q2, k2, value, coefficient.to(q1.dtype), causal)
