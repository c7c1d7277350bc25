"""BUG: when q does not require grad (inference), the queries are scaled in place through a transposed view (mul_) to save memory, which modifies the caller's q."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    group = q.shape[2] // k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    qh = q.transpose(1, 2)
    if q.requires_grad:
        qh = qh * scale
    else:
        qh.mul_(scale)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    scores = qh @ kh.transpose(-1, -2)
    if causal:
        n = q.shape[1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
