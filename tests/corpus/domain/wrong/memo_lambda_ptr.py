"""BUG: differential_lambda memoises its result by the four data_ptrs and lambda_init, so after an optimiser step updates the vectors in place the old lambda is returned."""
import torch

_LAMBDA_CACHE = {}


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    key = (q1.data_ptr(), k1.data_ptr(), q2.data_ptr(), k2.data_ptr(),
           float(lambda_init), torch.is_grad_enabled())
    if key not in _LAMBDA_CACHE:
        lam = torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init
        _LAMBDA_CACHE[key] = lam
    return _LAMBDA_CACHE[key]


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    T, D = q1.shape[-2:]
    s1 = q1 @ k1.transpose(-1, -2) / D ** 0.5
    s2 = q2 @ k2.transpose(-1, -2) / D ** 0.5
    if causal:
        fut = torch.ones(T, T, dtype=torch.bool).triu(1)
        s1 = s1.masked_fill(fut, float("-inf"))
        s2 = s2.masked_fill(fut, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value
