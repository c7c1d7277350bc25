"""The diagnosis of DIFF V2: what each check judges, the calls the checks made, which probes to run.

:func:`diagnose` is the exercise's ``Exercise.diagnose``: after the checks of
a submission ran and some failed, it reads the checks' own calls for
contract slips (:mod:`grader.toolkit.slips`), turns the checks' named
misconceptions into findings (:data:`HINTS`), runs the probes of every
function with a failed check (:mod:`grader.exercises.diffv2.probes`) and
hands all of it, with what each check judges (the checks' declarations), to the
harness, which orders the root causes (:mod:`grader.toolkit.rootcause`).

``diff_v2_attention`` usually calls the submission's own ``gqa_attention``;
when its source does, a fault of ``gqa_attention`` also explains the checks
of ``diff_v2_attention`` (:func:`roles`), and ``diff_v2_attention``'s probes
of a stage are skipped once ``gqa_attention``'s have localised a fault there
(they would only find the same fault again, under the wrong name).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from grader.core.invoke import Outcome
from grader.core.plugin import GradingContext
from grader.exercises.diffv2 import expected, probes, suite
from grader.exercises.diffv2.cases import DIFF_V2, EXPANSIONS, GQA, TENSORS, Case
from grader.toolkit import backward_calls, domain, findings, signatures, sizes, slips
from grader.toolkit import probes as toolkit_probes
from grader.toolkit.rootcause import Evidence, Finding, Role
from grader.toolkit.slips import Observed
from grader.toolkit.verdicts import function_problem, values_verdict

BOTH = (GQA, DIFF_V2)

# A named misconception (grader/exercises/diffv2/misconceptions.py) -> the function, component and stage it localises.
# The shared output variants name gqa_attention: diff_v2_attention is graded on them only through its maps.
_SHARED = {"kv_heads_tiled": "heads", "scale_root_2d": "scale", "scale_inverse_d": "scale", "no_scale": "scale",
           "causal_default_false": "mask", "no_mask": "mask", "mask_misplaced": "mask", "softmax_over_queries": "softmax",
           "layout_bhtd": "layout"}  # fmt: skip
_DIFF_V2_FORWARD = {"pairs_as_halves": "heads", "pairs_swapped": "heads", "causal_not_forwarded": "mask", "gate_without_sigmoid": "gate",
                    "gate_exponential": "gate", "gate_complement": "gate", "gate_wrong_axis": "gate", "all_heads_returned": "heads",
                    "output_rmsnorm": "output", "one_minus_lambda_init": "output"}  # fmt: skip
HINTS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    **{hint: (GQA, component, "forward", ()) for hint, component in _SHARED.items()},
    **{hint: (DIFF_V2, component, "forward", ()) for hint, component in _DIFF_V2_FORWARD.items()},
    "gate_detached": (DIFF_V2, "graph", "gradients", ("lambda_logits",)),
    "gate_slope_missing": (DIFF_V2, "gate", "gradients", ("lambda_logits",)),
    "kv_gradients_averaged": (GQA, "backward", "gradients", ("k", "v")),
    "logits_detached": (GQA, "graph", "gradients", ("q", "k")),
    "value_detached": (GQA, "graph", "gradients", ("v",)),
    "output_detached": (GQA, "graph", "contract", ()),
    "float32_inside": (GQA, "dtype", "forward", ()),
}  # fmt: skip
PARAMETER_COMPONENTS = {GQA: {"causal": "mask"}, DIFF_V2: {"lambda_logits": "gate", "causal": "mask"}}
"""Per function, the component a parameter misnamed or misplaced in a submitted signature belongs to (the others: "type")."""
ACROSS_CALLS = ("repeated_calls",)
"""Checks whose failure may come from state kept between calls (a cache): they alone do not send a function's probes looking at its forward."""
WHOLE_ANSWER = {GQA: "output", DIFF_V2: "output"}
"""The component of each function that a result remembered whole between calls belongs to (what it returns)."""
KEYED = {"reflagged": {f: ("mask", "the causal flag") for f in BOTH}, "retyped": {f: ("dtype", "the dtype") for f in BOTH}}
"""What state kept between calls that ignores a change of the causal flag or of the dtype belongs to (see SequenceSuite.memo_findings)."""
KV_HEADS = "the number of key/value heads"
# the regimes of head grouping: one key/value head for all queries (multi-query) or several; how many query heads share one
SHARING = "the key/value heads"
GROUP = "the number of query heads per key/value head"
QUERY_HEADS = "the number of query heads Hq"
EXPANDED_INPUTS = "the inputs' expansion"
ATTRIBUTE_COMPONENTS = {"the memory layout": "strided", domain.LAST_AXIS_STEPS: "strided", "the inputs' dtype": "dtype", "causal": "mask",
                        "the autograd mode": "graph", KV_HEADS: "heads", SHARING: "heads", GROUP: "heads", QUERY_HEADS: "heads", EXPANDED_INPUTS: "strided"}  # fmt: skip


