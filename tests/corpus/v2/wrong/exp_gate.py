"""BUG: lambda = exp(lambda_logits), a V1-style exponential re-parameterisation, instead of sigmoid(lambda_logits)."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.reshape(b, t, hkv, hq // hkv, d)
    s = torch.einsum("btkgd,bskd->bkgts", qg, k) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bkgts,bskd->btkgd", s.softmax(-1), v)
    return out.reshape(b, t, hq, d)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    lam = torch.exp(lambda_logits).unsqueeze(-1)
    return a[:, :, 0::2] - lam * a[:, :, 1::2]
