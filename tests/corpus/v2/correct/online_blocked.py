"""CORRECT: online (flash-style) softmax over key blocks of 4 with running max and rescaling; tanh form of the sigmoid."""
import math

import torch

BLOCK = 4


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    group = hq // k.shape[2]
    qh = q.transpose(1, 2) * (1.0 / math.sqrt(d))
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    rows = torch.arange(t, device=q.device)[:, None]
    m = torch.full((b, hq, t, 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros((b, hq, t, 1), dtype=q.dtype, device=q.device)
    acc = torch.zeros((b, hq, t, d), dtype=q.dtype, device=q.device)
    for start in range(0, t, BLOCK):
        stop = min(start + BLOCK, t)
        s = qh @ kh[:, :, start:stop].transpose(-1, -2)
        if causal:
            cols = torch.arange(start, stop, device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        # Key 0 is in the first block and visible to every query, so m is
        # finite from the first block on and no exp(-inf - -inf) occurs.
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True)).detach()
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = alpha * l + p.sum(dim=-1, keepdim=True)
        acc = alpha * acc + p @ vh[:, :, start:stop]
        m = m_new
    return (acc / l).transpose(1, 2)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    lam = 0.5 * (1.0 + torch.tanh(0.5 * lambda_logits))
    return a[:, :, 0::2] - lam[..., None] * a[:, :, 1::2]
