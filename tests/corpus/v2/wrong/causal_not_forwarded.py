"""BUG: the two maps come from two gqa_attention calls on the even and odd query heads, but causal is passed only to the first; the second always uses the default causal=True."""
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
    attn1 = gqa_attention(q[:, :, 0::2], k, v, causal)
    attn2 = gqa_attention(q[:, :, 1::2], k, v)
    return attn1 - torch.sigmoid(lambda_logits)[..., None] * attn2
