# Flash-style custom autograd Function: log-normalisers saved, backward recomputes the maps over key blocks of 128.
"""Differential attention: the exercise you complete.

The Differential Transformer (ICLR 2025) replaces one softmax attention map by
the difference of two. Each branch has its own queries and keys and is
normalised on its own; the second map is scaled by a learnable scalar lambda
and subtracted from the first before the values are aggregated::

    A1 = softmax(Q1 @ K1^T / sqrt(D) + M)      (softmax over the key axis)
    A2 = softmax(Q2 @ K2^T / sqrt(D) + M)
    O  = (A1 - lambda * A2) @ V

M is the causal mask: 0 where key j may be seen by query i (j <= i) and -inf
for future keys (j > i), added to BOTH branches, or no mask at all when
``causal=False``. Lambda itself is re-parameterised by four learnable vectors::

    lambda = exp(q1 . k1) - exp(q2 . k2) + lambda_init

Fill in the two function bodies below. The input checks are supplied: keep
the calls to ``check_lambda_inputs`` and ``check_attention_inputs`` at the top
of each function; you do not need to write any validation yourself.

Not part of this exercise: per-head normalisation (RMSNorm), the fixed
``(1 - lambda_init)`` multiplier that follows it, the input and output
projections, dropout and the rest of the model.

Use only ``torch`` and ``math``; the grader loads your file in a restricted
process where other imports may fail.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "check_attention_inputs",
    "check_lambda_inputs",
    "differential_attention",
    "differential_lambda",
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


def _require_float_tensor(name: str, obj: object) -> torch.Tensor:
    if not isinstance(obj, torch.Tensor):
        raise TypeError(f"'{name}' must be a torch.Tensor (got {_type_name(obj)})")
    if obj.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"'{name}' must have dtype torch.float32 or torch.float64 (got {obj.dtype})"
        )
    return obj


def _require_matching(name: str, t: torch.Tensor, first_name: str, first: torch.Tensor) -> None:
    if t.dtype != first.dtype:
        raise TypeError(
            f"'{name}' must have the same dtype as '{first_name}' ({first.dtype}) (got {t.dtype})"
        )
    if t.device != first.device:
        raise ValueError(
            f"'{name}' must be on the same device as '{first_name}' ({first.device}) "
            f"(got {t.device})"
        )


def _require_group(tensors: dict[str, object], layout: str) -> torch.Tensor:
    """Check tensors of one shape ``layout`` (e.g. "[B, H, T, D]"), dtype and device; return the first."""
    ndim = layout.count(",") + 1
    first_name, first = next(iter(tensors.items()))
    for name, obj in tensors.items():
        t = _require_float_tensor(name, obj)
        if t.dim() != ndim:
            raise ValueError(
                f"'{name}' must be a {ndim}-D tensor of shape {layout} (got shape {_shape(t)})"
            )
        if 0 in t.shape:
            raise ValueError(f"'{name}' must have every size >= 1 (got shape {_shape(t)})")
        if t.shape != first.shape:
            raise ValueError(
                f"'{name}' must have shape {layout} = {_shape(first)} (got {_shape(t)})"
            )
        _require_matching(name, t, first_name, first)
    return first


def check_lambda_inputs(
    q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor
) -> None:
    """Validate the four lambda parameter vectors (supplied; do not edit).

    Accepts float32 or float64 tensors of shape [D_lambda] with D_lambda >= 1,
    all with the same length, dtype and device. Strided (non-contiguous)
    vectors and vectors that require grad are fine.

    Raises:
        TypeError: an argument is not a tensor, or has the wrong dtype.
        ValueError: an argument has the wrong shape or device.
    """
    _require_group({"q1": q1, "k1": k1, "q2": q2, "k2": k2}, "[D_lambda]")


def _check_coefficient(coefficient: object) -> None:
    if isinstance(coefficient, torch.Tensor):
        if coefficient.dim() != 0:
            raise ValueError(
                "'coefficient' must be a 0-dim tensor of shape [] "
                f"(got shape {_shape(coefficient)})"
            )
        if coefficient.is_complex() or not coefficient.is_signed():  # (bool is not signed)
            raise TypeError(
                "'coefficient' must have a floating or signed integer dtype "
                f"(got {coefficient.dtype})"
            )
        # Reading the value of a detached alias neither copies the graph nor
        # changes the tensor's version counter.
        value = float(coefficient.detach().cpu())
    elif isinstance(coefficient, (int, float)) and not isinstance(coefficient, bool):
        value = float(coefficient)
    else:
        raise TypeError(
            "'coefficient' must be a Python int/float or a 0-dim torch.Tensor "
            f"(got {_type_name(coefficient)})"
        )
    if not math.isfinite(value):
        raise ValueError(f"'coefficient' must be finite (got {value})")


def check_attention_inputs(
    q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor,
    value: torch.Tensor, coefficient: float | torch.Tensor,
) -> None:
    """Validate the inputs of ``differential_attention`` (supplied; do not edit).

    Accepts float32 or float64 tensors q1, k1, q2, k2 of one shape [B, H, T, D]
    and ``value`` of shape [B, H, T, 2*D], all with one dtype and device and
    every size >= 1. Strided inputs and inputs that require grad are fine.
    ``coefficient`` must be a finite Python int/float or a finite 0-dim tensor
    of a floating or signed integer dtype (which may require grad); unsigned
    dtypes are refused, since -coefficient wraps around for them.

    Raises:
        TypeError: an argument has the wrong type or dtype.
        ValueError: an argument has the wrong shape or device, or the
            coefficient is not finite.
    """
    first = _require_group({"q1": q1, "k1": k1, "q2": q2, "k2": k2}, "[B, H, T, D]")
    _require_float_tensor("value", value)
    b, h, t_len, d = first.shape
    expected = [b, h, t_len, 2 * d]
    if _shape(value) != expected:
        raise ValueError(
            f"'value' must have shape [B, H, T, 2*D] = {expected} (got {_shape(value)})"
        )
    _require_matching("value", value, "q1", first)
    _check_coefficient(coefficient)


# --------------------------------------------------------------------------
# Your work starts here.
# --------------------------------------------------------------------------

_KEY_BLOCK = 128


class _DiffAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, value, coef, causal):
        t, d = q1.shape[-2], q1.shape[-1]
        scale = 1.0 / math.sqrt(d)
        pos = torch.arange(t, device=q1.device)
        outs, lses = [], []
        for q, k in ((q1, k1), (q2, k2)):
            s = torch.matmul(q, k.transpose(-2, -1)) * scale
            if causal:
                s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
            lse = torch.logsumexp(s, dim=-1, keepdim=True)
            outs.append(torch.matmul(torch.exp(s - lse), value))
            lses.append(lse)
        c = coef.to(q1.dtype)
        ctx.save_for_backward(q1, k1, q2, k2, value, c, outs[0], outs[1], lses[0], lses[1])
        ctx.causal = causal
        ctx.coef_dtype = coef.dtype
        return outs[0] - c * outs[1]

    @staticmethod
    def backward(ctx, grad_out):
        q1, k1, q2, k2, value, c, o1, o2, lse1, lse2 = ctx.saved_tensors
        t, d = q1.shape[-2], q1.shape[-1]
        scale = 1.0 / math.sqrt(d)
        q_pos = torch.arange(t, device=q1.device)
        grads = []
        dv = torch.zeros_like(value)
        for q, k, o, lse, w in ((q1, k1, o1, lse1, 1.0), (q2, k2, o2, lse2, -c)):
            do = grad_out * w
            delta = (do * o).sum(dim=-1, keepdim=True)
            dq = torch.zeros_like(q)
            dk = torch.zeros_like(k)
            for ks in range(0, t, _KEY_BLOCK):
                ke = min(ks + _KEY_BLOCK, t)
                kb, vb = k[..., ks:ke, :], value[..., ks:ke, :]
                s = torch.matmul(q, kb.transpose(-2, -1)) * scale
                if ctx.causal:
                    k_pos = torch.arange(ke - ks, device=q.device)
                    s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
                p = torch.exp(s - lse)
                dv[..., ks:ke, :] += torch.matmul(p.transpose(-2, -1), do)
                ds = p * (torch.matmul(do, vb.transpose(-2, -1)) - delta) * scale
                dq += torch.matmul(ds, kb)
                dk[..., ks:ke, :] += torch.matmul(ds.transpose(-2, -1), q)
            grads += [dq, dk]
        needs = ctx.needs_input_grad
        dcoef = -(grad_out * o2).sum().to(ctx.coef_dtype) if needs[5] else None
        grads = [g if need else None for g, need in zip(grads, needs[:4])]
        return (*grads, dv if needs[4] else None, dcoef, None)


def differential_lambda(
    q1: torch.Tensor,
    k1: torch.Tensor,
    q2: torch.Tensor,
    k2: torch.Tensor,
    lambda_init: float = 0.2,
) -> torch.Tensor:
    check_lambda_inputs(q1, k1, q2, k2)
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def differential_attention(
    q1: torch.Tensor,
    k1: torch.Tensor,
    q2: torch.Tensor,
    k2: torch.Tensor,
    value: torch.Tensor,
    coefficient: float | torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    if isinstance(coefficient, torch.Tensor):
        coef = coefficient
    else:
        coef = torch.tensor(float(coefficient), dtype=q1.dtype, device=q1.device)
    return _DiffAttention.apply(q1, k1, q2, k2, value, coef, causal)
