"""BUG: the softmax output is zeroed in place at the future keys (masked_fill_) "to be safe"; softmax's backward needs that output, so backward raises when causal=True."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    group = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    n = q.shape[1]
    hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
    if causal:
        scores = scores.masked_fill(hidden, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if causal:
        weights.masked_fill_(hidden, 0.0)
    return (weights @ vh).transpose(1, 2)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
