"""The diagnosis of differential attention: what each check judges, the calls the checks made, which probes to run.

:func:`diagnose` is the exercise's ``Exercise.diagnose``: after the checks of
a submission ran and some failed, it reads the checks' own calls for
contract slips (:mod:`grader.toolkit.slips`), turns the checks' named
misconceptions into findings, runs the probes of every function with a
failed check (:mod:`grader.exercises.diffattn.probes`) and hands all of it
to the harness, which orders the root causes (:mod:`grader.toolkit.rootcause`)
with what each check judges (its declaration's ``judges``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from grader.core.invoke import Outcome
from grader.core.plugin import GradingContext
from grader.exercises.diffattn import attention_probes, expected, lambda_probes, suite
from grader.exercises.diffattn import probes as attention_subjects
from grader.exercises.diffattn.probes import PARAMETER_COMPONENTS
from grader.exercises.diffattn.cases import ATTENTION, COEFFICIENT_KINDS, EXPANSIONS, INPUT_NAMES, LAMBDA, LAMBDA_NAMES, AttentionCase, LambdaCase
from grader.exercises.diffattn.signatures import CONTRACT
from grader.toolkit.verdicts import function_problem, values_verdict
from grader.toolkit import backward_calls, domain, findings, probes, signatures, slips
from grader.toolkit.rootcause import Evidence, Finding
from grader.toolkit.slips import Observed

# A named misconception (grader/exercises/diffattn/misconceptions.py) -> the function, component and stage it localises.
_FORWARD_HINTS = {
    "lambda": ("lambda_default_changed", "lambda_no_init", "lambda_no_exp", "lambda_terms_added", "lambda_clamped",
               "lambda_elementwise", "lambda_sum_of_exponentials", "lambda_sum_not_dot"),
    "mask": ("causal_default_false", "mask_first_branch_only", "mask_second_branch_only", "no_mask", "mask_after_softmax",
             "mask_hides_diagonal", "mask_wrong_triangle"),
    "softmax": ("softmax_over_queries", "joint_normaliser", "normalised_output"),
    "scale": ("scale_inverse_d", "scale_value_width", "no_scale"),
    "stability": ("softmax_overflow",),
    "branch": ("logit_difference", "branches_swapped"),
    "coefficient": ("lambda_times_difference", "lambda_on_first_branch", "one_minus_lambda_init"),
    "value": ("value_half_width", "value_split_per_branch"),
    "dtype": ("float32_inside",),
}  # fmt: skip
HINTS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    **{hint: (LAMBDA if component == "lambda" else ATTENTION, component, "forward", ()) for component, ids in _FORWARD_HINTS.items() for hint in ids},
    "lambda_sign_swapped": (LAMBDA, "sign", "forward", ()),
    "output_detached": (ATTENTION, "graph", "contract", ()),
    "value_detached": (ATTENTION, "graph", "gradients", ("value",)),
    "coefficient_detached": (ATTENTION, "graph", "gradients", ("coefficient",)),
    "first_branch_detached": (ATTENTION, "graph", "gradients", ("q1", "k1")),
    "second_branch_detached": (ATTENTION, "graph", "gradients", ("q2", "k2")),
    **{hint: (ATTENTION, "backward", "gradients", ()) for hint in ("coefficient_gradient_sign", "backward_missing_scale", "backward_no_rowsum")},
}  # fmt: skip
# The case sets whose calls the slip analysis reads (with gradients or not), and those only hidden checks show.
SETS = (("lambda_values", False), ("lambda_values", True), ("lambda_limits", False), ("lambda_strided", False), ("lambda_bindings", False),
        ("lambda_frozen_subsets", True), ("attention_causal", False), ("attention_noncausal", False),
        ("attention_coefficients", False), ("attention_large_logits", False), ("attention_strided", False),
        ("attention_strided", True), ("attention_gradients", True), ("frozen_subsets", True), ("end_to_end", True),
        ("attention_bindings", False), ("row_sums", False), ("lambda_zero", False), ("identical_maps", False))  # fmt: skip
HIDDEN_SETS = ("attention_large_logits", "attention_strided", "lambda_strided")
ACROSS_CALLS = ("repeated_calls",)
"""Checks whose failure may come from state kept between calls (a cache): they alone do not send a function's probes looking at its forward."""
STALE_COMPONENTS = {LAMBDA: "lambda"}
"""The component of a function whose whole answer is remembered between calls (attention's parts have components of their own)."""
KEYED = {"reflagged": {LAMBDA: ("lambda", "lambda_init"), ATTENTION: ("mask", "the causal flag")},
         "retyped": {LAMBDA: ("dtype", "the dtype"), ATTENTION: ("dtype", "the dtype")}}  # fmt: skip
