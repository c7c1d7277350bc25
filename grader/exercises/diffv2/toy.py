"""The toy experiment: a value offset shared by every token comes out scaled by 1 − σ(ℓ), per token and head.

One short sequence (B = 1, T = 7, Hq = 4 query heads in H = 2 pairs,
Hkv = 2, D = 4, float64, causal) carries values ``signal_t + c``: a signal
that differs from token to token plus one offset c shared by every token.
Whatever the two maps of a pair look like, each row of the pair's signed map
sums to ``1 − σ(ℓ[t, i])``, so the offset's contribution to output
``[t, i]`` is exactly ``(1 − σ(ℓ[t, i]))·c``. The experiment measures that
factor from the outputs with and without the offset (the projection of
their difference onto c, over c·c):

* ``offset_response``: every gate logit set to one value ℓ, swept from −6
  to 6; the mean factor over tokens and heads against ℓ;
* ``per_token``: one call whose gate logits ramp along the sequence,
  ℓ_t = 2t − 6; the mean factor over heads against the token t.

The same calls give the reference's preview and the graded submission's
curves; the check compares every token and head, not the means.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from grader.core.exercise import ExperimentUnavailable
from grader.core.experiment import Axis, Frame, Measured, Panel, Series, Shown
from grader.core.invoke import Outcome, Request, invoke
from grader.exercises.diffv2 import cases, expected, oracle, suite
from grader.exercises.diffv2.cases import DIFF_V2, Case
from grader.toolkit import domain, verdicts
from grader.toolkit.casesets import drawn_once
from grader.toolkit.compare import Comparison, combine, compare
from grader.toolkit.domain import exact
from grader.worker.client import Worker

SWEEP = tuple(float(x) for x in range(-6, 7))  # the shared gate logit of the offset_response panel
TOKENS = 7
RAMP = tuple(2.0 * t - 6.0 for t in range(TOKENS))  # ℓ_t of the per_token panel
DIMS = (1, TOKENS, 4, 2, 4)  # B, T, Hq, Hkv, D


@dataclass(frozen=True)
class Pair:
    """One gate setting: the call without the offset and the call with it."""

    plain: Case
    shifted: Case


@dataclass(frozen=True)
class Sweep:
    """Every pair of the experiment (the sweep, then the ramp) and the outcome of their calls."""

    pairs: tuple[Pair, ...]
    offset: np.ndarray
    outcome: Outcome


@drawn_once  # one set of case objects per seed, so that their truths are computed once
def pairs(seed: int) -> tuple[tuple[Pair, ...], np.ndarray]:
    """The pairs of every gate setting (the SWEEP values, then the RAMP), and the offset c."""
    rng = domain.generator(seed, "toy_experiment")
    base = cases.case(rng, DIFF_V2, DIMS, "float64", True, note="toy experiment")
    shifted = cases.shared_offset(base, rng)
    offset = shifted.v[0, 0, 0] - base.v[0, 0, 0]
    assert base.lambda_logits is not None
    settings = [np.full(base.lambda_logits.shape, x) for x in SWEEP]
    settings.append(np.broadcast_to(np.array(RAMP)[None, :, None], base.lambda_logits.shape).copy())
    found = []
    for gates in settings:
        gates = exact(gates, base.dtype)
        found.append(Pair(replace(base, lambda_logits=gates), replace(shifted, lambda_logits=gates, note="toy experiment, values + c")))
    return tuple(found), offset


def prepare(seed: int) -> None:
    """Compute the oracle's outputs for the experiment of ``seed`` once (a batch does, before it forks)."""
    for pair in pairs(seed)[0]:
        expected.output(pair.plain)
        expected.output(pair.shifted)


def sweep(worker: Worker, seed: int) -> Sweep:
    """Every call of the experiment, in one round trip."""
    found, offset = pairs(seed)
    calls = tuple(suite.request(case).calls[0] for pair in found for case in (pair.plain, pair.shifted))
    return Sweep(found, offset, invoke(worker, Request(calls)))


def _outputs(result: Sweep) -> tuple[list[tuple[np.ndarray, np.ndarray] | None], list[Comparison]]:
    """Per pair, the two [T, H, D] outputs (None where a call failed), and the problems found."""
    found: list[tuple[np.ndarray, np.ndarray] | None] = []
    problems = []
    for number, pair in enumerate(result.pairs):
        both = []
        for position, case in ((2 * number, pair.plain), (2 * number + 1, pair.shifted)):
            returned, problem = verdicts.tensor_result(result.outcome, position)
            if returned is not None and returned.value is None:
                problem = verdicts.unreadable(returned)
            elif returned is not None and returned.value is not None and returned.value.shape != case.output_shape:
                problem = f"expected an output of shape {list(case.output_shape)}, got {list(returned.value.shape)}"
            if problem is not None or returned is None or returned.value is None:
                problems.append(Comparison(False, str(problem), None, f"{DIFF_V2}({case.label()})"))
            else:
                both.append(np.asarray(returned.value, dtype=np.float64)[0])
        found.append((both[0], both[1]) if len(both) == 2 else None)
    return found, problems


