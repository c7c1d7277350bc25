"""BUG: the [B, T, H, D] tensors are passed to scaled_dot_product_attention without transposing, so SDPA treats tokens as heads and attends over the heads of one token."""
import torch
import torch.nn.functional as F


def gqa_attention(q, k, v, causal=True):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    out = gqa_attention(q, k, v, causal)
    return out[:, :, ::2] - torch.sigmoid(lambda_logits).unsqueeze(-1) * out[:, :, 1::2]