"""What state kept between calls that ignores a change of the option or of the dtype belongs to (see SequenceSuite.memo_findings)."""
EXPANDED_INPUTS = "the inputs' expansion"
# A call that raises only when one tensor is passed for several arguments most likely wrote into one of them in place: the
# write is then seen through the other argument too (two equal tensors keep it to one).
ATTRIBUTE_COMPONENTS = {"the memory layout": "strided", domain.LAST_AXIS_STEPS: "strided", "the coefficient": "coefficient",
                        "the inputs' dtype": "dtype", "causal": "mask", "the autograd mode": "graph", EXPANDED_INPUTS: "strided",
                        domain.PASSED_AS_ONE: "mutation"}  # fmt: skip


def name_shape(function: str, got: tuple[int, ...], expected: tuple[int, ...], made: Mapping[str, str]) -> tuple[str, str, str, str] | None:
    """(component, title, evidence, advice) for the wrong shapes students' bugs produce, or None."""
    if function == LAMBDA and len(got) == 1 and got[0] > 1:
        return ("lambda", "λ is computed element by element (a vector), not with dot products",
                f"It returned a vector of shape {list(got)}, the vectors' own shape, where λ is one number (shape []).",
                "λ = exp(q1·k1) − exp(q2·k2) + λ_init with dot products (torch.dot or (q * k).sum()), giving a 0-dim tensor")  # fmt: skip
    if function == LAMBDA:
        return ("shape", f"λ has shape {list(got)} instead of [] (a 0-dim tensor)",
                f"It returned shape {list(got)} where a 0-dim tensor (shape []) is expected.",
                "index with [0] or .squeeze() so that λ is 0-dim; torch.dot already gives a 0-dim tensor")  # fmt: skip
    if len(got) == 4 and got[:3] == expected[:3] and 2 * got[3] == expected[3]:
        return ("value", f"{ATTENTION} uses only half of value",
                f"It returned shape [B, H, T, D] = {list(got)} where [B, H, T, 2D] = {list(expected)}, the shape of value, is expected: "
                "only D of value's 2D columns reach the output.", "multiply the signed map by all of value (shape [B, H, T, 2D])")  # fmt: skip
    if len(got) == 4 and got[:3] == expected[:3] and got[3] == expected[2]:
        return ("value", f"{ATTENTION} returns the attention map, not the output",
                f"It returned shape [B, H, T, T] = {list(got)}: the signed map, never multiplied by value ([B, H, T, 2D] = {list(expected)} expected).",
                "return (A1 − λ·A2) @ value")  # fmt: skip
    if len(got) == 4 and got[:2] == expected[:2] and got[3] == expected[3] and 0 < got[2] < expected[2]:
        return ("value", f"{ATTENTION} returns {got[2]} tokens instead of {expected[2]}", *slips.tokens_lost(list(got), list(expected), "[B, H, T, 2D]"))
    return None


# The student's lines where tensors of sizes that do not fit meet (or an error torch words in no known way is raised), by
# the operation: applying or building the causal mask; a row's maximum or log-normaliser, the softmax's own reductions
# (over an empty block of keys they raise).
LINE_COMPONENTS = {slips.MASK_LINE: "mask", r"\bamax\(|\blogsumexp\(|\bmaximum\(": "softmax"}
SUPPLIED = ("_type_name", "_shape", "_require_float_tensor", "_require_matching", "_require_group", "check_lambda_inputs", "_check_coefficient",
            "check_attention_inputs")  # fmt: skip
