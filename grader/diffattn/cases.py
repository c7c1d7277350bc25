"""Seeded inputs for every check of the differential-attention exercise.

Each check draws from its own generator, derived from the run's seed and the
check's name, so adding a check never changes another check's inputs. Values
are drawn in float64 and rounded to the case's dtype at once: the oracle then
sees exactly the numbers the submission sees. No input is ever all zeros.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

STRIDED = ("transposed", "heads_permuted", "sliced", "transposed", "heads_permuted")
INPUT_NAMES = ("q1", "k1", "q2", "k2", "value")
COEFFICIENT_KINDS = {
    "float": "Python float",
    "int": "Python int",
    "tensor": "0-dim tensor",
    "float64 tensor": "0-dim float64 tensor",
}


def generator(seed: int, name: str) -> np.random.Generator:
    """The generator for one check: a function of the run's seed and the check's name."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def exact(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` and back, so both sides see the same numbers."""
    return np.asarray(values, dtype=dtype).astype(np.float64)


def paper_lambda_init(layer: int) -> float:
    """The paper's schedule: lambda_init = 0.8 - 0.6 exp(-0.3 (layer - 1)), layers from 1."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


@dataclass(frozen=True)
class LambdaCase:
    """Inputs of one differential_lambda call; ``lambda_init`` None means "use the default"."""

    q1: np.ndarray
    k1: np.ndarray
    q2: np.ndarray
    k2: np.ndarray
    dtype: str
    lambda_init: float | None
    upstream: float
    layout: str = "contiguous"

    @property
    def effective_init(self) -> float:
        """The lambda_init the call must use (the documented default is 0.2)."""
        return 0.2 if self.lambda_init is None else self.lambda_init

    @property
    def vectors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """q1, k1, q2, k2."""
        return self.q1, self.k1, self.q2, self.k2

    def label(self) -> str:
        """A short description of the inputs for messages."""
        init = "lambda_init omitted (default 0.2)" if self.lambda_init is None else f"lambda_init={self.lambda_init:.6g}"
        layout = "" if self.layout == "contiguous" else f", {self.layout} vectors"
        return f"{self.dtype} vectors of length {self.q1.size}, {init}{layout}"


@dataclass(frozen=True)
class AttentionCase:
    """Inputs of one differential_attention call (and its cotangent for gradient checks)."""

    q1: np.ndarray
    k1: np.ndarray
    q2: np.ndarray
    k2: np.ndarray
    value: np.ndarray
    coefficient: float
    dtype: str
    causal: bool | None  # None: the argument is omitted, so the default (True) applies
    cotangent: np.ndarray
    coefficient_kind: str = "float"  # a key of COEFFICIENT_KINDS
    layouts: tuple[str, ...] = ("contiguous",) * 5
    note: str = ""
    lambda_case: LambdaCase | None = field(default=None)  # set when the coefficient comes from differential_lambda
    frozen: tuple[str, ...] = ()  # inputs that do not require grad in gradient checks
    causal_positional: bool = False  # pass causal as the 7th positional argument

    @property
    def coefficient_is_tensor(self) -> bool:
        """Whether the coefficient is passed as a 0-dim tensor (which then needs a gradient)."""
        return self.coefficient_kind.endswith("tensor")

    @property
    def coefficient_dtype(self) -> str:
        """The dtype of a tensor coefficient: the inputs' unless stated."""
        return "float64" if self.coefficient_kind == "float64 tensor" else self.dtype

    def requires_grad(self, name: str) -> bool:
        """Whether the gradient with respect to ``name`` is requested in gradient checks."""
        if name == "coefficient":
            return self.coefficient_is_tensor
        return name not in self.frozen

    @property
    def is_causal(self) -> bool:
        """Whether the causal mask applies."""
        return self.causal is not False

    @property
    def inputs(self) -> tuple[np.ndarray, ...]:
        """q1, k1, q2, k2, value."""
        return self.q1, self.k1, self.q2, self.k2, self.value

    def label(self) -> str:
        """A short description of the inputs for messages."""
        b, h, t, d = self.q1.shape
        causal = "causal omitted (default True)" if self.causal is None else f"causal={self.causal}"
        if self.causal_positional:
            causal += " (positional)"
        if self.lambda_case is not None:
            coefficient = f"coefficient from differential_lambda ({self.lambda_case.label()})"
        else:
            coefficient = f"coefficient={self.coefficient:.6g} ({COEFFICIENT_KINDS[self.coefficient_kind]})"
        parts = [f"B={b} H={h} T={t} D={d}", self.dtype, causal, coefficient]
        if self.frozen:
            parts.append(f"{', '.join(self.frozen)} without requires_grad")
        if any(layout != "contiguous" for layout in self.layouts):
            parts.append("strided inputs (" + ", ".join(self.layouts) + ")")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


