"""The operations differential-attention solutions commonly use, run once by the fork server (see Exercise.warm_up)."""

from __future__ import annotations

from typing import Any


def warm_up(torch: Any) -> None:
    """Masked attention in the usual styles, forward and backward, in both dtypes."""
    for dtype in (torch.float32, torch.float64):
        q = torch.randn(1, 2, 3, 2, dtype=dtype, requires_grad=True)
        keep = torch.ones(3, 3, dtype=torch.bool).tril()
        logits = torch.einsum("bhid,bhjd->bhij", q, q).masked_fill(~keep, float("-inf"))
        total = logits.softmax(-1).sum() + logits.log_softmax(-1).exp().sum() + torch.logsumexp(logits, -1).sum()
        total = total + torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
        total = total + torch.bmm(q[0], q[0].mT).exp().sum() + torch.sigmoid(q).sum()
        torch.autograd.grad(total, [q])
        q.detach().numpy()
