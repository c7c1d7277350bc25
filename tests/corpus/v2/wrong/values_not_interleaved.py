"""BUG: the keys are grouped with repeat_interleave but the values with expand over a leading group axis, so query head h reads values of head h % Hkv."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    group = hq // hkv
    kr = k.repeat_interleave(group, dim=2)
    vr = v.unsqueeze(2).expand(b, t, group, hkv, d).reshape(b, t, hq, d)
    s = torch.einsum("bthd,bshd->bhts", q, kr) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhts,bshd->bthd", s.softmax(-1), vr)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
