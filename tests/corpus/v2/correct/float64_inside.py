"""CORRECT: everything computed in float64 (mask with a finite -1e300), result cast back to the input dtype."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    dtype = q.dtype
    q64, k64, v64 = q.double(), k.double(), v.double()
    b, t, hq, d = q.shape
    group = hq // k.shape[2]
    k64 = torch.repeat_interleave(k64, group, dim=2)
    v64 = torch.repeat_interleave(v64, group, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q64, k64) / math.sqrt(d)
    if causal:
        future = torch.arange(t, device=q.device)[None, :] > torch.arange(t, device=q.device)[:, None]
        s = torch.where(future, torch.full_like(s, -1e300), s)
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bhts,bshd->bthd", p, v64).to(dtype)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q.double(), k.double(), v.double(), causal)
    lam = torch.sigmoid(lambda_logits.double())
    return (a[:, :, 0::2] - lam[..., None] * a[:, :, 1::2]).to(q.dtype)