"""The stub's own functions: its validation raises for inputs outside the contract only."""
DECLARATIONS = slips.Declarations(ATTRIBUTE_COMPONENTS, name_shape, LINE_COMPONENTS, {("the coefficient", f"computed by {LAMBDA}"): LAMBDA},
                                  attention_subjects.HANDLED_INPUTS, {ATTENTION: "coefficient", LAMBDA: "lambda"},
                                  {LAMBDA: "lambda", ATTENTION: "value"}, slips.SCALE_MAKERS, (LAMBDA, ATTENTION),
                                  {"lambda_init": "lambda", "coefficient": "coefficient", "causal": "mask"}, SUPPLIED, {LAMBDA: "lambda"},
                                  layouts={ATTENTION: "BHTD"})  # fmt: skip


TIED = "the second branch's queries and keys"
"""The call attribute that says whether q2 and k2 equal q1 and k1 in value (tied branches: one map serves both)."""


def _attributes(case: LambdaCase | AttentionCase, grads: bool) -> dict[str, str]:
    """How a call of ``case`` was made, in words (the slip analysis contrasts calls that failed with those that did not)."""
    found = {"the inputs' dtype": case.dtype, "the argument binding": case.binding}
    if not grads:
        found["the autograd mode"] = case.grad_mode
    names = LAMBDA_NAMES if isinstance(case, LambdaCase) else INPUT_NAMES + (("coefficient",) if case.coefficient_is_tensor else ())
    trainable = {name: "trained" if case.requires_grad(name) else "frozen" for name in names} if grads else {}
    if grads:
        trainable[slips.TRAINED] = slips.trained(n for n in names if case.requires_grad(n))
        trainable[slips.ORIGIN] = slips.origin(case.activations, case.held_grads, case.parameters)
    if isinstance(case, LambdaCase):
        return found | {"the memory layout": "non-contiguous" if case.layout != "contiguous" else "contiguous",
                        domain.LAST_AXIS_STEPS: domain.last_axis_steps((case.layout,), (case.q1.shape,)),
                        domain.PASSED_AS_ONE: domain.passed_as_one(case.one_object)} | trainable
    coefficient = f"computed by {LAMBDA}" if case.lambda_case is not None else COEFFICIENT_KINDS[case.coefficient_kind]
    causal = "left out" if case.causal is None else str(case.causal)
    layout = "non-contiguous" if any(domain.non_contiguous(layout, x.shape) for layout, x in zip(case.layouts, case.inputs)) else "contiguous"
    tied = np.array_equal(case.q1, case.q2) and np.array_equal(case.k1, case.k2)
    return found | {"the coefficient": coefficient, "causal": causal, "the memory layout": layout,
                    domain.LAST_AXIS_STEPS: domain.last_axis_steps(case.layouts, [x.shape for x in case.inputs]),
                    EXPANDED_INPUTS: domain.expanded_inputs(case.layouts, EXPANSIONS), domain.TOKENS: domain.token_count(case.q1.shape[-2]),
                    domain.BATCH: domain.batch_size(case.q1.shape[0]),
                    TIED: "equal to the first's in value" if tied else "its own", domain.PASSED_AS_ONE: domain.passed_as_one(case.one_object),
                    slips.HEAD_WIDTH: str(case.q1.shape[-1])} | domain.blank_inputs(case.note) | trainable  # fmt: skip


def observed(grading: GradingContext) -> list[Observed]:
    """Every call the checks made (from the run's memo: no new call), as the slip analysis reads it."""
    found = []
    for set_name, grads in SETS:
        for i, case in enumerate(getattr(suite, set_name)(grading.seed)):
            outcome: Outcome | None = grading.cache.get((set_name, i, grads))
            if outcome is None:
                continue
            public = set_name not in HIDDEN_SETS
            attributes = _attributes(case, grads)
            if isinstance(case, LambdaCase):
                found.append(Observed(LAMBDA, outcome, 0, (), case.dtype, attributes, domain.tensor_names(LAMBDA_NAMES, case.one_object), grads, public))
                continue
            names = domain.tensor_names((*INPUT_NAMES, "coefficient"), case.one_object)
            if case.lambda_case is not None:  # the request's tensors: λ's four vectors, then attention's five
                lam = case.lambda_case
                found.append(Observed(LAMBDA, outcome, 0, (), lam.dtype, _attributes(lam, grads), LAMBDA_NAMES + ("",) * 5, grads, public))
                names = ("",) * 4 + INPUT_NAMES
            b, h, t, d = case.q1.shape
            index = int(case.lambda_case is not None)
            found.append(Observed(ATTENTION, outcome, index, (b, h, t, 2 * d), case.dtype, attributes, names, grads, public))
    return found


