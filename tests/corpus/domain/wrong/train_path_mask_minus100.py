"""BUG: the training path (grad enabled) masks future keys by adding -100 instead of -inf, so with large logits future tokens leak into both maps."""
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    fut = torch.ones(T, T, dtype=torch.bool).triu(1)
    if torch.is_grad_enabled():
        # finite bias keeps gradients NaN-free during training
        bias = torch.zeros(T, T, dtype=q1.dtype).masked_fill(fut, -100.0)
    else:
        bias = torch.zeros(T, T, dtype=q1.dtype).masked_fill(fut, float("-inf"))
    if not causal:
        bias = torch.zeros_like(bias)
    a1 = torch.softmax(q1 @ k1.mT / math.sqrt(D) + bias, -1)
    a2 = torch.softmax(q2 @ k2.mT / math.sqrt(D) + bias, -1)
    return (a1 - coefficient * a2) @ value
