# the whole DIFF V2 layer as one torch.autograd.Function on [B, T, Hkv, G, D] query groups (einsum, kv never repeated); forward saves the weights and the odd heads, the backward builds the attended-heads cotangent (g, -lam * g) per pair and returns only the gradients asked for; gqa_attention a plain grouped einsum.
"""DIFF V2 attention: the exercise you complete.

DIFF V2 is the second version of differential attention. It keeps the idea of
the first one (subtract a second softmax attention map, weighted by lambda,
from a first one) but builds it on top of grouped-query attention (GQA):

* The model has twice as many query heads as output heads. Query heads ``2i``
  and ``2i + 1`` form one pair; because the query heads of one GQA group are
  contiguous and every group holds an even number of them, both heads of a
  pair read the SAME keys and values.
* One ordinary GQA call computes all ``2H`` attended outputs ``A``; the pair is
  then combined per token::

      out[:, :, i] = A[:, :, 2i] - sigmoid(lambda_logits[:, :, i]) * A[:, :, 2i+1]

* lambda is no longer one scalar per layer: ``lambda_logits`` holds one value
  per token and output head (the output of a small projection in the real
  model), squashed into (0, 1) by a sigmoid.

Tensors follow FlashAttention's layout ``[batch, tokens, heads, head_dim]``
(``[B, T, heads, D]``), not the ``[B, heads, T, D]`` layout of the first
exercise.

Fill in the two function bodies below. The input checks are supplied: keep
the calls to ``check_gqa_inputs`` and ``check_diff_v2_inputs`` at the top of
each function; you do not need to write any validation yourself.

Not part of this exercise: RMSNorm (DIFF V2 has none), DIFF V1's fixed
``(1 - lambda_init)`` multiplier and its exponential lambda re-parameterisation,
the projections (including the one that produces ``lambda_logits``), rotary
embeddings, dropout, KV caches and the rest of the model.

Use only ``torch`` and ``math``; the grader loads your file in a restricted
process where other imports may fail.
"""

from __future__ import annotations

import math  # noqa: F401  (available for your implementation)

import torch

__all__ = [
    "check_diff_v2_inputs",
    "check_gqa_inputs",
    "diff_v2_attention",
    "gqa_attention",
]

_FLOAT_DTYPES = (torch.float32, torch.float64)


# --------------------------------------------------------------------------
# Supplied validation helpers. They only read shapes, dtypes and devices:
# they never modify a tensor and never record anything for autograd.
# --------------------------------------------------------------------------


def _type_name(obj: object) -> str:
    return type(obj).__qualname__


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def _require_tensor(name: str, obj: object, ndim: int, layout: str) -> torch.Tensor:
    """Check that ``obj`` is a float32/float64 tensor of rank ``ndim`` with no empty axis."""
    if not isinstance(obj, torch.Tensor):
        raise TypeError(f"'{name}' must be a torch.Tensor (got {_type_name(obj)})")
    if obj.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"'{name}' must have dtype torch.float32 or torch.float64 (got {obj.dtype})"
        )
    if obj.dim() != ndim:
        raise ValueError(
            f"'{name}' must be a {ndim}-D tensor of shape {layout} (got shape {_shape(obj)})"
        )
    if 0 in obj.shape:
        raise ValueError(f"'{name}' must have every size >= 1 (got shape {_shape(obj)})")
    return obj


def _require_like(name: str, t: torch.Tensor, first_name: str, first: torch.Tensor) -> None:
    if t.dtype != first.dtype:
        raise TypeError(
            f"'{name}' must have the same dtype as '{first_name}' ({first.dtype}) (got {t.dtype})"
        )
    if t.device != first.device:
        raise ValueError(
            f"'{name}' must be on the same device as '{first_name}' ({first.device}) "
            f"(got {t.device})"
        )


def _require_axis(name: str, t: torch.Tensor, axis: int, axis_name: str, expected: int,
                  source: str) -> None:
    if t.shape[axis] != expected:
        raise ValueError(
            f"'{name}' must have {axis_name} = {expected} like {source} "
            f"(got shape {_shape(t)})"
        )


