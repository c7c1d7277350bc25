"""The toy experiment: a shared value offset comes out scaled by exactly 1 - λ, and what that does not show.

Four tokens carry values ``signal_t + offset``: a distinguishable signal per
token plus one offset shared by all of them. Rows of the signed map sum to
1 - λ, so the offset's contribution to every output row is (1 - λ)·offset,
whatever the maps look like. Sweeping λ over [0, 1], the experiment measures
that factor (the offset response) from the outputs with and without the
offset, and how much of the signal the two differing maps retain, relative to
λ = 0. The same sweep produces the reference's preview curve and the graded
curve of a submission.

The cancellation is of what the two maps share, and the panel says what it
does not show (docs/maths.md, 4.3), measured on the same implementation:
noise that is independent in the two maps is not cancelled (maps A + N1 and
A + N2 whose noise reaches the output uncorrelated and equally large give
output noise growing like √(1 + λ²)), and the signed map A1 - λA2, read out
with one-hot values at the toy's inputs, has negative entries and rows that
sum to 1 - λ, outside [0, 1] when λ is. Those calls (the probes) are a
second, diagnostic request made after the graded one: they never change a
verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from grader.core.exercise import ExperimentUnavailable
from grader.core.experiment import Axis, Frame, Measured, Panel, Series, Shown
from grader.core.invoke import Outcome, Request, invoke, invoke_many
from grader.exercises.diffattn import cases, expected, oracle
from grader.exercises.diffattn.cases import ATTENTION, AttentionCase
from grader.exercises.diffattn.expected import Truth
from grader.exercises.diffattn.suite import attention_request
from grader.toolkit.casesets import drawn_once
from grader.toolkit.compare import Comparison, combine, compare
from grader.toolkit.domain import exact, generator
from grader.toolkit.verdicts import tensor_result, unreadable
from grader.worker.client import Worker

LAMBDAS = tuple(round(0.1 * i, 10) for i in range(11))
MAP_LAMBDAS = tuple(round(-1.0 + 0.25 * i, 10) for i in range(13))  # -1, -0.75, …, 2: the signed map past both ends of [0, 1]
TOKENS = 4
WIDTH = 4  # D; values are 2D = 8 wide. The probes give each token its own key (k = I), which needs D >= T
VISIBLE = np.tril(np.ones((TOKENS, TOKENS), dtype=bool))  # the entries the causal mask leaves
NOISE_SHARE = 0.25  # the noise moves no visible entry of a map by more than this share of it
NEGATIVE_BELOW = -1e-9  # a signed-map entry below this is negative (rounding errors of float64 maps are far smaller)


@dataclass(frozen=True)
class Probes:
    """The calls of the measurements that are not graded, in the order they are sent."""

    noisy: list[AttentionCase]  # per λ of LAMBDAS: maps A + N1 and A + N2, the toy's signal values
    clean: list[AttentionCase]  # per λ of LAMBDAS: both maps A
    readout: list[AttentionCase]  # per λ of MAP_LAMBDAS: the toy's maps, one-hot values (the output is the signed map)

    @property
    def calls(self) -> list[AttentionCase]:
        """Every probe, in the order of the request."""
        return self.noisy + self.clean + self.readout


@dataclass(frozen=True)
class Sweep:
    """One pass over LAMBDAS: the cases with and without the offset and their outcome, then the probes' outcomes."""

    with_offset: list[AttentionCase]
    signal_only: list[AttentionCase]
    offset: np.ndarray
    outcome: Outcome
    probes: Probes
    probed: list[Outcome]  # one per call of ``probes.calls``


def toy_case(seed: int) -> tuple[AttentionCase, np.ndarray]:
    """The four-token sequence (values are the signal alone) and the shared offset."""
    rng = generator(seed, "toy_experiment")
    case = cases.attention_case(rng, (1, 1, TOKENS, WIDTH), "float64", True, note="toy experiment")
    offset = exact(rng.uniform(1.0, 3.0, 2 * WIDTH) * rng.choice([-1.0, 1.0], 2 * WIDTH), "float64")
    return case, offset


