# tier: T1
# bug: Computes in NumPy and wraps the result with torch.from_numpy, losing the autograd graph.
import numpy as np
import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init


def _softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    a, b, c, d, v = (x.detach().numpy() for x in (q1, k1, q2, k2, value))
    lam = float(coefficient)
    t, width = a.shape[-2], a.shape[-1]
    mask = np.triu(np.full((t, t), -np.inf), 1) if causal else np.zeros((t, t))
    p1 = _softmax(a @ np.swapaxes(b, -1, -2) / np.sqrt(width) + mask)
    p2 = _softmax(c @ np.swapaxes(d, -1, -2) / np.sqrt(width) + mask)
    return torch.from_numpy(((p1 - lam * p2) @ v).astype(v.dtype))
