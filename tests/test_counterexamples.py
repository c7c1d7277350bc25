"""Shrunk counterexamples: the search, the round trip it makes, the heat map, and two real gradings."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import ROOT, attention_arguments, grade, grade_many
from corpus.mutants import MUTANTS, mutant_source

from grader.core.invoke import (
    Call,
    Outcome,
    Request,
    ResultOf,
    Returned,
    TensorInput,
    invoke_many,
)
from grader.core.plugin import GradingContext
from grader.exercises.diffattn import cases, counterexample, expected, oracle, suite
from grader.exercises.diffattn.counterexample import attention_sizes, cut_attention, cut_lambda
from grader.reports import counterexample_view, heatmap
from grader.reports.schema import _COUNTEREXAMPLE, validate
from grader.toolkit import domain, shrink
from grader.toolkit.casesets import CaseSet
from grader.toolkit.shrink import Failure, first_failing
from grader.toolkit.verdicts import values_verdict
from grader.worker.client import WorkerFailure

SVG = "{http://www.w3.org/2000/svg}"
Behaviour = Callable[[list[np.ndarray], float, bool], np.ndarray]


class FakeWorker:
    """Answers differential_attention calls with ``behaviour`` (no torch), counting round trips."""

    def __init__(self, behaviour: Behaviour, fail_diagnostics: bool = False) -> None:
        self.behaviour = behaviour
        self.fail_diagnostics = fail_diagnostics
        self.trips: list[str] = []  # "each" (a case set), "run" or "diagnostic" per round trip

    def run_each(self, requests: list[tuple[dict[str, Any], list[np.ndarray]]], limits: Any = None) -> list[tuple[dict[str, Any], list[np.ndarray]]]:
        """A case set in one round trip: one answer per request."""
        self.trips.append("each")
        return [self.answer(header, arrays) for header, arrays in requests]

    def run(self, header: dict[str, Any], arrays: list[np.ndarray], *, diagnostic: bool = False, limit: Any = None) -> tuple[dict[str, Any], list[np.ndarray]]:
        """One round trip: every call's output as an array."""
        self.trips.append("diagnostic" if diagnostic else "run")
        if diagnostic and self.fail_diagnostics:
            raise WorkerFailure("the call did not finish within 20 s; the worker was stopped")
        return self.answer(header, arrays)

    def answer(self, header: dict[str, Any], arrays: list[np.ndarray]) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Every call's output as an array."""
        tensors = [arrays[t["array"]] for t in header["tensors"]]
        replies, out = [], []
        for call in header["calls"]:
            inputs, coefficient, causal = attention_arguments(call, tensors)
            out.append(self.behaviour(inputs, coefficient, causal))
            replies.append({"status": "returned", "type": "torch.Tensor", "is_tensor": True, "exact_tensor": True, "repr": "",
                            "shape": list(out[-1].shape), "dtype": "float64", "device": "cpu", "layout": "torch.strided",
                            "requires_grad": False, "has_grad_fn": False, "value": len(out) - 1})  # fmt: skip
        return {"status": "ok", "calls": replies}, out


def correct(inputs: list[np.ndarray], coefficient: float, causal: bool) -> np.ndarray:
    """The oracle itself."""
    return oracle.differential_attention(*inputs, coefficient, causal)


def no_mask(inputs: list[np.ndarray], coefficient: float, causal: bool) -> np.ndarray:
    """Never applies the causal mask."""
    return oracle.differential_attention(*inputs, coefficient, False)


def wrong_when_long(inputs: list[np.ndarray], coefficient: float, causal: bool) -> np.ndarray:
    """Right up to T = 5, 1 too large beyond."""
    return correct(inputs, coefficient, causal) + (inputs[0].shape[2] > 5)


def searched(
    behaviour: Behaviour, fail_diagnostics: bool = False, case_sets: tuple[CaseSet[Any], ...] = (suite.attention_causal,)
) -> tuple[dict[str, Any] | None, FakeWorker]:
    """Grade value checks with a fake worker, the way the check does, and search; the last check's counterexample."""
    worker = FakeWorker(behaviour, fail_diagnostics)
    functions = {suite.ATTENTION: {"kind": "callable", "parameters": None}}
    grading = GradingContext(seed=3, worker=worker, functions=functions)  # type: ignore[arg-type]
    for case_set in case_sets:
        grading.current = case_set.name
        verdicts = [
            values_verdict(suite.attention_outcome(grading, case_set, i, case), 0, "", expected.attention_output(case))
            for i, case in enumerate(case_set(grading.seed))
        ]
        counterexample.SHRINKER.values(grading, case_set, verdicts, expected.attention_output)
    return grading.explanations.get(case_sets[-1].name, {}).get("counterexample"), worker


