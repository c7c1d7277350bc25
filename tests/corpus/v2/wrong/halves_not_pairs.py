"""BUG: the two maps are taken as the first and second half of the query heads (torch.chunk) instead of the even/odd neighbours 2i, 2i+1."""
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
    attn1, attn2 = torch.chunk(gqa_attention(q, k, v, causal), 2, dim=2)
    return attn1 - torch.sigmoid(lambda_logits).unsqueeze(-1) * attn2
