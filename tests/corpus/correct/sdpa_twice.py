# style: two calls to torch.nn.functional.scaled_dot_product_attention, combined linearly afterwards
import torch
import torch.nn.functional as F


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    # sdpa already divides by sqrt(D) of the queries; (A1 - c A2) V == A1 V - c A2 V.
    out1 = F.scaled_dot_product_attention(q1, k1, value, is_causal=causal)
    out2 = F.scaled_dot_product_attention(q2, k2, value, is_causal=causal)
    return out1 - coefficient * out2
