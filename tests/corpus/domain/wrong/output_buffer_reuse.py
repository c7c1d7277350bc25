"""BUG: under no_grad the result is written into a module-level preallocated buffer and returned, so the next inference call overwrites tensors handed out earlier."""
import math

import torch

_buf = None


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    global _buf
    T, D = q1.shape[-2:]
    scale = 1.0 / math.sqrt(D)
    s1 = torch.matmul(q1, k1.transpose(-2, -1)) * scale
    s2 = torch.matmul(q2, k2.transpose(-2, -1)) * scale
    if causal:
        fut = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        s1 = s1.masked_fill(fut, -math.inf)
        s2 = s2.masked_fill(fut, -math.inf)
    p = torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)
    if torch.is_grad_enabled():
        return p @ value
    # inference: avoid allocating a new output every step
    if _buf is None or _buf.shape != value.shape or _buf.dtype != value.dtype:
        _buf = torch.empty_like(value, memory_format=torch.contiguous_format)
    torch.matmul(p, value, out=_buf)
    return _buf
