"""CORRECT: heads flattened into the batch for torch.bmm, additive causal bias, hand-written overflow-free sigmoid."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    group = hq // k.shape[2]
    qf = q.transpose(1, 2).reshape(b * hq, t, d)
    kf = k.repeat_interleave(group, dim=2).transpose(1, 2).reshape(b * hq, t, d)
    vf = v.repeat_interleave(group, dim=2).transpose(1, 2).reshape(b * hq, t, d)
    s = torch.bmm(qf, kf.transpose(1, 2)) * (1.0 / math.sqrt(d))
    if causal:
        s = s + torch.zeros(t, t, dtype=q.dtype, device=q.device).masked_fill(
            torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.softmax(s, dim=2)
    return torch.bmm(p, vf).reshape(b, hq, t, d).transpose(1, 2)


def _sigmoid(x):
    # exp of a non-positive number only: never overflows, and the gradient
    # is right at x == 0 too (where() picks the x >= 0 branch there).
    z = torch.exp(-torch.where(x >= 0, x, -x))
    return torch.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    a = gqa_attention(q, k, v, causal)
    return a[:, :, 0::2] - _sigmoid(lambda_logits).unsqueeze(-1) * a[:, :, 1::2]
