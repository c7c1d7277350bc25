# style: explicit Python loop over query positions, each row only sees the keys it may attend to
from __future__ import annotations

import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init: float = 0.2):
    return (q1 * k1).sum().exp() - (q2 * k2).sum().exp() + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal: bool = True):
    seq, width = q1.shape[2], q1.shape[3]
    rows = []
    for i in range(seq):
        visible = i + 1 if causal else seq
        s1 = (k1[:, :, :visible] * q1[:, :, i : i + 1]).sum(-1) / math.sqrt(width)
        s2 = (k2[:, :, :visible] * q2[:, :, i : i + 1]).sum(-1) / math.sqrt(width)
        w1, w2 = torch.softmax(s1, -1), torch.softmax(s2, -1)
        weights = w1 - coefficient * w2  # [B, H, visible]
        rows.append((weights.unsqueeze(-1) * value[:, :, :visible]).sum(dim=2))
    return torch.stack(rows, dim=2)
