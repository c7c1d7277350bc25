"""BUG: the row maximum is taken before the causal mask, so when a hidden future key's logit exceeds every visible one by more than ~100 (float32) all visible exponentials underflow and the row is 0/0 = NaN."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    group = hq // k.shape[2]
    kr = k.repeat_interleave(group, dim=2)
    vr = v.repeat_interleave(group, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q, kr) / math.sqrt(d)
    s = s - s.amax(dim=-1, keepdim=True).detach()
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    e = torch.exp(s)
    p = e / e.sum(dim=-1, keepdim=True)
    return torch.einsum("bhts,bshd->bthd", p, vr)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
