"""BUG: results cached by (data_ptr, _version, shape) per input; writes through .data do not bump _version, so updated parameters return a stale output."""
import math

import torch

_memo = {}


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _sig(x):
    if isinstance(x, torch.Tensor):
        return (x.data_ptr(), x._version, tuple(x.shape), tuple(x.stride()), x.requires_grad)
    return float(x)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    key = tuple(_sig(x) for x in (q1, k1, q2, k2, value, coefficient)) + (causal,)
    hit = _memo.get(key)
    if hit is not None and (hit.requires_grad or not torch.is_grad_enabled()):
        return hit
    T, D = q1.shape[-2:]
    s1 = torch.matmul(q1, k1.transpose(-1, -2)) / math.sqrt(D)
    s2 = torch.matmul(q2, k2.transpose(-1, -2)) / math.sqrt(D)
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    out = (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
    _memo.clear()
    _memo[key] = out
    return out