def hint_findings(records: list[dict[str, Any]]) -> list[Finding]:
    """The named misconceptions of the failed checks, as findings (the first of each id)."""
    return findings.hint_findings(records, HINTS)


def _judged_calls(grading: GradingContext, function: str) -> list[tuple[AttentionCase | LambdaCase, bool, bool]]:
    """Each call of ``function`` the value checks made (read from the run's memo), whether its value was right (judged once
    per run), and whether its check is public."""

    def judged() -> list[tuple[AttentionCase | LambdaCase, bool, bool]]:
        calls = []
        for set_name, grads in SETS:
            if grads:
                continue
            for i, case in enumerate(getattr(suite, set_name)(grading.seed)):
                outcome: Outcome | None = grading.cache.get((set_name, i, False))
                if outcome is not None and case.function == function:
                    calls.append((case, values_verdict(outcome, int(getattr(case, "lambda_case", None) is not None), "",
                                                       expected.case_value(case)).ok, set_name not in HIDDEN_SETS))  # fmt: skip
        return calls

    found: list[tuple[AttentionCase | LambdaCase, bool, bool]] = grading.memo(("value calls", function), judged)
    return found


def value_calls(grading: GradingContext, function: str) -> list[tuple[AttentionCase | LambdaCase, bool]]:
    """Each call of ``function`` the value checks made (read from the run's memo), and whether its value was right."""
    return [(case, right) for case, right, _ in _judged_calls(grading, function)]


RESIZED_TOKENS = (attention_subjects.OWN_SIZES.t, 64)
"""The fewest and most tokens of the calls whose sizes the forward probes take again (:func:`failing_sizes`): with fewer
tokens than the probes' own, a map has too few entries to tell the read-outs' models apart (at T = 2, two causal maps
combine into any third); longer calls are the length probe's."""


def failing_sizes(grading: GradingContext) -> tuple[attention_subjects.ProbeSizes, attention_subjects.ProbeSizes, bool] | None:
    """The sizes of the call to run differential_attention's forward probes at again when their own show nothing wrong, the
    sizes to run them at (the head width raised to T/2 where one-hot values need it), and whether the call is a public
    check's: the smallest call of :data:`RESIZED_TOKENS` tokens a value check failed on (public ones first; none whose
    coefficient differential_lambda computed, none that would give the probes' own sizes). None when there is none."""
    wrong = []
    for case, right, public in _judged_calls(grading, ATTENTION):
        if right or not isinstance(case, AttentionCase) or case.lambda_case is not None:
            continue
        called = attention_subjects.ProbeSizes(*case.q1.shape)
        chosen = called.read_out()
        if RESIZED_TOKENS[0] <= called.t <= RESIZED_TOKENS[1] and chosen != attention_subjects.OWN_SIZES:
            wrong.append((not public, math.prod(called), called, chosen, public))
    if not wrong:
        return None
    _, _, called, chosen, public = min(wrong)
    return called, chosen, public


def gradient_calls(grading: GradingContext, function: str) -> list[backward_calls.GradientCall]:
    """Each call of ``function`` alone the gradient checks made (read from the run's memo), judged against the oracle (the
    end-to-end calls, of both functions in one, are left out)."""
    calls = []
    for set_name, grads in SETS:
        for i, case in enumerate(getattr(suite, set_name)(grading.seed) if grads else ()):
            outcome: Outcome | None = grading.cache.get((set_name, i, True))
            if outcome is None or case.function != function or getattr(case, "lambda_case", None) is not None:
                continue
            calls.append(backward_calls.judged(outcome, 0, expected.case_value(case), expected.case_grads(case), suite.gradient_positions(case),
                                               case.dtype, _attributes(case, True), set_name not in HIDDEN_SETS, domain.degenerate(case.note)))  # fmt: skip
    return calls


def probe_mode(grading: GradingContext, function: str) -> str:
    """The autograd mode the forward probes of ``function`` call it in (:func:`findings.failing_mode` of the value checks'
    calls of it)."""
    return findings.failing_mode([(case.grad_mode, right) for case, right in value_calls(grading, function)])


