"""CORRECT: explicit Python loops over query heads and over pairs, max-shifted softmax by hand."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    t, hq, d = q.shape[1], q.shape[2], q.shape[3]
    group = hq // k.shape[2]
    visible = torch.ones(t, t, dtype=torch.bool, device=q.device)
    if causal:
        visible = visible.tril()
    heads = []
    for h in range(hq):
        kv = h // group
        s = torch.matmul(q[:, :, h, :], k[:, :, kv, :].transpose(1, 2)) / math.sqrt(d)
        s = s.masked_fill(~visible, float("-inf"))
        s = s - s.amax(dim=-1, keepdim=True).detach()
        e = torch.exp(s)
        p = e / e.sum(dim=-1, keepdim=True)
        heads.append(torch.matmul(p, v[:, :, kv, :]))
    return torch.stack(heads, dim=2)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    outs = []
    for i in range(q.shape[2] // 2):
        lam = torch.sigmoid(lambda_logits[:, :, i]).unsqueeze(-1)
        outs.append(a[:, :, 2 * i] - lam * a[:, :, 2 * i + 1])
    return torch.stack(outs, dim=2)
