"""CORRECT: softmax written as exp(s - logsumexp(s)); the gate as exp(logsigmoid(l)), which never overflows."""
import math

import torch
import torch.nn.functional as F


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    idx = torch.arange(hq, device=q.device) // (hq // hkv)
    kr = k.index_select(2, idx)
    vr = v.index_select(2, idx)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kr) / math.sqrt(d)
    if causal:
        bias = torch.zeros(t, t, dtype=q.dtype, device=q.device)
        bias = bias.masked_fill(torch.ones_like(bias, dtype=torch.bool).triu(1), -math.inf)
        s = s + bias
    p = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))
    return torch.einsum("bhqk,bkhd->bqhd", p, vr)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    lam = torch.exp(F.logsigmoid(lambda_logits))
    return a[:, :, 0::2] - lam.unsqueeze(-1) * a[:, :, 1::2]