@drawn_once  # one set of case objects per seed, so that their truths are computed once
def sweep_cases(seed: int) -> tuple[list[AttentionCase], list[AttentionCase], np.ndarray]:
    """The cases at every λ with the offset, the same without it, and the offset."""
    base, offset = toy_case(seed)
    signal_only = [replace(base, coefficient=lam) for lam in LAMBDAS]
    with_offset = [replace(case, value=case.value + offset, note="toy experiment, values + offset") for case in signal_only]
    return with_offset, signal_only, offset


def noisy_maps(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The toy's first map A and two noisy copies A + N1 and A + N2 ([T, T]), whose noise is equal and uncorrelated at the output.

    Each noise starts as A ⊙ (G - Σ_s A G), G Gaussian: the first-order
    change of the map when its logits move by G, so rows keep summing to 1
    and masked entries stay 0. N2 is then made orthogonal to N1, and as
    large, in the inner product ⟨X, Y⟩ = Σ (XV) ⊙ (YV) of the output changes
    they cause with the toy's values V, and both are scaled so that no visible
    entry moves by more than NOISE_SHARE of itself (the maps stay positive).
    """
    base, _ = toy_case(seed)
    clean = oracle.attention_maps(base.q1, base.k1, True)[0, 0]
    values = base.value[0, 0]
    rng = generator(seed, "toy_noise")
    first, second = (clean * np.where(VISIBLE, g - (clean * g).sum(axis=1, keepdims=True), 0.0) for g in rng.standard_normal((2, TOKENS, TOKENS)))

    def inner(x: np.ndarray, y: np.ndarray) -> float:
        return float(np.sum((x @ values) * (y @ values)))

    second = second - inner(first, second) / inner(first, first) * first
    second = second * math.sqrt(inner(first, first) / inner(second, second))
    scale = NOISE_SHARE / max(float(np.max(np.abs(noise[VISIBLE]) / clean[VISIBLE])) for noise in (first, second))
    return clean, clean + scale * first, clean + scale * second


def _maps_case(base: AttentionCase, first: np.ndarray, second: np.ndarray, lam: float, note: str) -> AttentionCase:
    """``base`` at λ with queries and keys whose causal maps are ``first`` and ``second``: k = I and q = √D·log(map)."""
    keys = np.eye(TOKENS, WIDTH)[None, None]

    def queries(target: np.ndarray) -> np.ndarray:
        logits = np.zeros((TOKENS, WIDTH))
        logits[:, :TOKENS] = np.log(np.where(VISIBLE, target, 1.0))  # masked logits are never used
        return math.sqrt(WIDTH) * logits[None, None]

    return replace(base, q1=queries(first), k1=keys, q2=queries(second), k2=keys, coefficient=lam, note=note)


@drawn_once  # as sweep_cases: one set of case objects per seed
def probe_cases(seed: int) -> Probes:
    """The noise pair with and without the noise at every λ, and the signed-map readout at every λ of MAP_LAMBDAS."""
    base, _ = toy_case(seed)
    clean, first, second = noisy_maps(seed)
    readout = replace(base, value=np.eye(TOKENS, 2 * WIDTH)[None, None], note="toy experiment, one-hot values: the output is the signed map")
    return Probes(
        noisy=[_maps_case(base, first, second, lam, "toy experiment, maps with independent noise") for lam in LAMBDAS],
        clean=[_maps_case(base, clean, clean, lam, "toy experiment, the same maps without the noise") for lam in LAMBDAS],
        readout=[replace(readout, coefficient=lam) for lam in MAP_LAMBDAS],
    )


def offset_contribution(shifted: AttentionCase, plain: AttentionCase) -> Truth:
    """What output(values + offset) - output(values) must be for the one sequence: (1 - λ)·offset in every row."""
    truth = expected.shared_offset_difference(plain, shifted)
    return Truth(truth.values[0, 0], truth.allowed[0, 0])


def prepare(seed: int) -> None:
    """Compute the oracle's outputs for the sweep and the readout of ``seed`` once (a batch does, before it forks)."""
    with_offset, signal_only, _ = sweep_cases(seed)
    for case in with_offset + signal_only + probe_cases(seed).readout:
        expected.attention_output(case)


def sweep(worker: Worker, seed: int) -> Sweep:
    """Run differential_attention at every λ, with and without the offset, in one round trip; then the probes in another.

    The probes are a diagnostic request (:meth:`Worker.run`) sent after the
    graded one has been answered, so the graded outcome is the same with or
    without them, and their failure counts against no function. They are not
    sent when the graded request failed.
    """
    with_offset, signal_only, offset = sweep_cases(seed)
    calls = tuple(attention_request(case).calls[0] for case in with_offset + signal_only)
    outcome = invoke(worker, Request(calls))
    probes = probe_cases(seed)
    if outcome.failure is not None:
        probed = [Outcome(failure=f"not measured, since the sweep failed: {outcome.failure}")] * len(probes.calls)
    else:
        probed = invoke_many(worker, [attention_request(case) for case in probes.calls], diagnostic=True)
    return Sweep(with_offset, signal_only, offset, outcome, probes, probed)


def _output(case: AttentionCase, outcome: Outcome, index: int) -> tuple[np.ndarray | None, Comparison | None]:
    """The [T, 2D] output of call ``index`` of ``outcome`` (made with ``case``), or None and the problem found."""
    returned, problem = tensor_result(outcome, index)
    if returned is not None and returned.value is None:
        problem = unreadable(returned)
    elif returned is not None and returned.value is not None and returned.value.shape != case.value.shape:
        problem = f"expected an output of shape {list(case.value.shape)}, got {list(returned.shape or ())}"
    if problem or returned is None or returned.value is None:
        return None, Comparison(False, str(problem), None, f"{ATTENTION}({case.label()})")
    return returned.value[0, 0].astype(np.float64), None


def _outputs(result: Sweep) -> tuple[list[np.ndarray | None], list[Comparison]]:
    """The [T, 2D] output of every graded call (None where it failed) and the problems found."""
    found = [_output(case, result.outcome, index) for index, case in enumerate(result.with_offset + result.signal_only)]
    return [output for output, _ in found], [problem for _, problem in found if problem is not None]


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def noise_growth(noisy: list[np.ndarray | None], clean: list[np.ndarray | None]) -> list[float | None]:
    """‖O(A + N1, A + N2) - O(A, A)‖_F at each λ of LAMBDAS, relative to its value at λ = 0 (exactly √(1 + λ²) by construction)."""
    spreads = [None if a is None or b is None else _finite(float(np.linalg.norm(a - b))) for a, b in zip(noisy, clean)]
    base = spreads[0]
    return [None if spread is None or not base else _finite(spread / base) for spread in spreads]


def _signed_maps(outputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """The [T, T] signed maps read from outputs with one-hot values (their first T columns); None where not finite."""
    return [None if output is None or not np.all(np.isfinite(output)) else output[:, :TOKENS] for output in outputs]


def negative_share(outputs: list[np.ndarray | None]) -> list[float | None]:
    """The share of the visible entries of each read-out signed map that are negative (below NEGATIVE_BELOW)."""
    return [None if found is None else float(np.mean(found[VISIBLE] < NEGATIVE_BELOW)) for found in _signed_maps(outputs)]


def _row_sums(outputs: list[np.ndarray | None]) -> tuple[list[float | None], str | None]:
    """The mean row sum of each read-out signed map, and a sentence on how far the rows differ from one another."""
    sums = [None if found is None else found.sum(axis=1) for found in _signed_maps(outputs)]
    spreads = [float(np.ptp(row)) for row in sums if row is not None]
    note = None if not spreads else f"Each point is the mean of the {TOKENS} row sums, which differ from one another by at most {max(spreads):.2g}."
    return [None if row is None else float(np.mean(row)) for row in sums], note


def _probe_note(problems: list[Comparison | None], total: int) -> str | None:
    """A sentence on the probes of one panel that failed (the first reason, on one line), or None."""
    failed = [problem for problem in problems if problem is not None]
    if not failed:
        return None
    first = failed[0].message.strip().splitlines()[0] if failed[0].message.strip() else "no reason given"
    return f"{len(failed)} of {total} calls gave no usable output; the first: {first}"


def curves(result: Sweep) -> Measured:
    """Every panel's curve from ``result``: offset response (should be 1 - λ) and signal retained (relative to λ = 0)
    from the graded calls; noise growth, negative share and row sums from the probes."""
    outputs, _ = _outputs(result)
    n = len(LAMBDAS)
    offset = result.offset
    response: list[float | None] = []
    retained: list[float | None] = []
    reference = outputs[n]
    for shifted, plain in zip(outputs[:n], outputs[n:]):
        if shifted is None or plain is None:
            response.append(None)
            retained.append(None)
            continue
        response.append(_finite(float(((shifted - plain) @ offset).sum() / (TOKENS * offset @ offset))))
        base = None if reference is None else float(np.linalg.norm(reference))
        retained.append(_finite(float(np.linalg.norm(plain)) / base) if base else None)
    found = [_output(case, outcome, 0) for case, outcome in zip(result.probes.calls, result.probed)]
    probed, problems = [output for output, _ in found], [problem for _, problem in found]
    sums, spread = _row_sums(probed[2 * n :])
    notes = {
        "independent_noise": _probe_note(problems[: 2 * n], 2 * n),
        "negative_entries": _probe_note(problems[2 * n :], len(MAP_LAMBDAS)),
        "row_sums": _probe_note(problems[2 * n :], len(MAP_LAMBDAS)) or spread,
    }
    return Measured(
        curves={
            "offset_response": response,
            "signal_retained": retained,
            "independent_noise": noise_growth(probed[:n], probed[n : 2 * n]),
            "negative_entries": negative_share(probed[2 * n :]),
            "row_sums": sums,
        },
        notes={panel: note for panel, note in notes.items() if note is not None},
    )


def verdict(result: Sweep) -> Comparison:
    """At every λ, the offset's contribution must equal (1 - λ)·offset in every row, and the signal's output the oracle's.

    The second half keeps the check from being earned without attention: (1 - λ)·value alone passes the first.
    The probes are not judged.
    """
    outputs, problems = _outputs(result)
    if problems:
        return combine(problems)
    n = len(LAMBDAS)
    found = []
    for lam, shifted_case, plain_case, shifted, plain in zip(
        LAMBDAS, result.with_offset, result.signal_only, outputs[:n], outputs[n:]
    ):
        assert shifted is not None and plain is not None  # no problems: every output was read
        truth = offset_contribution(shifted_case, plain_case)
        found.append(compare(f"toy experiment at λ={lam:g}: offset contribution, output(values + offset) - output(values)", shifted - plain, truth.values, truth.allowed))
        signal = expected.attention_output(plain_case)
        found.append(compare(f"toy experiment at λ={lam:g}: output(values), the signal alone", plain, signal.values[0, 0], signal.allowed[0, 0]))
    return combine(found)


LAMBDA_AXIS = Axis("λ", LAMBDAS)
MAP_AXIS = Axis("λ", MAP_LAMBDAS)


@drawn_once  # every submission graded with one seed shares it
def frame(seed: int) -> Frame:
    """What every run of the experiment with ``seed`` shares: the panels, their axes and their truths.

    The truths: 1 - λ (maths.md 4.1 and 4.2), √(1 + λ²) for the noise (by
    the construction of :func:`noisy_maps`), and the float64 oracle's maps
    read out by the same measurement for the negative entries.
    """
    _, offset = toy_case(seed)
    oracle_readout = [expected.attention_output(case).values[0, 0] for case in probe_cases(seed).readout]
    visible = int(VISIBLE.sum())
    return Frame(
        name="toy_offset",
        title="Toy experiment",
        summary=(
            "Adding the same offset vector to every value row should move the output by (1 − λ) times that offset, "
            "since every row of both attention maps sums to 1. The first chart shows the factor measured for each λ; "
            "the second shows the norm of the output's signal part relative to its value at λ = 0.",
            "That cancellation is of what the two maps share. The last three charts, measured on the same "
            "implementation and not graded, show what it does not do: noise that the maps do not share is not "
            "cancelled, and the signed map A₁ − λA₂ is not a probability distribution.",
        ),
        inputs=(Shown("Shared value offset", tuple(float(x) for x in offset)),),
        panels=(
            Panel(
                "offset_response", "Offset response against λ",
                "The factor by which the shared offset reaches the output, from the outputs with and without it: "
                "exactly 1 − λ whatever the maps, since every row of both maps sums to 1.",
                LAMBDA_AXIS, "offset response", (Series("Expected (1 − λ)", "expected", [1.0 - lam for lam in LAMBDAS]),), (0.0, 1.0),
            ),
            Panel(
                "signal_retained", "Signal retained against λ",
                "The norm of the output without the offset, relative to λ = 0: how much of the tokens' own signal "
                "is left once the second map is subtracted.",
                LAMBDA_AXIS, "signal retained", (), (0.0, 1.0),
            ),
            Panel(
                "independent_noise", "Independent noise against λ",
                "Noise that is independent in the two maps is not cancelled: for equal, uncorrelated noise its "
                "spread in the output grows like √(1 + λ²), while a shared offset shrinks like 1 − λ. "
                f"Measured as the change of the output when each map gets its own noise (up to {NOISE_SHARE:.0%} of an entry).",
                LAMBDA_AXIS, "output noise, relative to λ = 0",
                (
                    Series("Equal, uncorrelated noise: √(1 + λ²)", "expected", [math.sqrt(1.0 + lam * lam) for lam in LAMBDAS]),
                    Series("Shared offset: 1 − λ", "context", [1.0 - lam for lam in LAMBDAS]),
                ),
                (0.0, 1.0),
            ),
            Panel(
                "negative_entries", "Negative entries of the signed map against λ",
                f"Of the {visible} entries of A₁ − λA₂ that the causal mask leaves visible, the share that is negative, "
                "read from the output with one-hot values at the toy's inputs; the expected curve is the float64 "
                "oracle's maps read the same way.",
                MAP_AXIS, "share of entries below 0", (Series("Expected (float64 oracle)", "expected", negative_share(oracle_readout)),), (0.0, 1.0),
            ),
            Panel(
                "row_sums", "Row sums of the signed map against λ",
                "Every row of A₁ − λA₂ sums to 1 − λ, which leaves [0, 1] when λ does: with negative entries and "
                "such rows, the signed map is not a probability distribution.",
                MAP_AXIS, "row sum", (Series("Expected (1 − λ)", "expected", [1.0 - lam for lam in MAP_LAMBDAS]),), (0.0, 1.0),
            ),
        ),
        notes=(
            "The check toy_offset_scaling grades the calls behind the first two charts; the last three are "
            "measured in a separate request after it and never change a score.",
            "The noise is built rather than sampled: each map's noise is a first-order change of its logits, the "
            "two made uncorrelated and equally large in the output they cause, so the expected curve is exactly "
            "√(1 + λ²).",
        ),
    )  # fmt: skip


def experiment(worker: Worker, seed: int) -> Measured:
    """The curves from ``worker`` (used for the reference's preview)."""
    result = sweep(worker, seed)
    if result.outcome.failure is not None:
        raise ExperimentUnavailable(result.outcome.failure)
    return curves(result)