def _squeezed(got: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """Whether ``got`` is ``expected`` with some of its axes of size 1 removed."""
    rest = list(got)
    for size in expected:
        if rest and rest[0] == size:
            rest.pop(0)
        elif size != 1:
            return False
    return not rest and len(got) < len(expected)


def name_shape(function: str, got: tuple[int, ...], expected: tuple[int, ...], made: Mapping[str, str]) -> tuple[str, str, str, str] | None:
    """(component, title, evidence, advice) for the wrong shapes students' bugs produce (``made``: how the call was made), or None."""
    if _squeezed(got, expected):
        return ("output", f"{function} drops the output's axes of size 1",
                f"It returned shape {list(got)} where {list(expected)} is expected: a .squeeze() removed axes that happen to have size 1.",
                "squeeze only an axis you added yourself, by its index, or reshape to [B, T, H, D] explicitly")  # fmt: skip
    if _squeezed(expected, got):
        return ("output", f"{function} leaves extra axes of size 1 in the output",
                f"It returned shape {list(got)} where {list(expected)} is expected: an axis of size 1 was added or kept (keepdim=True, "
                "unsqueeze, a stack of one) and never removed.",
                "reduce without keepdim, or index the axis away, so that the result is [B, T, H, D]")  # fmt: skip
    if len(expected) != 4:
        return None
    b, t, heads, d = expected
    if got == (b, t, heads * d) and heads > 1:
        return ("output", f"{function} merges the heads into one axis",
                f"It returned shape {list(got)} = [B, T, H·D] where [B, T, H, D] = {list(expected)} is expected.",
                "return the heads on their own axis, [B, T, H, D]: merging them is the output projection's job, outside this function")  # fmt: skip
    if len(got) != 4:
        return None
    if got == (b, t, 2 * heads, d // 2) and d % 2 == 0:
        return ("layout", f"{function} takes the pairs along head_dim instead of the heads",
                f"It returned shape {list(got)}: twice the heads and half of head_dim, where [B, T, H, D] = {list(expected)} is expected.",
                "slice the head axis (axis 2, e.g. A[:, :, 0::2]), not the last one (A[..., 0::2])")  # fmt: skip
    if function == DIFF_V2 and got == (b, t, 2 * heads, d):
        return ("heads", f"{DIFF_V2} returns all 2H heads: the pairs are never combined",
                f"It returned shape {list(got)}, the Hq = 2H query heads, where [B, T, H, D] = {list(expected)} is expected.",
                "combine each pair into one head: A[:, :, 0::2] − σ(ℓ)[..., None]·A[:, :, 1::2]")  # fmt: skip
    if function == GQA and got[:2] == (b, t) and got[3] == d and str(got[2]) == made.get(KV_HEADS) and got[2] < heads:
        return ("heads", f"{GQA} returns one output per key/value head, not per query head",
                f"It returned shape {list(got)}: the {got[2]} key/value heads, where [B, T, Hq, D] = {list(expected)} is expected; "
                f"each key/value head must serve the {heads // got[2]} query heads of its group.",
                "repeat each key/value head for its group (repeat_interleave(G, dim=2)), or attend every query head, and return Hq heads")  # fmt: skip
    if len(got) == 4 and got[:2] == (b, t) and got[3] == d and 0 < got[2] < heads and heads % got[2] == 0 and not (function == DIFF_V2 and 2 * got[2] == heads):
        return ("output", f"{function} returns {got[2]} heads instead of {heads}: outputs of several heads are reduced into one",
                f"It returned shape {list(got)} where [B, T, H, D] = {list(expected)} is expected: every {heads // got[2]} heads' "
                "outputs were averaged or summed (one output per key/value head?).",
                "return one output per query head; nothing is reduced over the heads of a group")  # fmt: skip
    if got == (b, heads, t, d) and heads != t:
        return ("layout", f"{function} returns [B, H, T, D] instead of [B, T, H, D]",
                f"It returned shape {list(got)}: heads before tokens, where [B, T, H, D] = {list(expected)} is expected.",
                "transpose(1, 2) the result back to [B, T, H, D]")  # fmt: skip
    if got[0] == b and got[2:] == (heads, d) and 0 < got[1] < t:
        return ("output", f"{function} returns {got[1]} tokens instead of {t}", *slips.tokens_lost(list(got), list(expected), "[B, T, H, D]"))
    if math.prod(got) == math.prod(expected) and len(got) == len(expected):
        return ("layout", f"{function} returns its numbers in another arrangement of axes",
                f"It returned shape {list(got)}, as many elements as [B, T, H, D] = {list(expected)} but on other axes: parts were "
                "concatenated, reshaped or viewed along the wrong axis.",
                "concatenate and reshape along the axis each part belongs to (tokens on axis 1, heads on axis 2), and check the shape "
                "of every step")  # fmt: skip
    return None


# The student's lines where tensors of sizes that do not fit meet (or an error torch words in no known way is raised), by
# the operation, the first that fits: the axes' order (.T, which reverses every axis of a 4-D tensor; a bare .squeeze(),
# which drops every axis of size 1; every other entry of axis 1, the tokens in [B, T, H, D], where the pairs are on axis 2),
# building or applying the causal mask, repeating key/value heads over their group or picking them by a computed index on
# the heads' axis of [B, T, H, D] (`k[:, :, kv_of]`).
LINE_COMPONENTS = {r"\.T\b|\.squeeze\(\)|\[\s*:\s*,\s*[01]?\s*::\s*2\s*\]": "layout", slips.MASK_LINE: "mask",
                   r"\.expand\(|repeat_interleave\(|\.repeat\(|index_select\(|\b[kv]\[\s*:\s*,\s*:\s*,\s*[A-Za-z_]\w*\s*\]": "heads"}  # fmt: skip
SUPPLIED = ("_type_name", "_shape", "_require_tensor", "_require_like", "_require_axis", "check_gqa_inputs", "check_diff_v2_inputs")
"""The stub's own functions: its validation raises for inputs outside the contract only."""
DECLARATIONS = slips.Declarations(ATTRIBUTE_COMPONENTS, name_shape, LINE_COMPONENTS, answers=WHOLE_ANSWER, operands=slips.SCALE_MAKERS,
                                  functions=(GQA, DIFF_V2), parameters={"lambda_logits": "gate", "causal": "mask"}, supplied=SUPPLIED,
                                  layouts={GQA: "BTHD", DIFF_V2: "BTHD"})

# Sizes that all differ (G = 4, H = 6 output heads for diff_v2_attention), and the variants that make two of them equal or one
# of them 1: a function that works only when the query heads and key/value heads meet one to one groups them wrongly; one that
# works only when two sizes of different axes are equal reads one axis for the other.
SIZE_BASE = {"B": 2, "T": 11, "Hq": 12, "Hkv": 3, "D": 5}
_SIZE_VARIANTS = (
    sizes.SizeVariant("two query heads share each key/value head (Hq = 2·Hkv)", {"Hq": 6}, "heads"),
    sizes.SizeVariant("there are as many tokens as query heads (T = Hq)", {"T": 12}, "layout"),
    sizes.SizeVariant("there are as many tokens as key/value heads (T = Hkv)", {"T": 3}, "layout"),
    sizes.SizeVariant("there are as many tokens as head_dim (T = D)", {"T": 5}, "layout"),
    sizes.SizeVariant("there are as many tokens as batch elements (T = B)", {"T": 2}, "layout"),
    sizes.SizeVariant("head_dim equals the number of query heads (D = Hq)", {"D": 12}, "layout"),
    sizes.SizeVariant("head_dim equals the number of key/value heads (D = Hkv)", {"D": 3}, "layout"),
    sizes.SizeVariant("there is one batch element (B = 1)", {"B": 1}, "layout"),
)
# diff_v2_attention also pairs heads and gates them: with one key/value head, or one pair, gates and heads that are indexed
# alike line up whichever of them is wrong, so those sizes tell no part.
SIZE_VARIANTS = {
    GQA: (sizes.SizeVariant("each key/value head serves one query head (Hq = Hkv)", {"Hq": 3}, "heads"),
          sizes.SizeVariant("there is one key/value head (Hkv = 1)", {"Hkv": 1}, "heads"), *_SIZE_VARIANTS),
    DIFF_V2: (*_SIZE_VARIANTS, sizes.SizeVariant("there is one key/value head (Hkv = 1)", {"Hkv": 1}, None),
              sizes.SizeVariant("there is one pair of query heads (Hq = 2, Hkv = 1)", {"Hq": 2, "Hkv": 1}, None),
              sizes.SizeVariant("there are as many tokens as output heads (T = Hq / 2)", {"T": 6}, "layout"),
              sizes.SizeVariant("head_dim equals the number of output heads (D = Hq / 2)", {"D": 6}, "layout")),
}  # fmt: skip


def size_probe(function: str, causal: bool = True) -> sizes.SizeProbe:
    """How the size probe calls ``function``: float64 inputs of about 1 in size, every gate logit 0, ``causal`` given."""

    def build(given: sizes.Sizes) -> toolkit_probes.Built:
        b, t, hq, hkv, d = (given[n] for n in ("B", "T", "Hq", "Hkv", "D"))
        rng = np.random.default_rng(0)
        values = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)), "v": rng.standard_normal((b, t, hkv, d)),
                  "lambda_logits": np.zeros((b, t, hq // 2))}  # fmt: skip
        return probes.subject(function, causal).request({n: values[n] for n in TENSORS[function]})

    def shape(given: sizes.Sizes) -> tuple[int, ...]:
        return given["B"], given["T"], given["Hq"] if function == GQA else given["Hq"] // 2, given["D"]

    return sizes.SizeProbe(SIZE_BASE, SIZE_VARIANTS[function], build, shape, "" if causal else "with causal=False")


TIED = "the two query heads of a pair"
"""The call attribute that says whether heads 2i and 2i + 1 of the queries are equal in value (one map serves both)."""


def _attributes(case: Case, grads: bool) -> dict[str, str]:
    """How a call of ``case`` was made, in words (the slip analysis contrasts calls that failed with those that did not)."""
    found = {"the inputs' dtype": case.dtype, "the argument binding": case.binding,
             "causal": "left out" if case.causal is None else str(case.causal),
             "the memory layout": "non-contiguous" if any(layout != "contiguous" for layout in case.memory_layouts) else "contiguous",
             domain.LAST_AXIS_STEPS: domain.last_axis_steps(case.memory_layouts, [x.shape for x in case.inputs]),
             EXPANDED_INPUTS: domain.expanded_inputs(case.memory_layouts, EXPANSIONS),
             KV_HEADS: str(case.k.shape[2]), domain.TOKENS: domain.token_count(case.q.shape[1]), domain.BATCH: domain.batch_size(case.q.shape[0]),
             TIED: "equal in value" if np.array_equal(case.q[:, :, 0::2], case.q[:, :, 1::2]) and np.unique(case.q).size > 1 else "different",
             domain.PASSED_AS_ONE: domain.passed_as_one(case.one_object), **domain.blank_inputs(case.note),
             SHARING: "one (multi-query)" if case.k.shape[2] == 1 else "several",
             GROUP: str(group) if (group := case.q.shape[2] // case.k.shape[2]) <= 2 else "more than 2",
             QUERY_HEADS: str(case.q.shape[2]) if case.q.shape[2] <= 2 else "more than 2",
             slips.HEAD_WIDTH: str(case.q.shape[-1])}  # fmt: skip
    if not grads:
        found["the autograd mode"] = case.grad_mode
    else:
        found |= {name: "trained" if case.requires_grad(name) else "frozen" for name in case.names}
        found[slips.TRAINED] = slips.trained(n for n in case.names if case.requires_grad(n))
        found[slips.ORIGIN] = slips.origin(case.activations, case.held_grads, case.parameters)
    return found


def observed(grading: GradingContext) -> list[Observed]:
    """Every call the checks made (from the run's memo: no new call), as the slip analysis reads it."""
    found = []
    for case_set in suite.SETS:
        for grads in (False, True):
            for i, case in enumerate(case_set(grading.seed)):
                outcome: Outcome | None = grading.cache.get((case_set.name, i, grads))
                if outcome is None:
                    continue
                found.append(Observed(case.function, outcome, 0, case.output_shape, case.dtype, _attributes(case, grads),
                                      domain.tensor_names(case.names, case.one_object), grads,
                                      not case_set.hidden))  # fmt: skip
    return found


def value_calls(grading: GradingContext, function: str) -> list[tuple[Case, bool]]:
    """Each call of ``function`` made without gradients by the checks (read from the run's memo), and whether its value was
    right (judged once per run)."""

    def judged() -> list[tuple[Case, bool]]:
        calls = []
        for case_set in suite.SETS:
            for i, case in enumerate(case_set(grading.seed)):
                outcome: Outcome | None = grading.cache.get((case_set.name, i, False))
                if outcome is not None and case.function == function:
                    calls.append((case, values_verdict(outcome, 0, "", expected.output(case)).ok))
        return calls

    found: list[tuple[Case, bool]] = grading.memo(("value calls", function), judged)
    return found


def gradient_calls(grading: GradingContext, function: str) -> list[backward_calls.GradientCall]:
    """Each call of ``function`` the gradient checks made (read from the run's memo), judged against the oracle."""
    calls = []
    for case_set in suite.SETS:
        for i, case in enumerate(case_set(grading.seed)):
            outcome: Outcome | None = grading.cache.get((case_set.name, i, True))
            if outcome is None or case.function != function:
                continue
            calls.append(backward_calls.judged(outcome, 0, expected.output(case), expected.gradients(case), suite.gradient_positions(case),
                                               case.dtype, _attributes(case, True), not case_set.hidden, domain.degenerate(case.note)))  # fmt: skip
    return calls


def calls_gqa(source: str | None) -> bool:
    """Whether the submission's diff_v2_attention calls its gqa_attention (in its code: its docstring and comments, which
    may name the call, as the stub's does, left out)."""
    body = "\n".join(text for _, text in slips.function_lines(source, DIFF_V2))
    return re.search(rf"\b{GQA}\s*\(", findings.code_of(textwrap.dedent(body))) is not None


def widened(declared: Mapping[str, Role], source: str | None) -> dict[str, Role]:
    """What the checks judge (their declarations), with gqa_attention added to every check of diff_v2_attention when
    diff_v2_attention calls it: a fault of the one is then the other's too."""
    if not calls_gqa(source):
        return dict(declared)
    found = {}
    for check, role in declared.items():
        if DIFF_V2 in role.functions and GQA not in role.functions:
            inputs = dict(role.inputs)
            if DIFF_V2 in inputs:
                inputs[GQA] = tuple(n for n in inputs[DIFF_V2] if n in TENSORS[GQA]) or TENSORS[GQA]
            role = replace(role, functions=(*role.functions, GQA), inputs=inputs)
        found[check] = role
    return found


def hint_findings(records: list[dict[str, Any]], declared: Mapping[str, Role]) -> list[findings.Finding]:
    """The named misconceptions as findings. A variant :data:`HINTS` gives to gqa_attention (a shared output variant, a
    gradient variant, a symptom) that no check of gqa_attention alone was hinted with names diff_v2_attention: its own
    attention has the fault, gqa_attention's checks pass (a check of both functions does not tell whose call failed)."""
    gqa_checks = {check for check, role in declared.items() if set(role.functions) == {GQA}}
    hinted = {r["hint"]["id"] for r in records if r.get("id") in gqa_checks and r.get("status") == "failed" and isinstance(r.get("hint"), dict)}
    hints = {hint: (DIFF_V2 if function == GQA and hint not in hinted else function, component, stage, inputs)
             for hint, (function, component, stage, inputs) in HINTS.items()}  # fmt: skip
    return findings.hint_findings(records, hints)


def probe_mode(grading: GradingContext, function: str) -> str:
    """The autograd mode to probe ``function``'s forward in: the one where its value checks' calls went wrong."""
    return findings.failing_mode([(case.grad_mode, right) for case, right in value_calls(grading, function)])


def _sized(grading: GradingContext, finding: Finding) -> Finding:
    """``finding``, an unplaced contract finding of sizes that do not fit, placed by the sizes its function works for
    (:func:`grader.toolkit.sizes.placed`), probed once per function (a wrong shape and an exception share the answer) in
    the autograd mode where the function's values went wrong, with the causal mask and, when its sizes all fit there,
    without it."""
    worker, function = grading.worker, finding.function
    if worker is None or function not in BOTH:
        return finding

    def works() -> tuple[sizes.SizeProbe, tuple[sizes.SizeVariant, ...] | None]:
        with toolkit_probes.calls_in(probe_mode(grading, function)):
            return sizes.first_failing(worker, [size_probe(function, causal) for causal in (True, False)])

    return sizes.placed(finding, *grading.memo(("sizes that work", function), works))


CALL_TO_CALL = ("randomness", "state")
"""What the determinism probe finds: outputs that change from call to call."""


def given_to_callee(grading: GradingContext, found: list[Finding], rng: np.random.Generator) -> list[Finding]:
    """``found``, with diff_v2_attention's finding of outputs that change from call to call given to gqa_attention, which it
    calls, when gqa_attention's own determinism probe shows it too (gqa_attention's probes run only for its own failed
    checks, so a running state kept there may first show through diff_v2_attention)."""
    changing = [f for f in found if f.function == DIFF_V2 and f.component in CALL_TO_CALL]
    if not changing or any(f.function == GQA for f in found) or grading.worker is None:
        return found
    own = findings.Found()
    findings.randomness_probe(grading.worker, probes.subject(GQA), probes.draw(rng), TENSORS[GQA], own, grading.source)
    callee = [f for f in own.findings if f.component in CALL_TO_CALL]
    return callee + [f for f in found if f not in changing] if callee else found


def diagnose(grading: GradingContext, records: list[dict[str, Any]]) -> Evidence:
    """The evidence for the root causes of a submission some of whose checks failed (see the module's docstring)."""
    declared = grading.roles
    evidence = Evidence(hints=hint_findings(records, declared))
    grading.roles = widened(declared, grading.source)  # this submission's roles only: the declarations are left as they are
    if grading.load_failure is not None:
        return evidence
    evidence.findings += signatures.evidenced(suite.RUNNER.contracts, grading.functions, PARAMETER_COMPONENTS,
                                              lambda function: ((case.binding, right) for case, right in value_calls(grading, function)))
    calls = observed(grading)
    evidence.findings += slips.findings(calls + suite.SEQUENCES.observed(grading, _attributes), grading.source, DECLARATIONS,
                                        lambda finding: _sized(grading, finding))  # fmt: skip
    failed = findings.failed_roles(records, declared, ACROSS_CALLS)
    if any(role.aspect == "state" for role in failed):
        evidence.findings += suite.SEQUENCES.memo_findings(grading, WHOLE_ANSWER, KEYED, findings.only_state(failed, BOTH), probes.INPUT_PARTS)
    blocked = {f.function for f in evidence.findings if f.blocks}
    found = findings.Found()
    rng = domain.generator(grading.seed, "probes")
    probed = findings.probed_aspects(failed, BOTH)
    nested = calls_gqa(grading.source)
    for function in BOTH:
        aspects = set(probed[function])
        if function == DIFF_V2 and nested:  # gqa_attention's faults, found already, are diff_v2_attention's too
            if GQA in blocked:
                continue
            aspects -= {"values" if f.stage == "forward" else "gradients" for f in found.findings if f.function == GQA}
        if grading.worker is None or function in blocked or function_problem(grading, function) is not None or not aspects & {"values", "gradients"}:
            continue
        mode = probe_mode(grading, function) if "values" in aspects else "enabled"
        with toolkit_probes.calls_in(mode):  # the autograd mode where its values went wrong (a path taken only without autograd)
            probes.run(grading.worker, function, rng, found, "values" in aspects, "gradients" in aspects, grading.source,
                       slips.cut_subsets(calls, function))
        owners = (function, GQA) if nested else (function,)  # a fault placed in the gqa_attention it calls is diff_v2_attention's too
        if "gradients" in aspects and not any(f.function in owners for f in evidence.findings + evidence.hints + found.findings):
            backward = backward_calls.finding(function, gradient_calls(grading, function), grading.source, probes.INPUT_PARTS.get(function))
            found.findings += [backward] if backward is not None else []
    if nested:
        found.findings = given_to_callee(grading, found.findings, rng)
    evidence.findings += found.findings
    evidence.probes, evidence.maps = found.probes, found.maps
    return evidence
