# style: a torch.autograd.Function whose backward pass is derived and written by hand
from __future__ import annotations

import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return q1.dot(k1).exp() - q2.dot(k2).exp() + lambda_init


def _softmax_rows(q, k, scale, causal):
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        t = s.shape[-1]
        upper = torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(upper, -math.inf)
    return torch.softmax(s, -1)


class DiffAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, value, lam, causal):
        scale = 1.0 / math.sqrt(q1.shape[-1])
        a1 = _softmax_rows(q1, k1, scale, causal)
        a2 = _softmax_rows(q2, k2, scale, causal)
        ctx.scale = scale
        ctx.save_for_backward(q1, k1, q2, k2, value, lam, a1, a2)
        return torch.matmul(a1 - lam * a2, value)

    @staticmethod
    def backward(ctx, grad_out):
        q1, k1, q2, k2, value, lam, a1, a2 = ctx.saved_tensors
        grad_value = torch.matmul((a1 - lam * a2).transpose(-2, -1), grad_out)
        grad_map = torch.matmul(grad_out, value.transpose(-2, -1))  # dL/dP
        grad_lam = -(grad_map * a2).sum().to(lam.dtype) if ctx.needs_input_grad[5] else None
        ds1 = a1 * (grad_map - (grad_map * a1).sum(-1, keepdim=True)) * ctx.scale
        ds2 = -lam * a2 * (grad_map - (grad_map * a2).sum(-1, keepdim=True)) * ctx.scale
        return (
            torch.matmul(ds1, k1),
            torch.matmul(ds1.transpose(-2, -1), q1),
            torch.matmul(ds2, k2),
            torch.matmul(ds2.transpose(-2, -1), q2),
            grad_value,
            grad_lam,
            None,
        )


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    if not torch.is_tensor(coefficient):
        coefficient = torch.tensor(float(coefficient), dtype=value.dtype, device=value.device)
    return DiffAttention.apply(q1, k1, q2, k2, value, coefficient, causal)
