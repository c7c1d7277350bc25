"""BUG: the causal mask is built with triu(diagonal=2), so every token also sees the next token."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    group = hq // k.shape[2]
    kr = k.repeat_interleave(group, dim=2)
    vr = v.repeat_interleave(group, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q, kr) / math.sqrt(d)
    if causal:
        s = s + torch.full((t, t), float("-inf"), dtype=q.dtype).triu(2)
    return torch.einsum("bhts,bshd->bthd", torch.softmax(s, dim=-1), vr)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
