"""BUG: the G query heads of a group are folded into the query axis with .view, which only works when Hkv == 1 and q is contiguous (RuntimeError otherwise)."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    group = hq // hkv
    # [B, T, Hkv, G, D] -> [B, Hkv, T*G, D]: row r is token r // G.
    qf = q.view(b, t, hkv, group, d).transpose(1, 2).view(b, hkv, t * group, d)
    kh = k.transpose(1, 2)
    vh = v.transpose(1, 2)
    s = qf @ kh.transpose(-1, -2) / math.sqrt(d)
    if causal:
        token = torch.arange(t * group)[:, None] // group
        s = s.masked_fill(torch.arange(t)[None, :] > token, float("-inf"))
    out = torch.softmax(s, dim=-1) @ vh  # [B, Hkv, T*G, D]
    return out.reshape(b, hkv, t, group, d).transpose(1, 2).reshape(b, t, hq, d)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
