"""What the probes of differential attention call, on which inputs, and the probes both functions share.

The harness's probes (:mod:`grader.toolkit.probes`) call a function through a
:class:`Subject`; this module declares the two subjects, draws small float64
inputs of the probes' own (B = 2, H = 2, T = 5, D = 3, so that 2D ≥ T and
the candidate scales 1/√D, 1/D, 1/√(2D), 1/√T differ: what the probes show
may be shown to students), or of the sizes :func:`probed_at` sets (those of
a call a check failed on). The probes that mean the same for every function
(randomness, precision, memory layouts, the gradients against finite
differences of the submission's own forward) are the toolkit's
(:mod:`grader.toolkit.findings`); the forward probes of each function are in
:mod:`grader.exercises.diffattn.attention_probes` and
:mod:`grader.exercises.diffattn.lambda_probes`.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np

from grader.core.invoke import Argument, Call, Request, TensorInput
from grader.exercises.diffattn import oracle
from grader.exercises.diffattn.cases import ATTENTION, INPUT_NAMES, LAMBDA, LAMBDA_NAMES
from grader.toolkit.domain import exact
from grader.toolkit.probes import Built, Layout, Subject, Values, layout_of, set_within


class ProbeSizes(NamedTuple):
    """The batch size B, heads H, tokens T and head width D of the probes' inputs."""

    b: int
    h: int
    t: int
    d: int

    def read_out(self) -> ProbeSizes:
        """These sizes with the head width raised to T/2 where one-hot values need it (2D ≥ T to read the whole map out)."""
        return self._replace(d=max(self.d, -(-self.t // 2)))


OWN_SIZES = ProbeSizes(2, 2, 5, 3)
_SIZES: ContextVar[ProbeSizes] = ContextVar("probe_sizes", default=OWN_SIZES)


def sizes() -> ProbeSizes:
    """The sizes of the probes' inputs: :data:`OWN_SIZES`, or those :func:`probed_at` sets."""
    return _SIZES.get()


def probed_at(chosen: ProbeSizes) -> AbstractContextManager[None]:
    """Draw the probes' inputs at ``chosen`` sizes for the block (2D ≥ T, so that one-hot values read the whole map out:
    :meth:`ProbeSizes.read_out`)."""
    if chosen.read_out() != chosen:
        raise ValueError(f"one-hot values need 2D >= T (got {chosen})")
    return set_within(_SIZES, chosen)


ATTENTION_GRADS = (*INPUT_NAMES, "coefficient")
PARAMETER_COMPONENTS = {LAMBDA: {"*": "lambda"},
                        ATTENTION: {**dict.fromkeys(INPUT_NAMES[:4], "branch"), "value": "value", "coefficient": "coefficient", "causal": "mask"}}
"""Per function, the component that handles each parameter: the part at fault when a parameter is misnamed or misplaced
in a submitted signature (a swapped query and key pair the branches' inputs wrongly; every λ parameter is λ's formula),
or when passing one tensor for it and another changes the answer."""
HANDLED_INPUTS = {"coefficient": "coefficient"}
"""The inputs one part of differential_attention handles, and that part (not the graph itself): an output cut off from
autograd, or a gradient hidden from it, for that input alone is that part's fault."""


def scales(d: int, t: int) -> dict[str, float]:
    """The logit scales students use, by name, the contract's first."""
    return {"1/√D": 1 / math.sqrt(d), "1/D": 1 / d, "1/√(2D)": 1 / math.sqrt(2 * d), "1/√T": 1 / math.sqrt(t),
            "1 (no scaling)": 1.0, "√D": math.sqrt(d), "2/√D": 2 / math.sqrt(d)}  # fmt: skip


_COEFFICIENT_AS: ContextVar[str] = ContextVar("probe_coefficient", default="float")


def coefficients_as(kind: str) -> AbstractContextManager[None]:
    """Pass the coefficient of the probes' calls as ``kind`` ("float": a Python float; "tensor": a 0-dim tensor of the inputs'
    dtype; a dtype's name: a 0-dim tensor of that dtype) where its gradient is not wanted (where it is, it is always a tensor
    of the inputs' dtype that requires grad): a fault that only tensor coefficients show is probed where it shows."""
    return set_within(_COEFFICIENT_AS, kind)


def _attention_request(values: Values, grads: tuple[str, ...], cotangent: np.ndarray | None, causal: bool | None, dtype: str,
                       layout: Layout) -> Built:  # fmt: skip
    """differential_attention(q1, k1, q2, k2, value, coefficient[, causal=...]); a tensor coefficient when its gradient is wanted
    or :func:`coefficients_as` says so."""
    tensors = [TensorInput(exact(values[n], dtype), dtype, n in grads, layout_of(layout, n)) for n in INPUT_NAMES]
    coefficient: Any = float(values["coefficient"])
    kind = _COEFFICIENT_AS.get()
    if "coefficient" in grads or kind != "float":
        own = dtype if "coefficient" in grads or kind == "tensor" else kind
        coefficient = TensorInput(exact(values["coefficient"], own), own, "coefficient" in grads)
        tensors.append(coefficient)
    call = Call(ATTENTION, (*tensors[:5], coefficient), {} if causal is None else {"causal": causal})
    positions = {n: i for i, n in enumerate(ATTENTION_GRADS) if n in grads}
    if cotangent is None:
        return Built(Request((call,), inputs=tuple(tensors)), positions)
    return Built(Request((call,), backward_from=0, cotangent=exact(cotangent, dtype), inputs=tuple(tensors)), positions)


def attention_subject(causal: bool | None = True, dtype: str = "float64", layout: Layout = "contiguous") -> Subject:
    """differential_attention with ``causal`` given (None: omitted), inputs in ``dtype`` and memory ``layout``."""
    return Subject(ATTENTION, lambda values, grads, cotangent: _attention_request(values, grads, cotangent, causal, dtype, layout))


def _lambda_request(values: Values, grads: tuple[str, ...], cotangent: np.ndarray | None, dtype: str, layout: Layout) -> Built:
    """differential_lambda(q1, k1, q2, k2[, lambda_init=...]): lambda_init passed when the values hold one."""
    tensors = tuple(TensorInput(exact(values[n], dtype), dtype, n in grads, layout_of(layout, n)) for n in LAMBDA_NAMES)
    kwargs: dict[str, Argument] = {"lambda_init": float(values["lambda_init"])} if "lambda_init" in values else {}
    call = Call(LAMBDA, tensors, kwargs)
    positions = {n: i for i, n in enumerate(LAMBDA_NAMES) if n in grads}
    if cotangent is None:
        return Built(Request((call,), inputs=tensors), positions)
    return Built(Request((call,), backward_from=0, cotangent=exact(cotangent, dtype), inputs=tensors), positions)


def lambda_subject(dtype: str = "float64", layout: Layout = "contiguous") -> Subject:
    """differential_lambda with vectors in ``dtype`` and memory ``layout``."""
    return Subject(LAMBDA, lambda values, grads, cotangent: _lambda_request(values, grads, cotangent, dtype, layout))


def attention_values(rng: np.random.Generator, spread: float = 1.2) -> dict[str, np.ndarray]:
    """Queries and keys of logits about ``spread`` in size, values, and a coefficient of 0.6."""
    b, h, t, d = sizes()
    found = {n: rng.standard_normal((b, h, t, d)) * spread for n in INPUT_NAMES[:4]}
    return {**found, "value": rng.standard_normal((b, h, t, 2 * d)), "coefficient": np.asarray(0.6)}


def identity_values() -> np.ndarray:
    """Value whose token t is the one-hot row e_t: the output is then the signed map (its first T columns)."""
    b, h, t, d = sizes()
    value = np.zeros((b, h, t, 2 * d))
    value[..., np.arange(t), np.arange(t)] = 1.0
    return value


def truth(values: Values, causal: bool) -> np.ndarray:
    """The oracle's output for probe inputs."""
    q1, k1, q2, k2, value = (values[n] for n in INPUT_NAMES)
    return oracle.differential_attention(q1, k1, q2, k2, value, float(values["coefficient"]), causal)
