"""CORRECT: torch.nn.functional.scaled_dot_product_attention with enable_gqa=True on [B, H, T, D] views."""
import torch
import torch.nn.functional as F


def gqa_attention(q, k, v, causal=True):
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        is_causal=causal, enable_gqa=True,
    )
    return out.transpose(1, 2)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    out = gqa_attention(q, k, v, causal)
    first, second = out[:, :, ::2], out[:, :, 1::2]
    return torch.addcmul(first, torch.sigmoid(lambda_logits).unsqueeze(-1), second, value=-1.0)
