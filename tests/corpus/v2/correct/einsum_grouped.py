"""CORRECT: grouped einsum on q reshaped to [B, T, Hkv, G, D]; the key/value heads are never repeated."""
import torch


def gqa_attention(q, k, v, causal=True):
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.reshape(b, t, hkv, hq // hkv, d)
    scores = torch.einsum("btkgd,bskd->bkgts", qg, k) * (d ** -0.5)
    if causal:
        scores = scores + torch.full((t, t), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
    weights = scores.softmax(dim=-1)
    out = torch.einsum("bkgts,bskd->btkgd", weights, v)
    return out.reshape(b, t, hq, d)


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    b, t, hq, d = q.shape
    pairs = gqa_attention(q, k, v, causal).reshape(b, t, hq // 2, 2, d)
    gate = lambda_logits.sigmoid().unsqueeze(-1)
    return pairs[..., 0, :] - gate * pairs[..., 1, :]
