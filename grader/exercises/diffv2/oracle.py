"""The grader's independent truth for the DIFF V2 exercise.

Everything a submission is compared against is computed here, in float64, with
numpy and the standard library only: the module never imports torch, so a
submission cannot influence it by patching torch, and it does not use the
reference. Small problems are evaluated in plain Python floats (the row
maximum subtracted before ``math.exp``, every sum taken with ``math.fsum``,
which is correctly rounded); larger ones use the same formulas vectorised with
numpy in extended precision (``numpy.longdouble``; float64 for the truth of
a float32 call, see grader.toolkit.softmax). The project's tests hold
the two paths against each other. The gradients follow the hand-derived
vector-Jacobian products of docs/diffv2.md, vectorised with numpy.

Layout (FlashAttention's): ``q`` is [B, T, Hq, D], ``k`` and ``v`` are
[B, T, Hkv, D] with ``Hq = G·Hkv``, and query head ``h`` reads key/value head
``h // G``. ``diff_v2_attention`` takes ``Hq = 2H`` query heads and
``lambda_logits`` of [B, T, H] and returns [B, T, H, D]. Attention maps are
returned as [B, Hq, T, T] (query token, then key token); a causal mask hides
keys ``s > t`` from query ``t``.

The gate ``σ(ℓ) = 1 / (1 + exp(-ℓ))`` is evaluated through ``exp(-|ℓ|)``,
which never overflows, so ``σ``, ``1 - σ = σ(-ℓ)`` and ``σ(1 - σ)`` are finite
and accurate for any finite ``ℓ``.

With ``absolute=True`` a VJP evaluates the same formulas with every operand
replaced by its absolute value and every subtraction turned into an addition
(``1 - σ`` included, whose terms have magnitude ``1 + σ``; the gate itself
counts as ``2 - σ``, the terms of its other form ``1 - σ(-ℓ)``): an
element-wise bound on the true values and the scale of the rounding errors
of any of their usual forms, which is how the grader sizes its tolerances.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from grader.toolkit.softmax import arithmetic, recent_maps, softmax_maps

SCALAR_LIMIT = 10_000  # B·Hq·T²·D up to which the maps and outputs are computed in Python floats (its 2H heads cost twice V1's)


# ---- the gate ---------------------------------------------------------------------------


def sigmoid(x: float) -> float:
    """σ(x) in a Python float, through exp(-|x|): finite and accurate for any finite x."""
    small = math.exp(-abs(x))
    return 1.0 / (1.0 + small) if x >= 0 else small / (1.0 + small)


def sigmoids(x: np.ndarray) -> np.ndarray:
    """σ element-wise, through exp(-|x|)."""
    x = np.asarray(x, dtype=np.float64)
    small = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, small) / (1.0 + small)


def sigmoid_slopes(x: np.ndarray) -> np.ndarray:
    """σ'(x) = σ(x)(1 - σ(x)) element-wise, as exp(-|x|) / (1 + exp(-|x|))² (no cancellation, no overflow)."""
    small = np.exp(-np.abs(np.asarray(x, dtype=np.float64)))
    return small / (1.0 + small) ** 2


# ---- grouped-query attention maps --------------------------------------------------------


def group_size(q: np.ndarray, k: np.ndarray) -> int:
    """G = Hq / Hkv."""
    hq, hkv = np.shape(q)[2], np.shape(k)[2]
    if hq % hkv:
        raise ValueError(f"Hq = {hq} is not a multiple of Hkv = {hkv}")
    return hq // hkv


def heads_first(x: np.ndarray) -> np.ndarray:
    """[B, T, heads, D] -> [B, heads, T, D] (a view)."""
    return np.swapaxes(np.asarray(x), 1, 2)


