"""CORRECT: two torch.autograd.Function classes with hand-written backward passes (GQA and the gated pair difference)."""
import math

import torch


class _GQA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        b, t, hq, d = q.shape
        group = hq // k.shape[2]
        qh = q.transpose(1, 2)
        kr = k.transpose(1, 2).repeat_interleave(group, dim=1)
        vr = v.transpose(1, 2).repeat_interleave(group, dim=1)
        scale = 1.0 / math.sqrt(d)
        s = torch.matmul(qh, kr.transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        p = torch.softmax(s, dim=-1)
        ctx.save_for_backward(qh, kr, vr, p)
        ctx.group = group
        ctx.scale = scale
        return torch.matmul(p, vr).transpose(1, 2)

    @staticmethod
    def backward(ctx, grad_out):
        qh, kr, vr, p = ctx.saved_tensors
        b, hq, t, d = qh.shape
        group, scale = ctx.group, ctx.scale
        g = grad_out.transpose(1, 2)
        dvr = torch.matmul(p.transpose(-1, -2), g)
        dp = torch.matmul(g, vr.transpose(-1, -2))
        ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
        dq = torch.matmul(ds, kr) * scale
        dkr = torch.matmul(ds.transpose(-1, -2), qh) * scale
        hkv = hq // group
        dk = dkr.reshape(b, hkv, group, t, d).sum(dim=2)
        dv = dvr.reshape(b, hkv, group, t, d).sum(dim=2)
        return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), None


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
        d_logits = -(grad_out * odd).sum(dim=-1) * gate * (1.0 - gate)
        return d_att, d_logits


def gqa_attention(q, k, v, causal=True):
    return _GQA.apply(q, k, v, causal)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    return _GatedPairDifference.apply(gqa_attention(q, k, v, causal), lambda_logits)
