"""BUG: online softmax over key blocks of 8 that updates the running max but never rescales the running sum and accumulator by exp(m_old - m_new)."""
import math

import torch

BLOCK = 8


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    group = hq // k.shape[2]
    qh = q.transpose(1, 2) / math.sqrt(d)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    rows = torch.arange(t)[:, None]
    m = torch.full((b, hq, t, 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros((b, hq, t, 1), dtype=q.dtype)
    acc = torch.zeros((b, hq, t, d), dtype=q.dtype)
    for start in range(0, t, BLOCK):
        stop = min(start + BLOCK, t)
        s = qh @ kh[:, :, start:stop].transpose(-1, -2)
        if causal:
            s = s.masked_fill(torch.arange(start, stop)[None, :] > rows, float("-inf"))
        m = torch.maximum(m, s.amax(dim=-1, keepdim=True)).detach()
        p = torch.exp(s - m)
        l = l + p.sum(dim=-1, keepdim=True)
        acc = acc + p @ vh[:, :, start:stop]
    return (acc / l).transpose(1, 2)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - torch.sigmoid(lambda_logits)[..., None] * a[:, :, 1::2]