def _factor(outputs: tuple[np.ndarray, np.ndarray] | None, offset: np.ndarray) -> np.ndarray | None:
    """[T, H]: the projection of output(values + c) − output(values) onto c, over c·c."""
    if outputs is None:
        return None
    plain, shifted = outputs
    return np.asarray((shifted - plain) @ offset / (offset @ offset))


def _mean(values: np.ndarray | None, axis: int | None = None) -> list[float | None]:
    """The mean (over ``axis``) as a list of finite floats, None where there is none."""
    if values is None:
        return [None]
    means = np.atleast_1d(np.mean(values, axis=axis))
    return [float(m) if np.isfinite(m) else None for m in means]


def measured(result: Sweep) -> Measured:
    """The curves of one run: the mean factor at every swept ℓ, and per token along the ramp."""
    outputs, _ = _outputs(result)
    factors = [_factor(found, result.offset) for found in outputs]
    response = [_mean(f)[0] for f in factors[: len(SWEEP)]]
    ramp = factors[len(SWEEP)]
    per_token = _mean(ramp, axis=1) if ramp is not None else [None] * TOKENS
    return Measured({"offset_response": response, "per_token": per_token})


def verdict(result: Sweep) -> Comparison:
    """Every token and head of every pair: the offset's contribution must be (1 − σ(ℓ))·c, and the plain output the oracle's.

    The second half keeps the check from being earned without attention: (1 − σ(ℓ))·v alone passes the first.
    """
    outputs, problems = _outputs(result)
    if problems:
        return combine(problems)
    found = []
    for number, (pair, both) in enumerate(zip(result.pairs, outputs)):
        assert both is not None
        plain, shifted = both
        where = f"ℓ = {SWEEP[number]:g} everywhere" if number < len(SWEEP) else "ℓ_t = 2t − 6 along the sequence"
        truth = expected.offset_response(pair.plain, pair.shifted)
        found.append(compare(f"toy experiment at {where}: output(values + c) − output(values)", shifted - plain, truth.values[0], truth.allowed[0]))
        signal = expected.output(pair.plain)
        found.append(compare(f"toy experiment at {where}: output(values)", plain, signal.values[0], signal.allowed[0]))
    return combine(found)


def frame(seed: int) -> Frame:
    """What every run of the experiment with ``seed`` shares: the panels, their truths and the offset."""
    _, offset = pairs(seed)
    complement = [oracle.sigmoid(-x) for x in SWEEP]
    return Frame(
        name="toy_offset_gate",
        title="Toy experiment: a shared value offset is scaled by 1 − σ(ℓ), token by token",
        summary=(
            f"A sequence of {TOKENS} tokens carries values that differ from token to token plus one offset c shared by "
            "every token. Each row of a pair's signed map A₂ᵢ − σ(ℓ)A₂ᵢ₊₁ sums to 1 − σ(ℓ), so the offset leaves "
            "every token's output of every head multiplied by exactly 1 − σ(ℓ[t, i]), whatever the two maps look like.",
            "DIFF V2 bounds the gate λ = σ(ℓ) to (0, 1), per token and head: the signed map's row sums stay in (0, 1), "
            "so a pair can shrink what it reads but never flip or amplify it. DIFF V1's λ = exp(q1·k1) − exp(q2·k2) + "
            "λ_init was one unconstrained number per layer, whose factor 1 − λ could be any real number.",
        ),
        panels=(
            Panel(
                id="offset_response",
                title="Offset response against the gate logit ℓ",
                caption="Every gate logit set to ℓ; the offset's share of the output, averaged over tokens and heads. "
                "A correct implementation follows 1 − σ(ℓ).",
                x=Axis("gate logit ℓ", SWEEP),
                y_label="offset response",
                series=(Series("1 − σ(ℓ) (expected)", "expected", complement),),
                y_includes=(0.0, 1.0),
            ),
            Panel(
                id="per_token",
                title="One call, a different gate for every token",
                caption="Gate logits ℓ_t = 2t − 6 along the sequence; the offset's share of token t's output, "
                "averaged over heads. A correct implementation follows 1 − σ(ℓ_t).",
                x=Axis("token t", tuple(float(t) for t in range(TOKENS))),
                y_label="offset response",
                series=(Series("1 − σ(ℓ_t) (expected)", "expected", [oracle.sigmoid(-x) for x in RAMP]),),
                y_includes=(0.0, 1.0),
            ),
        ),
        inputs=(Shown("shared offset c", tuple(float(x) for x in offset)),),
        notes=(
            "A controlled example of the cancellation mechanism: it does not claim that every kind of noise shrinks this way.",
        ),
    )


def experiment(worker: Worker, seed: int) -> Measured:
    """The curves of the implementation loaded in ``worker`` (the reference's preview)."""
    result = sweep(worker, seed)
    if result.outcome.failure is not None:
        raise ExperimentUnavailable(result.outcome.failure)
    return measured(result)