def lambda_case(
    rng: np.random.Generator,
    length: int,
    dtype: str,
    lambda_init: float | None,
    *,
    layout: str = "contiguous",
    direction: int = 0,
) -> LambdaCase:
    """Four lambda vectors whose dot products stay within ±1.8 (finite exponentials).

    ``direction`` +1 gives q1·k1 in [1.3, 1.8] and q2·k2 in [-1.8, -1.3], so
    lambda > 3 + lambda_init; -1 the mirror image, lambda < -3 + lambda_init;
    0 leaves the dot products random within about ±1.
    """
    magnitudes = [rng.uniform(0.3, 1.0, length) / math.sqrt(length) for _ in range(4)]
    signs = [rng.choice([-1.0, 1.0], length) for _ in range(4)]
    vectors = [m * s for m, s in zip(magnitudes, signs)]
    if direction:
        for q, k, sign in ((0, 1, direction), (2, 3, -direction)):
            vectors[q] = vectors[q] * sign * rng.uniform(1.3, 1.8) / float(vectors[q] @ vectors[k])
    q1, k1, q2, k2 = (exact(v, dtype) for v in vectors)
    upstream = float(exact(rng.uniform(0.5, 2.0), dtype))
    return LambdaCase(q1, k1, q2, k2, dtype=dtype, lambda_init=lambda_init, upstream=upstream, layout=layout)


def attention_case(
    rng: np.random.Generator,
    shape: tuple[int, int, int, int],
    dtype: str,
    causal: bool | None,
    coefficient: float | None = None,
    *,
    coefficient_kind: str = "float",
    max_logit: float | None = None,
    layouts: tuple[str, ...] = ("contiguous",) * 5,
    frozen: tuple[str, ...] = (),
    causal_positional: bool = False,
    note: str = "",
) -> AttentionCase:
    """Random Q/K/V and cotangent of ``shape`` = (B, H, T, D).

    ``coefficient`` None draws one in [0.2, 0.9]. ``max_logit`` rescales the
    queries so that the largest scaled logit |q·k|/√D of either branch equals it.
    """
    b, h, t, d = shape
    q1, k1, q2, k2 = (rng.standard_normal(shape) for _ in range(4))
    if max_logit is not None:
        q1 = q1 * max_logit / _largest_logit(q1, k1)
        q2 = q2 * max_logit / _largest_logit(q2, k2)
    if coefficient is None:
        coefficient = float(rng.uniform(0.2, 0.9))
    return AttentionCase(
        *(exact(x, dtype) for x in (q1, k1, q2, k2, rng.standard_normal((b, h, t, 2 * d)))),
        coefficient=float(exact(coefficient, "float64" if coefficient_kind == "float64 tensor" else dtype)),
        dtype=dtype,
        causal=causal,
        cotangent=exact(rng.standard_normal((b, h, t, 2 * d)), dtype),
        coefficient_kind=coefficient_kind,
        layouts=layouts,
        frozen=frozen,
        causal_positional=causal_positional,
        note=note,
    )


def _largest_logit(q: np.ndarray, k: np.ndarray) -> float:
    return float(np.abs(q @ np.swapaxes(k, -1, -2)).max() / math.sqrt(q.shape[-1]))


def shared_value_rows(case: AttentionCase, rng: np.random.Generator) -> AttentionCase:
    """The same case with one random value vector repeated for every token."""
    row = exact(rng.standard_normal(case.value.shape[-1]) * 2.0, case.dtype)
    value = np.broadcast_to(row, case.value.shape).copy()
    return replace(case, value=value, note="every token has the same value vector")


def identical_branches(case: AttentionCase) -> AttentionCase:
    """The same case with q2 = q1, k2 = k1 and coefficient 1: the two maps must cancel."""
    return replace(case, q2=case.q1.copy(), k2=case.k1.copy(), coefficient=1.0, note="q2 = q1 and k2 = k1")


def with_lambda(case: AttentionCase, lam: LambdaCase) -> AttentionCase:
    """The same case with its coefficient computed by differential_lambda from ``lam`` (NaN marks it unused)."""
    return replace(case, lambda_case=lam, coefficient=float("nan"))