def per_query_head(x: np.ndarray, group: int) -> np.ndarray:
    """Key/value heads [B, T, Hkv, D] -> [B, Hq, T, D]: head h // G serves query head h."""
    return np.repeat(heads_first(x), group, axis=1)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The correctly rounded sum of the element-wise products of ``a`` and ``b``."""
    return math.fsum(map(operator.mul, a, b))


def _softmax_row(query: list[float], keys: list[list[float]], visible: int) -> list[float]:
    """softmax over the first ``visible`` keys of q·k/√D in Python floats; hidden keys get exactly 0.0."""
    scale = math.sqrt(len(query))
    logits = [_dot(query, key) / scale for key in keys[:visible]]
    peak = max(logits)
    weights = [math.exp(logit - peak) for logit in logits]
    total = math.fsum(weights)
    return [w / total for w in weights] + [0.0] * (len(keys) - visible)


def scalar_maps(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """The [B, Hq, T, T] softmax maps, row by row in Python floats with correctly rounded sums."""
    group = group_size(q, k)
    queries, keys = heads_first(q).tolist(), heads_first(k).tolist()
    return np.array(
        [
            [
                [_softmax_row(query, keys[b][h // group], t + 1 if causal else len(keys[b][h // group])) for t, query in enumerate(query_rows)]
                for h, query_rows in enumerate(heads)
            ]
            for b, heads in enumerate(queries)
        ],
        dtype=np.float64,
    )


def vectorised_maps(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """The [B, Hq, T, T] softmax maps, vectorised in ``numpy.longdouble`` and rounded to float64 at the end (grader.toolkit.softmax)."""
    return softmax_maps(heads_first(q), per_query_head(k, group_size(q, k)), causal)


def _is_small(q: np.ndarray, k: np.ndarray) -> bool:
    """Whether a problem is small enough for the Python-float path (B·Hq·T²·D within SCALAR_LIMIT)."""
    b, t, hq, d = np.shape(q)
    return b * hq * t * t * d <= SCALAR_LIMIT


def attention_maps(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """The [B, Hq, T, T] maps softmax_s(q[b,t,h]·k[b,s,h//G]/√D + M[t,s]).

    In Python floats while the problem is small (:func:`scalar_maps`), in
    extended precision beyond :data:`SCALAR_LIMIT` (:func:`vectorised_maps`);
    the last few kept (grader.toolkit.softmax.recent_maps).
    """
    small = _is_small(q, k)
    return recent_maps(q, k, causal, lambda: scalar_maps(q, k, causal) if small else vectorised_maps(q, k, causal))


def apply_maps(maps: np.ndarray, v: np.ndarray, group: int) -> np.ndarray:
    """[B, T, Hq, D] = Σ_s maps[b,h,t,s]·v[b,s,h//G,:]: fsum per element for small problems, longdouble otherwise."""
    b, hq, t, _ = maps.shape
    d = np.shape(v)[-1]
    if b * hq * t * t * d > SCALAR_LIMIT:
        work = arithmetic()
        values = per_query_head(np.asarray(v, dtype=work), group)
        return np.swapaxes(np.einsum("bhts,bhsd->bhtd", np.asarray(maps, dtype=work), values), 1, 2).astype(np.float64)
    columns = [[list(zip(*rows)) for rows in heads] for heads in heads_first(np.asarray(v, dtype=np.float64)).tolist()]
    out = [
        [[[_dot(row, column) for column in columns[bb][h // group]] for row in maps[bb, h].tolist()] for h in range(hq)]
        for bb in range(b)
    ]
    return np.swapaxes(np.array(out, dtype=np.float64), 1, 2)


def gqa_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Grouped-query attention, [B, T, Hq, D]."""
    return apply_maps(attention_maps(q, k, causal), v, group_size(q, k))


def signed_maps(q: np.ndarray, k: np.ndarray, lambda_logits: np.ndarray, causal: bool) -> np.ndarray:
    """The [B, H, T, T] signed maps P_i = A_2i - σ(ℓ_i)·A_2i+1 (the gate per query token)."""
    maps = attention_maps(q, k, causal)
    gates = np.swapaxes(sigmoids(lambda_logits), 1, 2)[..., None]  # [B, H, T, 1]
    return maps[:, 0::2] - gates * maps[:, 1::2]


def diff_v2_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, lambda_logits: np.ndarray, causal: bool) -> np.ndarray:
    """DIFF V2, [B, T, H, D]: out[b,t,i] = Σ_s P_i[t,s]·v[b,s,kv head of pair i]."""
    group = group_size(q, k)
    # Pair i holds query heads 2i and 2i + 1, both in group 2i // G: as a "query head" of the
    # signed maps it reads key/value head i // (G / 2).
    return apply_maps(signed_maps(q, k, lambda_logits, causal), v, group // 2)


# ---- vector-Jacobian products ------------------------------------------------------------


def _summed_over_groups(x: np.ndarray, group: int) -> np.ndarray:
    """[B, Hq, T, D] -> [B, Hkv, T, D]: the sum over the G query heads of each group."""
    b, hq, t, d = x.shape
    return x.reshape(b, hq // group, group, t, d).sum(axis=2)


def gqa_vjp(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, cotangent: np.ndarray, *, absolute: bool = False
) -> dict[str, np.ndarray]:
    """The gradients of <cotangent, gqa_attention(q, k, v)> with respect to q, k and v.

    dA = dO·vᵀ, dS = A ⊙ (dA - rowsum(dA ⊙ A)), dq = dS·k/√D, and dk, dv
    accumulated over the G query heads of each group: dk = Σ_h dSᵀ·q/√D,
    dv = Σ_h Aᵀ·dO. With ``absolute``, the absolute-value evaluation.
    """
    group = group_size(q, k)
    maps = attention_maps(q, k, causal)
    q, k, v, cotangent = (np.asarray(x, dtype=np.float64) for x in (q, k, v, cotangent))
    sign = -1.0
    if absolute:
        q, k, v, cotangent, sign = np.abs(q), np.abs(k), np.abs(v), np.abs(cotangent), 1.0
    scale = math.sqrt(q.shape[-1])
    d_out = heads_first(cotangent)
    keys, values, queries = per_query_head(k, group), per_query_head(v, group), heads_first(q)
    d_maps = d_out @ np.swapaxes(values, -1, -2)
    d_logits = maps * (d_maps + sign * np.sum(d_maps * maps, axis=-1, keepdims=True))
    return {
        "q": heads_first(d_logits @ keys / scale),
        "k": heads_first(_summed_over_groups(np.swapaxes(d_logits, -1, -2) @ queries, group) / scale),
        "v": heads_first(_summed_over_groups(np.swapaxes(maps, -1, -2) @ d_out, group)),
    }


def diff_v2_vjp(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, lambda_logits: np.ndarray, causal: bool, cotangent: np.ndarray,
    *, absolute: bool = False,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The gradients of <cotangent, diff_v2_attention(...)> with respect to q, k, v and lambda_logits.

    With A = gqa_attention(q, k, v) and λ = σ(ℓ): dA_2i = G_i, dA_2i+1 = -λ_i·G_i
    (then the GQA backward), and dℓ_i = -σ(ℓ_i)(1 - σ(ℓ_i))·Σ_d G_i·A_2i+1.
    With ``absolute``, the absolute-value evaluation, in which σ' counts as
    the larger of its two forms' terms: σ(1 + σ) for σ(ℓ)(1 − σ(ℓ)), the
    form autograd's sigmoid backward takes (it subtracts σ from 1), and
    (1 − σ)(2 − σ) for the same slope of a gate written 1 − σ(−ℓ): the scale
    of the rounding errors of an implementation that subtracts a sigmoid
    near 1 from 1, whichever sign ℓ has.
    """
    gates = sigmoids(lambda_logits)[..., None]  # [B, T, H, 1]
    cotangent = np.asarray(cotangent, dtype=np.float64)
    if absolute:
        cotangent = np.abs(cotangent)
    b, t, h, d = cotangent.shape
    d_attended = np.empty((b, t, 2 * h, d))
    d_attended[:, :, 0::2] = cotangent
    d_attended[:, :, 1::2] = (gate_magnitudes(lambda_logits)[..., None] if absolute else -gates) * cotangent
    grads = gqa_vjp(q, k, v, causal, d_attended, absolute=absolute)
    if absolute:
        odd = gqa_output_magnitude(q, k, v, causal)[:, :, 1::2]
        gate = sigmoids(lambda_logits)
        slope = np.maximum(gate * (1.0 + gate), (1.0 - gate) * (2.0 - gate))
        grads["lambda_logits"] = slope * np.sum(cotangent * odd, axis=-1)
    else:
        odd = gqa_attention(q, k, v, causal)[:, :, 1::2]
        grads["lambda_logits"] = -sigmoid_slopes(lambda_logits) * np.sum(cotangent * odd, axis=-1)
    return grads


# ---- absolute-value evaluations and logit sizes -------------------------------------------


def logit_magnitude(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[B, Hq, T]: per query, the largest Σ_d |q_d k_d| / √D over every key (masked or not)."""
    group = group_size(q, k)
    queries = heads_first(np.abs(np.asarray(q, dtype=np.float64)))
    keys = per_query_head(np.abs(np.asarray(k, dtype=np.float64)), group)
    return (queries @ np.swapaxes(keys, -1, -2)).max(axis=-1) / math.sqrt(np.shape(q)[-1])


def gqa_output_magnitude(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """[B, T, Hq, D]: Σ_s A[b,h,t,s]·|v[b,s,h//G]|, the absolute-value evaluation of gqa_attention."""
    group = group_size(q, k)
    values = per_query_head(np.abs(np.asarray(v, dtype=np.float64)), group)
    return heads_first(attention_maps(q, k, causal) @ values)


def gate_magnitudes(lambda_logits: np.ndarray) -> np.ndarray:
    """The absolute-value evaluation of the gate: 2 − σ(ℓ), the terms of 1 − σ(−ℓ), the larger of the gate's two forms (σ(ℓ)
    itself is never larger): a gate written so is accurate to u absolutely, not relatively, where σ(ℓ) is small."""
    return 2.0 - sigmoids(lambda_logits)


def diff_v2_output_magnitude(q: np.ndarray, k: np.ndarray, v: np.ndarray, lambda_logits: np.ndarray, causal: bool) -> np.ndarray:
    """[B, T, H, D]: |A_2i|·|v| + |λ_i|·|A_2i+1|·|v|, the absolute-value evaluation of diff_v2_attention (|λ|: :func:`gate_magnitudes`)."""
    both = gqa_output_magnitude(q, k, v, causal)
    return both[:, :, 0::2] + gate_magnitudes(lambda_logits)[..., None] * both[:, :, 1::2]
