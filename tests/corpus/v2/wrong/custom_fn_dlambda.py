"""BUG: a custom autograd.Function for the gated difference whose backward for lambda_logits uses sigmoid(l) instead of its derivative sigmoid(l) * (1 - sigmoid(l))."""
import math

import torch


def gqa_attention(q, k, v, causal=True):
    group = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)


class _GatedPairDifference(torch.autograd.Function):
    @staticmethod
    def forward(ctx, attended, logits):
        gate = torch.sigmoid(logits)
        odd = attended[:, :, 1::2]
        ctx.save_for_backward(odd, gate)
        return attended[:, :, 0::2] - gate.unsqueeze(-1) * odd

    @staticmethod
    def backward(ctx, grad_out):
        odd, gate = ctx.saved_tensors
        b, t, h, d = grad_out.shape
        d_att = grad_out.new_zeros(b, t, 2 * h, d)
        d_att[:, :, 0::2] = grad_out
        d_att[:, :, 1::2] = -gate.unsqueeze(-1) * grad_out
        d_logits = -(grad_out * odd).sum(dim=-1) * gate
        return d_att, d_logits


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    return _GatedPairDifference.apply(gqa_attention(q, k, v, causal), lambda_logits)