def check_gqa_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Validate the inputs of ``gqa_attention`` (supplied; do not edit).

    Accepts float32 or float64 tensors ``q`` of shape [B, T, Hq, D] and ``k``,
    ``v`` of one shape [B, T, Hkv, D], all with one dtype and device, every
    size >= 1, and ``Hq`` a multiple of ``Hkv`` (``Hkv == Hq``, plain
    multi-head attention, and ``Hkv == 1``, multi-query attention, are both
    fine). Strided (non-contiguous) inputs and inputs that require grad are
    fine.

    Raises:
        TypeError: an argument is not a tensor, or has the wrong dtype.
        ValueError: an argument has the wrong rank, shape or device.
    """
    _require_tensor("q", q, 4, "[B, T, Hq, D]")
    _require_tensor("k", k, 4, "[B, T, Hkv, D]")
    _require_tensor("v", v, 4, "[B, T, Hkv, D]")
    _require_like("k", k, "q", q)
    _require_like("v", v, "q", q)
    for name, t in (("k", k), ("v", v)):
        _require_axis(name, t, 0, "batch size B", q.shape[0], "'q'")
        _require_axis(name, t, 1, "sequence length T", q.shape[1], "'q'")
        _require_axis(name, t, 3, "head_dim D", q.shape[3], "'q'")
    if v.shape[2] != k.shape[2]:
        raise ValueError(
            f"'v' must have as many heads as 'k' (Hkv = {k.shape[2]}) (got shape {_shape(v)})"
        )
    hq, hkv = q.shape[2], k.shape[2]
    if hq % hkv != 0:
        raise ValueError(
            f"the number of query heads Hq = {hq} must be a multiple of the number of "
            f"key/value heads Hkv = {hkv}"
        )


def check_diff_v2_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lambda_logits: torch.Tensor
) -> None:
    """Validate the inputs of ``diff_v2_attention`` (supplied; do not edit).

    On top of ``check_gqa_inputs``: the group size ``G = Hq / Hkv`` must be
    even, so that the two query heads of every pair (2i, 2i + 1) fall in the
    same group, and ``lambda_logits`` must be a float32/float64 tensor of
    shape [B, T, Hq / 2] with the dtype and device of ``q``. It may be a
    strided view and may require grad.

    Raises:
        TypeError: an argument is not a tensor, or has the wrong dtype.
        ValueError: an argument has the wrong rank, shape or device, or the
            group size is odd.
    """
    check_gqa_inputs(q, k, v)
    hq, hkv = q.shape[2], k.shape[2]
    group = hq // hkv
    if group % 2 != 0:
        raise ValueError(
            f"the group size G = Hq / Hkv = {hq} / {hkv} = {group} must be even, so that "
            "query heads 2i and 2i + 1 share a key/value head"
        )
    b, t_len, h = q.shape[0], q.shape[1], hq // 2
    _require_tensor("lambda_logits", lambda_logits, 3, "[B, T, H]")
    _require_like("lambda_logits", lambda_logits, "q", q)
    if _shape(lambda_logits) != [b, t_len, h]:
        raise ValueError(
            f"'lambda_logits' must have shape [B, T, H] = {[b, t_len, h]} with H = Hq / 2 "
            f"(got {_shape(lambda_logits)})"
        )


# --------------------------------------------------------------------------
# Your work starts here.
# --------------------------------------------------------------------------

def gqa_attention(q, k, v, causal=True):
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.reshape(b, t, hkv, hq // hkv, d)
    scores = torch.einsum("btjgd,bsjd->bjgts", qg, k)
    scores = scores * (1.0 / math.sqrt(d))
    if causal:
        keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    weights = scores.softmax(dim=-1)
    out = torch.einsum("bjgts,bsjd->btjgd", weights, v)
    return out.reshape(b, t, hq, d)


class _DiffV2Layer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, logits, causal):
        b, t, hq, d = q.shape
        hkv = k.shape[2]
        qg = q.reshape(b, t, hkv, hq // hkv, d)
        scores = torch.einsum("btjgd,bsjd->bjgts", qg, k) * (1.0 / math.sqrt(d))
        if causal:
            future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        attended = torch.einsum("bjgts,bsjd->btjgd", weights, v).reshape(b, t, hq, d)
        gate = torch.sigmoid(logits)
        odd = attended[:, :, 1::2]
        ctx.save_for_backward(qg, k, v, logits, weights, odd)
        return attended[:, :, 0::2] - gate.unsqueeze(-1) * odd

    @staticmethod
    def backward(ctx, grad):
        qg, k, v, logits, weights, odd = ctx.saved_tensors
        b, t, hkv, group, d = qg.shape
        scale = 1.0 / math.sqrt(d)
        gate = torch.sigmoid(logits)
        needs = ctx.needs_input_grad
        dq = dk = dv = dl = None
        if needs[0] or needs[1] or needs[2]:
            g_att = torch.stack((grad, -gate.unsqueeze(-1) * grad), dim=3).reshape(b, t, hkv, group, d)
            if needs[2]:
                dv = torch.einsum("bjgts,btjgd->bsjd", weights, g_att)
            if needs[0] or needs[1]:
                dp = torch.einsum("btjgd,bsjd->bjgts", g_att, v)
                ds = weights * (dp - (weights * dp).sum(dim=-1, keepdim=True))
                if needs[0]:
                    dq = (torch.einsum("bjgts,bsjd->btjgd", ds, k) * scale).reshape(b, t, hkv * group, d)
                if needs[1]:
                    dk = torch.einsum("bjgts,btjgd->bsjd", ds, qg) * scale
        if needs[3]:
            dl = -(grad * odd).sum(dim=-1) * gate * torch.sigmoid(-logits)
        return dq, dk, dv, dl, None


def diff_v2_attention(q, k, v, lambda_logits, causal=True):
    check_diff_v2_inputs(q, k, v, lambda_logits)
    return _DiffV2Layer.apply(q, k, v, lambda_logits, bool(causal))
