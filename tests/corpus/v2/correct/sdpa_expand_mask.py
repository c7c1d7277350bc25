"""CORRECT: key/value heads broadcast with expand + reshape, SDPA with an explicit boolean attn_mask."""
import torch
import torch.nn.functional as F


def _grouped(x, group):
    b, t, hkv, d = x.shape
    return x[:, :, :, None, :].expand(b, t, hkv, group, d).reshape(b, t, hkv * group, d)


def gqa_attention(q, k, v, causal=True):
    t = q.shape[1]
    group = q.shape[2] // k.shape[2]
    mask = None
    if causal:
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    out = F.scaled_dot_product_attention(
        q.permute(0, 2, 1, 3),
        _grouped(k, group).permute(0, 2, 1, 3),
        _grouped(v, group).permute(0, 2, 1, 3),
        attn_mask=mask,
    )
    return out.permute(0, 2, 1, 3)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    even = gqa_attention(q[:, :, 0::2], k, v, causal)
    odd = gqa_attention(q[:, :, 1::2], k, v, causal)
    return even - torch.sigmoid(lambda_logits)[..., None] * odd
