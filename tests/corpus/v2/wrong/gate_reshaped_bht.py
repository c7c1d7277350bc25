"""BUG: lambda_logits is read as if it were stored [B, H, T] (reshape then transpose), which scrambles tokens and heads."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    group = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    b, t, hq, d = q.shape
    a = gqa_attention(q, k, v, causal)
    lam = torch.sigmoid(lambda_logits).reshape(b, hq // 2, t).transpose(1, 2)
    return a[:, :, 0::2] - lam.unsqueeze(-1) * a[:, :, 1::2]
