"""BUG: the gated pair is interleaved back into 2H heads (stack + flatten) but never summed, so the output has shape [B, T, 2H, D]."""
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
    a = gqa_attention(q, k, v, causal)
    lam = torch.sigmoid(lambda_logits)[..., None]
    signed = torch.stack((a[:, :, 0::2], -lam * a[:, :, 1::2]), dim=3)
    return signed.flatten(2, 3)
