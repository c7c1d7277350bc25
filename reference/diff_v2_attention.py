"""Instructor reference for the DIFF V2 exercise.

Not part of the student handout. It implements exactly the contract stated in
``exercise/diff_v2_attention.py`` and nothing more: no RMSNorm, no
``(1 - lambda_init)`` multiplier, no projections, no rotary embeddings.

Tensors use FlashAttention's layout ``[batch, tokens, heads, head_dim]``.
Query head ``h`` reads key/value head ``h // G`` with ``G = Hq / Hkv``, so the
heads of one group are contiguous; DIFF V2 pairs query heads ``2i`` and
``2i + 1``, which therefore always share their keys and values.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["diff_v2_attention", "gqa_attention"]


def gqa_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    """Grouped-query softmax attention; returns ``[B, T, Hq, D]``.

    ``q`` is ``[B, T, Hq, D]``; ``k`` and ``v`` are ``[B, T, Hkv, D]`` with
    ``Hq`` a multiple of ``Hkv``. Nothing is modified in place and the result
    keeps the inputs' dtype and autograd graph.
    """
    assert q.dim() == 4 and k.shape == v.shape and k.dim() == 4
    hq, hkv = q.shape[2], k.shape[2]
    assert hq % hkv == 0
    group = hq // hkv

    # To [B, heads, T, D]; each key/value head is repeated for the G query
    # heads of its group (repeat_interleave keeps the repeats contiguous, which
    # is exactly the mapping h -> h // G).
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)

    logits = torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[1]
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(diagonal=1)
        # The diagonal is always visible, so no row is entirely -inf and
        # torch.softmax (which subtracts the row maximum) stays finite.
        logits = logits.masked_fill(future, float("-inf"))
    weights = torch.softmax(logits, dim=-1)
    return torch.matmul(weights, vh).transpose(1, 2)


def diff_v2_attention(
    q: Tensor, k: Tensor, v: Tensor, lambda_logits: Tensor, causal: bool = True
) -> Tensor:
    """DIFF V2: ``A[:, :, 0::2] - sigmoid(lambda_logits)[..., None] * A[:, :, 1::2]``.

    ``A = gqa_attention(q, k, v, causal)`` has ``2H`` heads; the result has
    ``H``. ``lambda_logits`` is ``[B, T, H]``: one gate per token and output
    head. ``torch.sigmoid`` saturates cleanly, so any finite logit gives
    finite values and gradients.
    """
    assert q.shape[2] % 2 == 0 and lambda_logits.shape == (q.shape[0], q.shape[1], q.shape[2] // 2)
    attended = gqa_attention(q, k, v, causal)
    gate = torch.sigmoid(lambda_logits).unsqueeze(-1)
    return attended[:, :, 0::2] - gate * attended[:, :, 1::2]
