"""Which sizes make a function fail: a probe that places a contract finding of sizes that do not fit.

A function that raises "the size of tensor a must match the size of tensor b"
or returns a tensor of the wrong shape tells, by itself, only the line where
the sizes met. Which sizes it fails for tells the part of it that is wrong:
one that works only when every key/value head serves one query head groups
the heads wrongly; one that works only when there are as many tokens as
heads has read one axis for the other. :func:`working` calls the function on
inputs whose sizes all differ (the base) and on variants of the base that
each make one pair of sizes equal, or one size 1; :func:`placed` reads the
answer: when the base fails and
the variants that work all point at one component (the exercise declares
which, :class:`SizeVariant`), the finding takes that component and says
which sizes work. Variants that point at several components, one that could
be several parts' (declared None), or none that works, leave the finding as
it was: the probe places nothing it cannot tell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from grader.toolkit import probes
from grader.toolkit.probes import Built
from grader.toolkit.rootcause import UNPLACED, Finding
from grader.worker.client import Worker

Sizes = Mapping[str, int]
"""The sizes of one call's inputs by name (e.g. {"B": 2, "T": 11, "Hq": 12, "Hkv": 3, "D": 5})."""


@dataclass(frozen=True)
class SizeVariant:
    """Sizes changed from the base (``changes``), what they have in common in words ("one query head per key/value head,
    Hq = Hkv") and the component of a function that works with them alone (None: several parts of the function could
    make it work, so that it tells none)."""

    words: str
    changes: Sizes
    component: str | None


@dataclass(frozen=True)
class SizeProbe:
    """How to call one function on inputs of given sizes: the base sizes, the variants, a request for sizes, and the output
    shape the contract gives for them."""

    base: Sizes
    variants: Sequence[SizeVariant]
    build: Callable[[Sizes], Built]
    shape: Callable[[Sizes], tuple[int, ...]]
    options: str = ""  # the options the calls are made with, in words ("with causal=False"), when they are not the defaults


def _in_words(sizes: Sizes) -> str:
    """"B = 2, T = 11, ..." for ``sizes``."""
    return ", ".join(f"{name} = {size}" for name, size in sizes.items())


def working(worker: Worker, probe: SizeProbe) -> tuple[SizeVariant, ...] | None:
    """The variants of ``probe`` for which the function runs and returns the contract's shape, in one round trip; None when
    it does so for the base sizes as well (the fault does not show there, so the variants tell nothing)."""
    sizes = [probe.base, *({**probe.base, **variant.changes} for variant in probe.variants)]
    outcomes = probes.ask(worker, [probe.build(s) for s in sizes])

    def fits(index: int) -> bool:
        out = probes.output(outcomes[index])
        return out is not None and out.shape == probe.shape(sizes[index])

    return None if fits(0) else tuple(variant for i, variant in enumerate(probe.variants, start=1) if fits(i))


def first_failing(worker: Worker, probes_: Sequence[SizeProbe]) -> tuple[SizeProbe, tuple[SizeVariant, ...] | None]:
    """The first of ``probes_`` (one function called with different options) whose base sizes fail, with :func:`working`'s
    answer for it; the last probe and None when none fails (a fault of sizes may show under one option alone: a library
    call made only without the causal mask)."""
    for probe in probes_:
        works = working(worker, probe)
        if works is not None:
            return probe, works
    return probes_[-1], None


def placed(finding: Finding, probe: SizeProbe, works: Sequence[SizeVariant] | None) -> Finding:
    """``finding`` (a contract finding of sizes that do not fit that nothing placed yet, :data:`~grader.toolkit.rootcause.UNPLACED`)
    placed by the variants its function works for (``works``, :func:`working`), or unchanged when they do not tell (see the
    module's docstring)."""
    if finding.component != UNPLACED or works is None:
        return finding
    components = {variant.component for variant in works}
    component = components.pop() if len(components) == 1 else None
    if component is None:
        return finding
    only = " or ".join(variant.words for variant in works)
    return replace(finding, component=component,
                   evidence=f"{finding.evidence} Called on inputs of sizes {_in_words(probe.base)}{probe.options and ' ' + probe.options} it "
                            f"fails too; it runs and returns the right shape only when {only}, so the step that relates those sizes is wrong.")  # fmt: skip
