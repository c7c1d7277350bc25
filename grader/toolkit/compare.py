"""Element-wise comparison of a result with the truth, and the message it earns.

The caller supplies ``allowed``, a per-element bound on the absolute error
(the exercise derives it from rounding analysis). An element passes when it is
finite and ``|got - expected| <= allowed``. The report names the element that
is worst relative to its allowance, and the greatest absolute difference, in
the manner of ``torch.testing``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Comparison:
    """The verdict on one result: whether it matched, why not, how close it came, and where."""

    ok: bool
    message: str
    worst_ratio: float | None  # largest |error| / allowed; None when no number could be formed
    context: str = ""  # what was compared, e.g. the call and its inputs


def compare(what: str, got: np.ndarray | None, expected: np.ndarray, allowed: np.ndarray | float) -> Comparison:
    """Compare ``got`` with ``expected`` element-wise within ``allowed``."""
    expected = np.asarray(expected, dtype=np.float64)
    if got is None:
        return Comparison(False, "no values came back", None, what)
    got64 = np.asarray(got, dtype=np.float64)
    if got64.shape != expected.shape:
        return Comparison(False, f"expected shape {list(expected.shape)}, got {list(got64.shape)}", None, what)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), expected.shape)
    error, ratio = error_ratios(got64, expected, allowed)
    bad = ratio > 1.0
    worst = _index(np.argmax(ratio), ratio.shape) if ratio.size else ()
    worst_ratio = float(ratio[worst]) if ratio.size else 0.0
    if not bad.any():
        return Comparison(True, f"all {expected.size} elements within tolerance", worst_ratio, what)
    lines = [
        f"Mismatched elements: {int(bad.sum())} / {expected.size} ({100.0 * bad.mean():.1f}%).",
        *_confined(bad),
        "Worst element at index "
        + f"{worst}: got {_number(got64[worst])}, expected {_number(expected[worst])}, "
        + f"absolute error {_number(error[worst])}, relative error {_relative(error[worst], expected[worst])}, "
        + f"allowed {allowed[worst]:.3g}.",
    ]
    if np.isfinite(error).all():
        largest = _index(np.argmax(error), error.shape)
        lines.append(
            f"Greatest absolute difference: {error[largest]:.6g} at index {largest} "
            f"(up to {allowed[largest]:.3g} allowed)."
        )
    else:
        count = int((~np.isfinite(got64)).sum())
        lines.append(f"Non-finite values: {count} element(s) are NaN or infinite.")
    return Comparison(False, "\n".join(lines), worst_ratio if np.isfinite(worst_ratio) else None, what)


def error_ratios(got: np.ndarray, expected: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|got - expected| (infinite where got is not finite) and that error over ``allowed``, element-wise.

    The arrays have one shape; an element passes when its ratio is at most 1.
    """
    error = np.array(np.abs(got - expected))  # an array even for 0-dim inputs
    error[~np.isfinite(got)] = np.inf
    ratio = np.divide(error, allowed, out=np.where(error > 0, np.inf, 0.0), where=allowed > 0)
    return error, ratio


def combine(comparisons: list[Comparison]) -> Comparison:
    """One verdict for several: failures grouped by message (with where they happened), the worst ratio kept."""
    ratios = [c.worst_ratio for c in comparisons if c.worst_ratio is not None]
    unknown = any(c.worst_ratio is None for c in comparisons)
    worst = None if unknown or not ratios else max(ratios)
    groups: dict[str, list[str]] = {}
    for c in comparisons:
        if not c.ok:
            groups.setdefault(c.message, []).append(c.context)
    if groups:
        return Comparison(False, "\n\n".join(_located(m, where) for m, where in groups.items()), worst)
    summary = f"{len(comparisons)} comparison(s) within tolerance"
    if worst is not None:
        summary += f"; the closest came to {100.0 * worst:.2g}% of the allowed error"
    return Comparison(True, summary + ".", worst)


def explained(verdict: Comparison, notes: list[str | None]) -> Comparison:
    """``verdict`` led by the ``notes`` that may explain it, when it failed and some note is given; else ``verdict``."""
    given = [note for note in notes if note]
    if verdict.ok or not given:
        return verdict
    return Comparison(False, "\n".join(given) + "\n\n" + verdict.message, verdict.worst_ratio)


def _located(message: str, contexts: list[str]) -> str:
    """A failure message with where it happened: the problem on the first line, then where."""
    first, _, rest = message.partition("\n")
    if len(contexts) > 1:
        where = f"in {len(contexts)} calls, for example {contexts[0]}"
    elif contexts[0]:
        where = f"in {contexts[0]}"
    else:
        return message
    return f"{first}\n({where})" + (f"\n{rest}" if rest else "")


def _confined(bad: np.ndarray) -> list[str]:
    """A line saying the smallest box of indices, as a slice, that holds every mismatched element, when it leaves some
    index of some axis out (the last batch element's last heads, the tokens past a block): where the fault lives."""
    if bad.sum() < 2:  # the worst element's index says it
        return []
    spans = []
    for axis in range(bad.ndim):
        hit = np.flatnonzero(bad.any(axis=tuple(a for a in range(bad.ndim) if a != axis)))
        first, last = int(hit[0]), int(hit[-1])
        spans.append(":" if (first, last) == (0, bad.shape[axis] - 1) else str(first) if first == last else f"{first}:{last + 1}")
    if all(span == ":" for span in spans):
        return []
    return [f"Every mismatched element lies within [{', '.join(spans)}] of shape {list(bad.shape)}; the elements outside are within tolerance."]


def _index(flat: np.intp, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape))


def _number(value: float) -> str:
    return f"{float(value):.9g}"


def _relative(error: float, expected: float) -> str:
    return f"{error / abs(expected):.3g}" if expected != 0 else "inf (expected 0)"
