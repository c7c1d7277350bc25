"""CORRECT: torch scaled_dot_product_attention once per branch, outputs subtracted."""
import torch
import torch.nn.functional as F


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    lam1 = torch.exp(torch.sum(q1 * k1))
    lam2 = torch.exp(torch.sum(q2 * k2))
    return lam1 - lam2 + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    # (A1 - c A2) V == A1 V - c (A2 V)
    o1 = F.scaled_dot_product_attention(q1, k1, value, is_causal=causal)
    o2 = F.scaled_dot_product_attention(q2, k2, value, is_causal=causal)
    return o1 - coefficient * o2
