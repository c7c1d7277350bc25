"""Root causes: from failed checks, probe findings and named misconceptions to a short ordered list.

A :class:`Finding` says what is wrong in one function and which part of it
(a component of :data:`COMPONENTS`), with its evidence in one or two
sentences and advice; the probes (:mod:`grader.toolkit.probes`), the
contract slips (:mod:`grader.toolkit.slips`) and the exercise's named
misconceptions produce them. :func:`assemble` merges findings that say the
same thing, keeps a named misconception only where the probes agree with it
(same function and component) or found nothing at its stage, orders them
(the file does not load, then the contract, then forward values, then
gradients; within a stage, a function that another graded function calls
before its caller, whose failures may be its consequences) and gives each failed check to the first cause that explains it:
one that makes the function's results unusable (the file does not load, a
wrong type or shape, an exception on every call), else one that tests the
check's own property, else the first whose consequence the check only
suffers. A check explained as a consequence gets a note in place of its
message: it could not be judged because of an earlier cause.

Each check's declaration says what it judges (a :class:`Role`, the
``judges`` of :func:`grader.core.plugin.check`); a check without one is
taken to involve every function and to judge its values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

COMPONENTS = (
    "load", "type", "shape", "dtype", "mutation", "graph", "mask", "scale", "softmax", "branch", "sign",
    "coefficient", "value", "lambda", "backward", "randomness", "state", "stability", "strided", "heads", "gate", "layout", "output",
)  # fmt: skip
UNPLACED = "shape"
"""The component of a finding of sizes that do not fit that nothing has placed in a part of the function yet."""
STAGES = ("load", "contract", "forward", "gradients")
ASPECTS = ("type", "dtype", "strided", "coefficient", "mutation", "graph", "binding", "values", "gradients")
"""What a check judges: the result's type and shape, its dtype, strided inputs accepted, coefficient kinds
accepted, inputs left unmodified, a graph attached, arguments bound, forward values, gradients."""


@dataclass(frozen=True)
class Finding:
    """One thing wrong in one function (None: the whole file), with what shows it and what to do.

    ``aspect`` is the kind of check that tests this very fault (its message
    then stands); ``explains`` the kinds of checks that fail because of it;
    ``blocks``: the function's results cannot be used at all, so every check
    of it fails because of this. ``inputs``: for a gradient finding, the
    inputs whose gradients it concerns (empty: all). ``note``: what a check
    failed only as a consequence says instead of its message (None: it keeps
    its message). ``public``: whether students may see it (it comes from the
    probes' own inputs or from the student's own code and exceptions, never
    from a hidden check's inputs or expected values). ``signature``: text
    that, found in a failed check's message (in any case), shows the check
    suffers this fault (an exception's wording), whatever the check judges.
    ``via``: the graded function whose result was the input this fault shows
    with, and only with; when that function has a fault of its own, this one
    is its consequence and no root cause.
    """

    function: str | None
    component: str
    stage: str
    title: str
    evidence: str
    advice: str
    aspect: str | None = None
    explains: frozenset[str] = frozenset()
    blocks: bool = False
    inputs: tuple[str, ...] = ()
    note: str | None = None
    public: bool = True
    signature: str | None = None
    via: str | None = None

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS or self.stage not in STAGES:
            raise ValueError(f"unknown component {self.component!r} or stage {self.stage!r}")


@dataclass(frozen=True)
class Role:
    """What a check judges (one of :data:`ASPECTS`, and ``also`` others), of which functions, and for gradients of which inputs per function."""

    functions: tuple[str, ...]
    aspect: str
    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    also: tuple[str, ...] = ()


@dataclass
class Evidence:
    """What an exercise's diagnosis found: findings, named misconceptions (as findings), the probes that ran,
    maps read out of the submission (JSON-ready, see docs/report-schema.md)."""

    findings: list[Finding] = field(default_factory=list)
    hints: list[Finding] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)
    maps: list[dict[str, Any]] = field(default_factory=list)


def _involves(finding: Finding, role: Role, message: str) -> bool:
    """Whether ``finding`` can explain a failure of a check with ``role`` whose message is ``message``."""
    if finding.stage == "load" and finding.function is None:
        return True
    if finding.function is not None and finding.function not in role.functions:
        return False
    if finding.blocks or finding.stage == "load" or (finding.signature is not None and finding.signature.lower() in message.lower()):
        return True
    judged = (role.aspect, *role.also)
    if not set(judged) & (finding.explains | {finding.aspect}):
        return False
    wanted = role.inputs.get(finding.function or "", ())
    return not (finding.inputs and wanted) or bool(set(finding.inputs) & set(wanted))


def merged(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per function, component and stage: the first, with the second's evidence when it adds any."""
    kept: dict[tuple[str | None, str, str], Finding] = {}
    for finding in findings:
        key = (finding.function, finding.component, finding.stage)
        first = kept.get(key)
        if first is None:
            kept[key] = finding
        elif finding.evidence not in first.evidence and first.evidence.count(". ") < 1:
            kept[key] = replace(first, evidence=f"{first.evidence} {finding.evidence}", public=first.public and finding.public,
                                inputs=tuple(dict.fromkeys(first.inputs + finding.inputs)))  # fmt: skip
    return list(kept.values())


def with_hints(findings: Sequence[Finding], hints: Sequence[Finding]) -> list[Finding]:
    """The findings, each named misconception merged into the finding of its function and component.

    A misconception that the probes contradict (they localised another
    component of its function at the same stage) is dropped; one about which
    they found nothing at its stage is kept as a finding of its own. A
    misconception of the forward values of a function whose sizes do not fit
    in some calls, with nothing placing that fault (:data:`UNPLACED`), places
    it: the calls that did run computed that mistake, and a mistake of one
    part of the function that runs for some sizes only (a gate or a mask
    broadcast along the wrong axis, heads paired or grouped by the wrong
    sizes) makes the sizes clash for the others.
    """
    found = list(findings)
    for hint in hints:
        same = [i for i, f in enumerate(found) if (f.function, f.component) == (hint.function, hint.component)]
        unplaced = [i for i, f in enumerate(found) if f.function == hint.function and f.component == UNPLACED and f.stage == "contract"]
        if same:
            first = found[same[0]]
            if hint.evidence not in first.evidence:
                found[same[0]] = replace(first, evidence=f"{first.evidence} {hint.evidence}")
        elif unplaced and hint.stage == "forward":
            shape = found[unplaced[0]]
            found[unplaced[0]] = replace(shape, component=hint.component, evidence=f"{shape.evidence} The calls that ran match a known mistake: {hint.title}",
                                       advice=f"{shape.advice}; {hint.advice}")
        elif not any(f.function == hint.function and f.stage == hint.stage for f in findings):
            found.append(hint)
    return found


@dataclass(frozen=True)
class Diagnosis:
    """The ordered root causes, the failed check ids each explains, the notes replacing consequences' messages."""

    causes: tuple[Finding, ...]
    checks: tuple[tuple[str, ...], ...]
    unexplained: tuple[str, ...]
    notes: Mapping[str, str]


def assemble(
    records: Sequence[Mapping[str, Any]], roles: Mapping[str, Role], findings: Sequence[Finding], callers: Mapping[str, int] = MappingProxyType({})
) -> Diagnosis:
    """Order the findings and give each failed check (``records``: the report's check objects) to one of them.

    ``callers``: for each function, how many of the graded functions call it (directly or through helpers); within a
    stage, findings of a function called by more come first.
    """
    faulty = {f.function for f in findings if f.via is None}
    # an exception a probe reproduced under a contrast of its own (sizes that clash in non-contiguous memory only) is that
    # probe's finding, which says where it comes from; the contract slip of the same wording is its symptom
    reproduced = {(f.function, f.signature) for f in findings if f.stage != "contract" and f.signature is not None}
    standing = [f for f in findings if (f.via is None or f.via not in faulty) and not (f.stage == "contract" and (f.function, f.signature) in reproduced)]
    # an exception of sizes that do not fit, raised by some calls only and placed in no part, of a function whose returned
    # values the probes found wrong: more likely a symptom of that fault (an axis put in the wrong place clashes only at some
    # sizes) than a cause of its own, so it follows the forward findings
    valued = {f.function for f in standing if f.stage == "forward"}

    def stage(finding: Finding) -> float:
        symptom = (finding.stage == "contract" and finding.component == UNPLACED and finding.signature is not None and not finding.blocks
                   and finding.function in valued)  # fmt: skip
        return STAGES.index("forward") + 0.5 if symptom else STAGES.index(finding.stage)

    ordered = sorted(merged(standing), key=lambda f: (stage(f), -callers.get(f.function or "", 0)))
    everything = tuple(dict.fromkeys(f.function for f in ordered if f.function is not None))
    default = Role(everything, "values")
    explained: dict[int, list[str]] = {}
    unexplained, notes = [], {}
    for record in records:
        if record.get("status") != "failed":
            continue
        role = roles.get(str(record["id"]), default)
        candidates = [i for i, f in enumerate(ordered) if _involves(f, role, str(record.get("message", "")))]
        if not candidates:
            unexplained.append(str(record["id"]))
            continue
        blocking = [i for i in candidates if ordered[i].blocks or ordered[i].stage == "load"]
        direct = [i for i in candidates if ordered[i].aspect in (role.aspect, *role.also)]
        # a check whose message quotes a function's exception failed for it, before what the probes found of that function's
        # own aspect (they met the same exception); another function's fault may have caused it
        raised = [i for i in candidates if ordered[i].stage == "contract" and _shown(ordered[i], record)
                  and all(ordered[j].function == ordered[i].function for j in direct)]  # fmt: skip
        chosen = (blocking or raised or direct or candidates)[0]
        explained.setdefault(chosen, []).append(str(record["id"]))
        cause = ordered[chosen]
        shown = _shown(cause, record)
        if chosen not in direct and not shown and cause.stage != "load" and cause.note and cause.public:  # (a message showing the fault stands)
            notes[str(record["id"])] = f"Not judged: {cause.note}. See the root cause “{cause.title}”."
    kept = sorted(explained)  # a cause that explains no failed check is no root cause
    return Diagnosis(
        causes=tuple(ordered[i] for i in kept),
        checks=tuple(tuple(explained.get(i, ())) for i in kept),
        unexplained=tuple(unexplained),
        notes=notes,
    )


def _shown(cause: Finding, record: Mapping[str, Any]) -> bool:
    """Whether a check's message (``record``: its report object) quotes ``cause``'s signature."""
    return cause.signature is not None and cause.signature.lower() in str(record.get("message", "")).lower()


def to_json(diagnosis: Diagnosis) -> list[dict[str, Any]]:
    """The report's ``root_causes`` (docs/report-schema.md)."""
    return [
        {
            "function": cause.function,
            "component": cause.component,
            "title": cause.title,
            "evidence": cause.evidence,
            "advice": cause.advice,
            "checks": list(checks),
            "visibility": "public" if cause.public else "hidden",
        }
        for cause, checks in zip(diagnosis.causes, diagnosis.checks)
    ]
