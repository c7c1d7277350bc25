"""The operations DIFF V2 solutions commonly use, run once by the fork server (see Exercise.warm_up)."""

from __future__ import annotations

from typing import Any


def warm_up(torch: Any) -> None:
    """Grouped-query attention in the usual styles and the sigmoid gate, forward and backward, in both dtypes."""
    functional = torch.nn.functional
    for dtype in (torch.float32, torch.float64):
        q = torch.randn(1, 3, 4, 2, dtype=dtype, requires_grad=True)  # [B, T, Hq, D]
        k = torch.randn(1, 3, 2, 2, dtype=dtype, requires_grad=True)  # [B, T, Hkv, D]
        gates = torch.randn(1, 3, 2, dtype=dtype, requires_grad=True)
        keys = k.transpose(1, 2).repeat_interleave(2, dim=1)
        expanded = k[:, :, :, None].expand(1, 3, 2, 2, 2).reshape(1, 3, 4, 2).transpose(1, 2)
        keep = torch.ones(3, 3, dtype=torch.bool).tril()
        logits = torch.einsum("bthd,bhsd->bhts", q, keys).masked_fill(~keep, float("-inf"))
        attended = torch.matmul(logits.softmax(-1), expanded).transpose(1, 2)
        total = attended.sum() + logits.log_softmax(-1).exp().sum() + torch.logsumexp(logits, -1).sum()
        total = total + functional.scaled_dot_product_attention(q.transpose(1, 2), keys, keys, is_causal=True).sum()
        total = total + functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), enable_gqa=True).sum()
        gate = torch.sigmoid(gates)[..., None] + functional.logsigmoid(gates).exp()[..., None] + torch.where(gates > 0, gates, -gates)[..., None]
        paired = attended.unflatten(2, (2, 2))
        total = total + (torch.stack([attended[:, :, 0::2], attended[:, :, 1::2]], 0).sum(0) - gate * paired[..., 1, :]).sum()
        torch.autograd.grad(total, [q, k, gates])
        q.detach().numpy()
