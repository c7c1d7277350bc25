# style: einsum contractions and an additive bias matrix holding -inf above the diagonal
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    dots = torch.einsum("i,i->", q1, k1), torch.einsum("i,i->", q2, k2)
    return dots[0].exp() - dots[1].exp() + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    n, d = q1.size(-2), q1.size(-1)
    scale = 1.0 / math.sqrt(d)
    bias = torch.zeros(n, n, dtype=q1.dtype, device=q1.device)
    if causal:
        bias = torch.triu(torch.full_like(bias, -math.inf), diagonal=1)
    s1 = torch.einsum("bhid,bhjd->bhij", q1, k1) * scale + bias
    s2 = torch.einsum("bhid,bhjd->bhij", q2, k2) * scale + bias
    mixed = s1.softmax(-1) - coefficient * s2.softmax(-1)
    return torch.einsum("bhij,bhje->bhie", mixed, value)