def test_sizes_are_ordered_by_elements_then_tokens() -> None:
    """T·D first, then T; never beyond the case's own T and D or the limits 4 and 3."""
    assert attention_sizes(37, 8) == [(1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (4, 1), (2, 3), (3, 2), (4, 2), (3, 3), (4, 3)]
    assert attention_sizes(2, 8) == [(1, 1), (1, 2), (2, 1), (1, 3), (2, 2), (2, 3)]
    assert attention_sizes(1, 1) == [(1, 1)]


def test_a_causal_cut_is_the_first_rows_of_the_same_problem() -> None:
    """Batch 1, head 0, first 3 tokens: the oracle's output is exactly those rows of the full output."""
    case = cases.identical_branches(cases.attention_case(domain.generator(1, "cut"), (2, 2, 6, 2), "float32", True), 1.0)
    cut = cut_attention(case, 1, 0, 3, 2)
    assert cut.q1.shape == (1, 1, 3, 2) and cut.value.shape == cut.cotangent.shape == (1, 1, 3, 4)
    assert np.array_equal(cut.q2, cut.q1) and cut.coefficient == case.coefficient == 1.0
    full = oracle.differential_attention(*case.inputs, 0.3, True)
    assert np.array_equal(oracle.differential_attention(*cut.inputs, 0.3, True)[0, 0], full[1, 0, :3])


def test_first_failing_skips_passes_and_incomparable_cuts() -> None:
    """None (within tolerance) and a reason (not comparable) are passed over; the first Failure wins."""
    truth = expected.Truth(np.zeros(2), np.full(2, 1e-6))
    failure = Failure(None, np.ones(2), truth, (0,))
    assert first_failing([None, "the call raised", failure, failure]) == (2, failure)
    assert first_failing([None, "the call raised"]) is None


def test_output_judge_tells_failures_from_passes_and_other_problems() -> None:
    """Values outside the allowance fail at the worst element; a raised call or another shape is a reason."""
    truth = expected.Truth(np.array([1.0, 2.0, 3.0]), np.full(3, 1e-3))

    def outcome(returned: Returned) -> Outcome:
        """An outcome of one attention call."""
        return Outcome(functions=[suite.ATTENTION], results=[returned])

    def tensor(values: list[float]) -> Returned:
        """A returned plain tensor with these values."""
        return Returned(exact_tensor=True, is_tensor=True, value=np.array(values))

    failure = shrink.output_failure(outcome(tensor([1.0, 2.5, np.nan])), truth)
    assert isinstance(failure, Failure) and failure.worst == (2,) and failure.with_respect_to is None
    assert shrink.output_failure(outcome(tensor([1.0, 2.0, 3.0005])), truth) is None
    assert shrink.output_failure(outcome(tensor([1.0, 2.0])), truth) == "the output has shape [2], not [3]"
    raised = shrink.output_failure(outcome(Returned(raised={"type": "ValueError", "message": "D=1", "traceback": ""})), truth)
    assert raised == "differential_attention raised ValueError: D=1"


def test_call_text_names_tensors_after_the_contract() -> None:
    """A composed request reads like Python, lambda vectors prefixed, in the worker's tensor order."""
    lam = cases.lambda_case(domain.generator(2, "text"), 2, "float64", 0.5)
    case = cases.with_lambda(cases.attention_case(domain.generator(2, "text"), (1, 1, 2, 1), "float64", False), lam)
    text, named = counterexample.SHRINKER.call_text(suite.attention_request(case, True))
    coefficient = "differential_lambda(lambda_q1, lambda_k1, lambda_q2, lambda_k2, lambda_init=0.5)"
    assert text == f"differential_attention(q1, k1, q2, k2, value, {coefficient}, causal=False)"
    assert [name for _, name in named] == ["lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2", "q1", "k1", "q2", "k2", "value"]


def test_invoke_many_packs_requests_into_one_round_trip_and_splits_the_reply() -> None:
    """Call and tensor numbers are offset per request, backward passes listed together (each cotangent in the layout of its
    request's first non-contiguous input), grads given back per request."""
    seen: dict[str, Any] = {}

    class Recorder:
        """Keeps the request; answers three plain returns and four gradients."""

        def run(self, header: dict[str, Any], arrays: list[np.ndarray], *, diagnostic: bool = False, limit: Any = None) -> tuple[dict[str, Any], list[np.ndarray]]:
            """The canned reply."""
            seen.update(header=header, arrays=arrays, diagnostic=diagnostic)
            returned = {"status": "returned", "type": "float", "is_tensor": False, "exact_tensor": False, "repr": "1.0"}
            backward = {"status": "ok", "grads": {"0": 0, "1": None, "2": 1, "3": 2}}
            return {"status": "ok", "calls": [returned] * 3, "backward": backward}, [np.zeros(1), np.ones(1), np.full(1, 2.0)]

    def request(scale: float, composed: bool, layout: str = "contiguous") -> Request:
        """Two input tensors (the second in ``layout``), one or two calls, a backward pass."""
        first, second = TensorInput(np.full(1, scale), "float64", True), TensorInput(np.full(1, -scale), "float64", True, layout)
        calls = (Call("f", (first,)), Call("g", (ResultOf(0), second))) if composed else (Call("g", (first, second)),)
        return Request(calls, backward_from=len(calls) - 1, cotangent=np.full(1, scale))

    split = invoke_many(Recorder(), [request(1.0, True), request(2.0, False, "sliced")], diagnostic=True)  # type: ignore[arg-type]
    header = seen["header"]
    assert seen["diagnostic"] is True
    assert [c["args"] for c in header["calls"]] == [[{"tensor": 0}], [{"result": 0}, {"tensor": 1}], [{"tensor": 2}, {"tensor": 3}]]
    assert header["backward"] == {"calls": [1, 2], "cotangents": [4, 5], "layouts": ["contiguous", "sliced"]}
    assert [float(a[0]) for a in seen["arrays"]] == [1.0, -1.0, 2.0, -2.0, 1.0, 2.0]
    assert [len(o.results) for o in split] == [2, 1] and split[1].functions == ["g"]
    assert set(split[0].grads) == {0, 1} and split[0].grads[1] is None
    assert float(split[1].grads[0][0]) == 1.0 and float(split[1].grads[1][0]) == 2.0


def test_search_finds_the_smallest_failing_cut_in_one_diagnostic_round_trip() -> None:
    """No mask: T=2, D=1 with B=H=1, JSON-safe and schema-valid, from one extra diagnostic request."""
    found, worker = searched(no_mask)
    assert worker.trips == ["each", "diagnostic"]  # the case set in one trip, then the search
    assert found is not None and found["found"] is True
    assert found["size"] == {"B": 1, "H": 1, "T": 2, "D": 1}
    assert found["result"] == "output" and found["with_respect_to"] is None and found["cotangent"] is None
    assert [(t["name"], t["shape"]) for t in found["inputs"]][::4] == [("q1", [1, 1, 2, 1]), ("value", [1, 1, 2, 2])]
    assert found["mismatched"] == 2 and found["elements"] == 4  # the first query row sees both keys
    assert found["difference"][0][0][1] == [0.0, 0.0]
    assert json.loads(json.dumps(found, allow_nan=False)) == found
    assert validate(found, _COUNTEREXAMPLE) == []


def test_search_says_when_no_small_cut_fails() -> None:
    """A bug that needs more than 5 tokens: found is false, the note says so, the other fields are null."""
    found, _ = searched(wrong_when_long)
    assert found is not None and found["found"] is False
    assert found["note"].startswith("None of the") and found["note"].endswith("the bug shows only on larger inputs.")
    assert found["call"] is None and found["searched"] == 12
    assert validate(found, _COUNTEREXAMPLE) == []


def test_no_search_for_a_passing_check_nor_after_a_failed_round_trip() -> None:
    """A correct submission makes no extra request; after a failed extra request no check searches again."""
    found, worker = searched(correct)
    assert found is None and worker.trips == ["each"]  # the case set's trip only
    found, worker = searched(no_mask, fail_diagnostics=True, case_sets=(suite.attention_causal, suite.attention_coefficients))
    assert found is None and worker.trips == ["each", "diagnostic", "each"]  # the first search fails; no second one


def test_heat_map_is_valid_svg_with_a_title_and_one_cell_per_element() -> None:
    """Parsable XML, escaped title, rows × cols cells, outlines and crosses keyed in the legend, deterministic."""
    matrix = [[0.5, -0.25, float("nan")], [0.0, 1e-3, -0.5]]
    flagged = [[True, False, True], [False, False, True]]
    text = heatmap.svg(matrix, "got − expected <&>", "a description", "ce-1", flagged)
    root = ET.fromstring(text)
    assert root.tag == SVG + "svg" and root.find(SVG + "title").text == "got − expected <&>"
    cells = root.find(f"{SVG}g[@class='cells']").findall(SVG + "rect")
    assert len(cells) == 6
    assert [c.get("fill") for c in cells[:3]] == ["#b2182b", heatmap.colour(-0.25, 0.5), heatmap.MISSING]
    assert cells[3].get("fill") == "#f7f7f7" and cells[0].find(SVG + "title").text == "i = 0, j = 0: 0.5"
    assert len(root.find(f"{SVG}g[@class='marks']").findall(SVG + "rect")) == 3
    legend = "".join(root.find(f"{SVG}g[@class='legend']").itertext())
    assert "outside tolerance" in legend and "not finite" in legend and "\u22120.5" in legend
    assert heatmap.svg(matrix, "got − expected <&>", "a description", "ce-1", flagged) == text


def test_view_shows_tables_code_and_marks_without_colour() -> None:
    """Three tables, ✗ on the elements outside the tolerance, Python that compiles, the heat map as markup."""
    found, _ = searched(no_mask)
    assert found is not None
    shown = counterexample_view.view(found, "check-2-2-ce")
    assert shown["heading"] == "Smallest failing input: B=1, H=1, T=2, D=1"
    assert [t["caption"] for t in shown["tables"]][:2] == ["Expected", "Got"]
    marked = [cell.endswith(counterexample_view.OUTSIDE) for _, row in shown["tables"][2]["rows"] for cell in row]
    assert marked == [True, True, False, False]
    compile(shown["code"], "counterexample", "exec")
    assert shown["code"].splitlines()[-1] == "out = " + found["call"]
    assert 'id="check-2-2-ce-title"' in shown["svg"]
    assert shown["where"] == "Cell (i, j) of each table is element [0, 0, i, j] of the output (shape [1, 1, 2, 2])."
    assert counterexample_view.where("the output", []) == "The output is a single number (a 0-dim tensor)."


@pytest.fixture(scope="module")
def mutant_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The no_mask mutant graded twice with one seed, both at once."""
    folder = tmp_path_factory.mktemp("counterexamples")
    mutant = folder / "no_mask.py"
    mutant.write_text(mutant_source(next(m for m in MUTANTS if m.name == "no_mask")))
    return grade_many({"first": (mutant, 20261129), "second": (mutant, 20261129)}, folder)


def test_graded_mutant_gets_the_same_small_counterexample_twice(mutant_runs: dict[str, Any]) -> None:
    """The causal values check: B=H=1, T=2 in both runs, identical records; shown in HTML and summary."""
    first, second = mutant_runs["first"], mutant_runs["second"]
    found = first.check("causal_values")["counterexample"]
    assert found["found"] is True and found["size"] == {"B": 1, "H": 1, "T": 2, "D": 1}
    gradient = first.check("value_gradient")["counterexample"]
    assert gradient["result"] == "gradient" and gradient["with_respect_to"] == "value" and gradient["size"]["T"] == 2
    for check_id in ("causal_values", "value_gradient", "end_to_end_gradients"):
        assert first.check(check_id)["counterexample"] == second.check(check_id)["counterexample"]
    assert first.check("noncausal_values")["counterexample"] is None
    assert "smallest failing input: B=1, H=1, T=2, D=1" in first.stdout
    assert first.html.count('<details class="counterexample"') >= 5 and "Heat map of got" in first.html
    assert validate(first.report) == []


def test_correct_submission_has_no_counterexamples(tmp_path: Path) -> None:
    """Full marks on T2 and T3, every counterexample null."""
    run = grade(ROOT / "tests" / "corpus" / "correct" / "einsum.py", tmp_path, 20261129, "--tiers", "T2,T3")
    assert run.report["score"] == run.report["max_score"] == 80.0
    assert all(c["counterexample"] is None for t in run.report["tiers"] for c in t["checks"])
    assert '<details class="counterexample"' not in run.html


def test_domain_edges_stay_in_the_contract_when_cut() -> None:
    """The λ case whose products cancel has q1·k1 = 0 and every prefix's exponent at most 0; the padding case has its first
    key and one query all zeros: every cut the search makes keeps their λ finite and their first key's logits exactly 0."""
    for seed in (1, 2, 3):
        cancelling = [c for c in suite.lambda_values(seed) if oracle.lambda_exponents(*c.vectors)[0] == 0.0]
        assert len(cancelling) == 2 and all(np.abs(c.q1 * c.k1).max() > 88.8 for c in cancelling)
        for case in cancelling:
            assert all(float(np.cumsum(case.q1 * case.k1)[n]) <= 0.0 for n in range(case.q1.size))
            assert all(np.isfinite(oracle.scalar_lambda(*cut_lambda(case, n).vectors, 0.2)) for n in range(1, case.q1.size + 1))
        (padded,) = [c for c in suite.attention_causal(seed) if "all zeros" in c.note]
        assert not padded.k1[..., 0, :].any() and not padded.k2[..., 0, :].any() and not padded.value[..., 0, :].any()
