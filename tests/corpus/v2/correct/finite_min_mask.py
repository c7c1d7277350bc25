"""CORRECT: masked logits set to torch.finfo(dtype).min (no -inf anywhere), manual max-shifted softmax."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    group = hq // hkv
    qh = q.permute(0, 2, 1, 3).reshape(b, hkv, group, t, d)
    kh = k.permute(0, 2, 1, 3).unsqueeze(2)  # [B, Hkv, 1, T, D] broadcasts over the group
    vh = v.permute(0, 2, 1, 3).unsqueeze(2)
    s = torch.matmul(qh, kh.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=q.device), diagonal=1)
        # The diagonal is never masked, so the row maximum is a real logit and
        # exp(finfo.min - max) is exactly 0: the result equals the -inf version.
        s = s.masked_fill(future, torch.finfo(s.dtype).min)
    s = s - s.max(dim=-1, keepdim=True).values
    e = s.exp()
    p = e / e.sum(dim=-1, keepdim=True)
    out = torch.matmul(p, vh)  # [B, Hkv, G, T, D]
    return out.reshape(b, hq, t, d).permute(0, 2, 1, 3)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    b, t, hq, d = a.shape
    a = a.unflatten(2, (hq // 2, 2))
    return a.select(3, 0) - torch.sigmoid(lambda_logits).unsqueeze(-1) * a.select(3, 1)