# The ways of calling that the probes never vary (they pass a Python float or a float tensor coefficient): the value checks'
# calls alone can place a fault that only one of them brings out (findings.wrong_only_when).
UNPROBED_KINDS = {"the coefficient": "coefficient"}


def probe_coefficient(grading: GradingContext) -> str:
    """How the forward probes of differential_attention pass the coefficient: "tensor" when the value checks' wrong calls
    all passed it as a tensor (of any dtype) while calls with a Python number were right (a path taken for tensor
    coefficients only), else "float"."""
    kinds = [("tensor" if isinstance(case, AttentionCase) and case.coefficient_is_tensor else "float", right)
             for case, right in value_calls(grading, ATTENTION)]  # fmt: skip
    return findings.failing_mode(kinds, usual="float")


def wrong_coefficients(grading: GradingContext, most: int = 3) -> list[float]:
    """The first ``most`` coefficients, each once, of the value checks' wrong calls of differential_attention."""
    wrong = [case.coefficient for case, right in value_calls(grading, ATTENTION) if isinstance(case, AttentionCase) and not right]
    return [float(c) for c in dict.fromkeys(c for c in wrong if math.isfinite(c))][:most]


def diagnose(grading: GradingContext, records: list[dict[str, Any]]) -> Evidence:
    """The evidence for the root causes of a submission some of whose checks failed (see the module's docstring)."""
    evidence = Evidence(hints=hint_findings(records))
    roles = grading.roles
    if grading.load_failure is not None:
        return evidence
    evidence.findings += signatures.evidenced(CONTRACT, grading.functions, PARAMETER_COMPONENTS,
                                              lambda function: ((case.binding, right) for case, right in value_calls(grading, function)))
    calls = observed(grading)
    evidence.findings += slips.findings(calls + suite.SEQUENCES.observed(grading, _attributes), grading.source, DECLARATIONS)
    failed = findings.failed_roles(records, roles, ACROSS_CALLS)
    if any(role.aspect == "state" for role in failed):
        evidence.findings += suite.SEQUENCES.memo_findings(grading, STALE_COMPONENTS, KEYED, findings.only_state(failed, (LAMBDA, ATTENTION)),
                                                           {ATTENTION: attention_probes.STALE_PARTS})
    blocked = {f.function for f in evidence.findings if f.blocks}
    found = findings.Found()
    rng = domain.generator(grading.seed, "probes")
    runs = ((LAMBDA, lambda_probes.run), (ATTENTION, attention_probes.run))
    probed = findings.probed_aspects(failed, [function for function, _ in runs])
    for function, run in runs:
        aspects = probed[function]
        if grading.worker is None or function in blocked or function_problem(grading, function) is not None or not aspects:
            continue
        coefficient = probe_coefficient(grading) if function == ATTENTION and "values" in aspects else "float"
        with probes.calls_in(probe_mode(grading, function) if "values" in aspects else "enabled"), attention_subjects.coefficients_as(coefficient):
            run(grading.worker, rng, found, "values" in aspects, "gradients" in aspects, grading.source, slips.cut_subsets(calls, function))
            resized = failing_sizes(grading) if function == ATTENTION and "values" in aspects else None
            if resized is not None and not any(f.function == function for f in evidence.findings + evidence.hints + found.findings):
                attention_probes.resized_run(grading.worker, rng, found, *resized)
        if function == ATTENTION and "values" in aspects and not any(f.function == function for f in evidence.findings + evidence.hints + found.findings):
            with attention_subjects.coefficients_as(coefficient):
                attention_probes.coefficients_probe(grading.worker, rng, found, wrong_coefficients(grading))
        if "values" in aspects and not any(f.function == function for f in evidence.findings + evidence.hints):  # (they may explain it)
            findings.wrong_only_when(found, function, [(_attributes(case, False), right) for case, right in value_calls(grading, function)],
                                     UNPROBED_KINDS)
        if "gradients" in aspects and not any(f.function == function for f in evidence.findings + evidence.hints + found.findings):
            parts = attention_subjects.HANDLED_INPUTS if function == ATTENTION else None
            backward = backward_calls.finding(function, gradient_calls(grading, function), grading.source, parts)
            found.findings += [backward] if backward is not None else []
    evidence.findings += found.findings
    evidence.probes, evidence.maps = found.probes, found.maps
    return evidence
