# Differential attention wrapped in a decorator that runs the call under torch.no_grad() when no input needs a gradient, so no graph memory is kept; query-chunked body, lambda with torch.dot.
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
        if not coefficient.is_floating_point() and coefficient == torch.iinfo(coefficient.dtype).min:
            raise ValueError(
                "'coefficient' must not be the least value of its integer dtype, whose "
                f"negation wraps around to itself (got {int(coefficient)} as {coefficient.dtype})"
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
    dtypes are refused, since -coefficient wraps around for them, and so is
    the least value of a signed integer dtype (-128 for int8), for which it
    wraps around to itself.

    Raises:
        TypeError: an argument has the wrong type or dtype.
        ValueError: an argument has the wrong shape or device, or the
            coefficient is not finite or is its integer dtype's least value.
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


_QUERY_CHUNK = 64


def _chunk_map(q, k, start, causal, scale):
    """Softmax over keys for the query rows start, start + 1, ... of one branch."""
    logits = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        rows = torch.arange(start, start + q.shape[-2], device=q.device).unsqueeze(-1)
        cols = torch.arange(k.shape[-2], device=q.device)
        logits = logits.masked_fill(cols > rows, float("-inf"))
    return torch.softmax(logits, dim=-1)


def _graph_only_when_needed(fn):
    """Run fn without recording a graph unless some tensor argument requires grad."""

    def wrapper(*args, **kwargs):
        if torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        ):
            return fn(*args, **kwargs)
        with torch.no_grad():
            return fn(*args, **kwargs)

    wrapper.__name__ = fn.__name__
    wrapper.__qualname__ = fn.__qualname__
    wrapper.__doc__ = fn.__doc__
    wrapper.__module__ = fn.__module__
    wrapper.__wrapped__ = fn
    return wrapper


def differential_lambda(
    q1: torch.Tensor,
    k1: torch.Tensor,
    q2: torch.Tensor,
    k2: torch.Tensor,
    lambda_init: float = 0.2,
) -> torch.Tensor:
    """Return the re-parameterised scalar ``exp(q1 . k1) - exp(q2 . k2) + lambda_init``.

    These four vectors are lambda's own learnable parameters; they are not
    the attention queries and keys of ``differential_attention``.

    Args:
        q1, k1, q2, k2: 1-D tensors of one shape [D_lambda] (D_lambda >= 1),
            one dtype (float32 or float64) and one device. They may be
            non-contiguous views and may require grad.
        lambda_init: Python float added to the difference of exponentials.
            The caller picks it; the paper uses
            ``0.8 - 0.6 * exp(-0.3 * (l - 1))`` for layer ``l`` counted from 1.

    Returns:
        A 0-dim tensor (``shape == ()``): not a Python float and not a tensor
        of shape (1,). It has the inputs' dtype and device and is
        differentiable with respect to all four vectors. Its value is not
        clamped to [0, 1]; any real number is a valid lambda.

    The inputs must not be modified (no in-place operations on them).
    """
    check_lambda_inputs(q1, k1, q2, k2)
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


@_graph_only_when_needed
def differential_attention(
    q1: torch.Tensor,
    k1: torch.Tensor,
    q2: torch.Tensor,
    k2: torch.Tensor,
    value: torch.Tensor,
    coefficient: float | torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    """Return ``(softmax(Q1 K1^T / sqrt(D) + M) - coefficient * softmax(Q2 K2^T / sqrt(D) + M)) V``.

    Both softmaxes run over the key axis (the last axis of the [T, T] logits)
    and use the same scale 1/sqrt(D), where D is the width of Q and K. With
    ``causal=True`` the mask M hides future keys (key j > query i) in both
    branches; with ``causal=False`` there is no mask.

    Args:
        q1, k1, q2, k2: queries and keys of the two branches, each of shape
            [B, H, T, D] (batch, heads, sequence length, query/key width).
        value: shared values of shape [B, H, T, 2*D].
        coefficient: lambda, as a finite Python int/float or a 0-dim tensor
            of a floating or signed integer dtype. A tensor coefficient may
            require grad, and must then receive a gradient.
        causal: whether to apply the causal mask (default True).

    All tensors are float32 or float64 with one dtype and device, and may be
    non-contiguous (transposed, sliced or permuted views): do not assume a
    memory layout, e.g. use ``reshape`` rather than ``view``. Logits can be
    large (scaled values of +-100 or more), so the softmax has to be
    numerically stable in float32.

    Returns:
        ONE tensor of shape [B, H, T, 2*D] with the inputs' dtype and device
        (not a tuple, no attention weights), still attached to the autograd
        graph so that gradients reach q1, k1, q2, k2, value and a tensor
        coefficient.

    The inputs must not be modified. Out of scope: per-head RMSNorm, the
    ``(1 - lambda_init)`` multiplier, projections and dropout.

    Useful facts for checking your work: each row of the signed map
    ``A1 - lambda * A2`` sums to ``1 - lambda``; ``lambda = 0`` gives ordinary
    attention; two identical maps cancel exactly at ``lambda = 1``.
    """
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t = q1.shape[-2]
    scale = 1.0 / math.sqrt(q1.shape[-1])
    pieces = []
    for start in range(0, t, _QUERY_CHUNK):
        stop = min(start + _QUERY_CHUNK, t)
        keys = stop if causal else t  # causal rows never look past the end of their chunk
        a1 = _chunk_map(q1[..., start:stop, :], k1[..., :keys, :], start, causal, scale)
        a2 = _chunk_map(q2[..., start:stop, :], k2[..., :keys, :], start, causal, scale)
        pieces.append(torch.matmul(a1 - coefficient * a2, value[..., :keys, :]))
    return torch.cat(pieces, dim=-2)
