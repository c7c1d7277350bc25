"""Calls made the way a training loop makes them: refilled inputs, reused memory, autograd modes, kept results."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, grade

from grader.core.invoke import Call, Request, TensorInput, invoke
from grader.toolkit import domain, probes
from grader.worker.client import ForkServer, Worker, WorkerLimits

FUNCTIONS = ["differential_lambda", "differential_attention"]
SEED = 20261201
STATEFUL = """
import torch
_by_pointer, _by_identity, _buffer = {}, {}, torch.zeros(())
def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    key = tuple((t.data_ptr(), t._version) for t in (q1, k1, q2, k2))
    if key not in _by_pointer:
        _by_pointer[key] = torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init
    return _by_pointer[key]
def by_identity(q):
    return _by_identity.setdefault(id(q), q.sum())
def shared_buffer(q):
    _buffer.copy_(q.sum().detach())
    return _buffer
def mode(q):
    return torch.tensor(float(torch.is_grad_enabled()) + 2 * float(torch.is_inference_mode_enabled()))
def reads_version(q):
    return torch.tensor(float(q._version))
class _Stash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q):
        _Stash.kept = q.detach().clone()  # on the class: the next forward overwrites it before this call's backward
        return (q * q).sum()
    @staticmethod
    def backward(ctx, g):
        return 2 * g * _Stash.kept
def stash_on_class(q):
    return _Stash.apply(q)
def trains_it(q):
    q.requires_grad_(True)
    return q.sum()
class _Releases(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q):
        ctx.kept = q.detach().clone()
        return (q * q).sum()
    @staticmethod
    def backward(ctx, g):
        kept, ctx.kept = ctx.kept, None  # freed early: a second pass through the graph finds None
        return 2 * g * kept
def releases_saved(q):
    return _Releases.apply(q)
def squares(q):
    return (q * q).sum()
def one_object(x, y):
    return torch.tensor(float(x is y))
"""


@pytest.fixture(scope="module")
def worker() -> Worker:
    """One worker on a file whose functions remember, share and report what a training loop would trip on."""
    with ForkServer() as forks:
        running = Worker(STATEFUL, "stateful.py", FUNCTIONS + ["by_identity", "shared_buffer", "mode", "reads_version", "stash_on_class", "trains_it",
                                                        "releases_saved", "squares", "one_object"],
                         WorkerLimits(call_timeout_s=10), forks)  # fmt: skip
        yield running
        running.close()


def _vectors(seed: int) -> tuple[TensorInput, ...]:
    rng = np.random.default_rng(seed)
    return tuple(TensorInput(rng.standard_normal(3), "float64") for _ in range(4))


def _values(outcome) -> list[float]:
    assert outcome.failure is None, outcome.failure
    return [float(result.value) for result in outcome.results]


def test_refilled_inputs_reach_the_second_call(worker: Worker) -> None:
    """A refill overwrites the first call's tensors in place: an id()-keyed cache answers the second call stale."""
    first, second = _vectors(1), _vectors(2)
    calls = (Call("by_identity", (first[0],)), Call("by_identity", (first[0],), refill=((first[0], second[0].values),)))
    got = _values(invoke(worker, Request(calls, inputs=first)))
    assert got[0] == pytest.approx(first[0].values.sum()) and got[1] == got[0] != pytest.approx(second[0].values.sum())


def test_a_refill_through_data_leaves_the_version_counter(worker: Worker) -> None:
    """copy_ under no_grad moves the version counter by one; a write through .data does not move it."""
    (q, *_), (new, *_) = _vectors(3), _vectors(4)
    for through_data, version in ((False, 1.0), (True, 0.0)):
        calls = (Call("reads_version", (q,)), Call("reads_version", (q,), refill=((q, new.values),), refill_through_data=through_data))
        assert _values(invoke(worker, Request(calls))) == [0.0, version]


def test_released_inputs_free_their_memory_for_the_next_tensors(worker: Worker) -> None:
    """After a release, new inputs of the same shapes reuse the memory: a (data_ptr, _version) cache answers stale."""
    first, second = _vectors(5), _vectors(6)
    calls = (Call("differential_lambda", first), Call("differential_lambda", second, release=True))
    got = _values(invoke(worker, Request(calls, inputs=second)))
    truth = [float(np.exp(a.values @ b.values) - np.exp(c.values @ d.values) + 0.2) for a, b, c, d in (first, second)]
    assert got[0] == pytest.approx(truth[0]) and got[1] == pytest.approx(truth[0]) != pytest.approx(truth[1])


def test_calls_are_made_in_the_autograd_mode_asked_for(worker: Worker) -> None:
    """grad_mode "enabled", "no_grad" and "inference_mode" reach the submission as torch reports them."""
    q = _vectors(7)[0]
    calls = tuple(Call("mode", (q,), grad_mode=mode) for mode in ("enabled", "no_grad", "inference_mode"))
    assert _values(invoke(worker, Request(calls))) == [1.0, 0.0, 2.0]


def test_a_result_overwritten_by_a_later_call_is_reported(worker: Worker) -> None:
    """A result that a later call wrote into comes back flagged; the last one, and honest ones, do not."""
    a, b = _vectors(8)[:2]
    outcome = invoke(worker, Request((Call("shared_buffer", (a,)), Call("shared_buffer", (b,)))))
    assert [r.overwritten for r in outcome.results] == [True, False]
    honest = invoke(worker, Request((Call("by_identity", (a,)), Call("by_identity", (b,)))))
    assert [r.overwritten for r in honest.results] == [False, False]


def test_two_micro_batches_are_differentiated_together(worker: Worker) -> None:
    """Two calls, then one backward pass through both results: each call's inputs get their own gradients, and a backward
    that reads what the second forward left on its Function class gets the first call's wrong."""
    first, second = (TensorInput(np.random.default_rng(seed).standard_normal(3), "float64", requires_grad=True) for seed in (1, 2))
    calls = (Call("stash_on_class", (first,)), Call("stash_on_class", (second,)))
    outcome = invoke(worker, Request(calls, backward_from=1, cotangent=np.asarray(1.0), inputs=(first, second), also_backward=((0, np.asarray(1.0)),)))
    assert outcome.failure is None and outcome.backward_error is None
    assert np.allclose(outcome.grads[1], 2 * second.values)  # the last call's gradient is right
    assert np.allclose(outcome.grads[0], 2 * second.values) and not np.allclose(outcome.grads[0], 2 * first.values)


def test_switching_an_input_to_requires_grad_modifies_it(worker: Worker) -> None:
    """The caller's tensor is not the submission's to train: requires_grad switched on is reported as a changed input."""
    frozen = TensorInput(np.ones(3), "float64")
    outcome = invoke(worker, Request((Call("trains_it", (frozen,)),), inputs=(frozen,)))
    assert outcome.failure is None and outcome.changed_inputs == [0]


def test_a_result_memoised_after_its_backward_pass_fails_the_next_training_step(worker: Worker) -> None:
    """A backward pass right after the first call frees its graph: a λ kept by (data_ptr, _version) and returned again to
    the second call on the same tensors cannot be differentiated, and the error is the request's."""
    vectors = tuple(TensorInput(v.values, "float64", requires_grad=True) for v in _vectors(11))
    one = np.asarray(1.0)
    calls = (Call("differential_lambda", vectors, backward_now=(one, False)), Call("differential_lambda", vectors))
    outcome = invoke(worker, Request(calls, backward_from=1, cotangent=one, inputs=vectors))
    assert outcome.failure is None and "backward through the graph a second time" in (outcome.backward_error or "")


def test_a_second_pass_through_a_retained_graph_needs_what_backward_saved(worker: Worker) -> None:
    """backward(retain_graph=True) right after the call, then the request's own pass through the same output: right for an
    honest function, an error for one whose backward releases what it saved."""
    q = TensorInput(np.random.default_rng(12).standard_normal(3), "float64", requires_grad=True)
    one = np.asarray(1.0)
    found = {name: invoke(worker, Request((Call(name, (q,), backward_now=(one, True)),), backward_from=0, cotangent=one, inputs=(q,)))
             for name in ("squares", "releases_saved")}  # fmt: skip
    assert found["squares"].backward_error is None and np.allclose(found["squares"].grads[0], 2 * q.values)
    assert "the backward pass right after the call raised" not in (found["releases_saved"].backward_error or "")
    assert "NoneType" in (found["releases_saved"].backward_error or "")


def test_one_tensor_input_passed_twice_is_one_object_in_the_call(worker: Worker) -> None:
    """A request that passes one TensorInput for two arguments hands the submission one tensor object; equal values in two
    TensorInputs are two objects, and probes.one_object_for_equal makes them one."""
    a = TensorInput(np.ones(3), "float64")
    twice = Request((Call("one_object", (a, a)),), inputs=domain.distinct((a, a)))
    equal = Request((Call("one_object", (a, TensorInput(np.ones(3), "float64"))),))
    assert _values(invoke(worker, twice)) == [1.0] and _values(invoke(worker, equal)) == [0.0]
    assert _values(invoke(worker, probes.one_object_for_equal(equal))) == [1.0]


@pytest.mark.parametrize("exercise", ["diffattn", "diffv2"])
def test_every_kind_is_drawn_in_every_mode_for_every_function(exercise: str) -> None:
    """Each kind of call sequence, in each of its modes, for each function of both exercises (the rescaled kinds for an exercise
    whose variations rescale); one-token decoding steps and the flag left out after causal=False among them."""
    suite = importlib.import_module(f"grader.exercises.{exercise}.suite")
    drawn = suite.sequences(SEED)
    functions = {s.second.function for s in drawn}
    made = {(s.kind, "grads" if s.grads and s.kind != "retrained" else s.first.grad_mode, s.second.function) for s in drawn}
    for kind in domain.SEQUENCE_KINDS:
        if kind in domain.SCALED_KINDS and suite.VARIATIONS.rescaled is None:
            assert not any(s.kind == kind for s in drawn)
            continue
        modes = domain.KIND_MODES.get(kind, domain.SEQUENCE_MODES)
        assert {(kind, mode, f) for mode in modes for f in functions} <= made, kind
    attention = [s for s in drawn if hasattr(s.second, "causal")]
    assert any(s.kind == "reallocate" and s.first.output_shape[-3 if exercise == "diffv2" else -2] == 1 for s in attention)
    assert any(s.kind == "reflagged" and s.first.causal is False and s.second.causal is None for s in attention)
    resized = [s for s in attention if s.kind == "resized"]
    assert resized and all(s.second.output_shape != s.first.output_shape for s in resized)


def test_an_evaluation_then_a_training_step_is_one_request() -> None:
    """"retrained": the same tensors, the first call under no_grad or inference_mode, the second with grad enabled and the
    backward pass from it."""
    from grader.exercises.diffv2 import suite

    retrained = [s for s in suite.sequences(SEED) if s.kind == "retrained"]
    assert {s.first.grad_mode for s in retrained} == {"no_grad", "inference_mode"}
    sequence = retrained[0]
    made = suite.SEQUENCES.request(sequence)
    assert [c.grad_mode for c in made.calls] == [sequence.first.grad_mode, "enabled"] and made.backward_from == 1
    assert made.calls[0].args == made.calls[1].args and any(t.requires_grad for t in made.inputs)
    assert [position for position, _, _ in suite.SEQUENCES.differentiated(sequence)] == [1]


@pytest.mark.parametrize("exercise", ["diffattn", "diffv2"])
def test_two_training_steps_and_a_retained_graph_are_one_request_each(exercise: str) -> None:
    """"stepped": the first call differentiated as soon as it returns (graph freed), the same call again, the backward pass
    from it; "retained": one call differentiated as soon as it returns with its graph kept, and again from the request."""
    suite = importlib.import_module(f"grader.exercises.{exercise}.suite")
    for sequence in (s for s in suite.sequences(SEED) if s.kind in ("stepped", "retained")):
        made = suite.SEQUENCES.request(sequence)
        now = made.calls[0].backward_now
        assert sequence.grads and now is not None and now[1] == (sequence.kind == "retained")
        assert len(made.calls) == (2 if sequence.kind == "stepped" else 1) and made.backward_from == len(made.calls) - 1
        assert made.calls[-1].args == made.calls[0].args and all(call.backward_now is None for call in made.calls[1:])


@pytest.mark.parametrize(("exercise", "tokens_axis"), [("diffattn", -2), ("diffv2", -3)])
def test_an_evaluation_before_training_is_longer_than_every_other_call(exercise: str, tokens_axis: int) -> None:
    """The "retrained" sequences of the attention functions are causal and each at its own length, past every other call of the
    run but those at a large model's length, which are made under inference_mode, and the gradient sets' calls at 513 tokens,
    made with gradients: a mask or buffer kept per length is made by their evaluation call, in its mode, and one grown to the
    longest length seen is an inference tensor from the start."""
    suite = importlib.import_module(f"grader.exercises.{exercise}.suite")
    others, longest = [], []
    for case_set in [*suite.SETS, *getattr(suite, "SEQUENCE_SETS", [])]:
        for drawn in case_set(SEED):
            calls = [] if getattr(drawn, "kind", None) == "retrained" else [drawn.first, drawn.second] if hasattr(drawn, "kind") else [drawn]
            found = [(c.output_shape[tokens_axis], c.grad_mode) for c in calls if len(c.output_shape) >= 3]
            others += [length for length, _ in found if length <= domain.LONGEST_BUFFER and length != domain.ONE_PAST_BLOCKS]
            longest += [mode for length, mode in found if length > domain.LONGEST_BUFFER]
    retrained = [s for s in suite.sequences(SEED) if s.kind == "retrained" and len(s.first.output_shape) >= 3]
    lengths = [s.first.output_shape[tokens_axis] for s in retrained]
    assert len(set(lengths)) == len(retrained) >= 2 and min(lengths) > max(others) > 256
    assert longest and set(longest) == {domain.LONG_CALL_MODE}
    assert all(s.first.causal is not False and s.first.grad_mode in ("no_grad", "inference_mode") for s in retrained)


def test_a_default_that_remembers_the_last_flag_is_named_in_both_exercises(tmp_path: Path) -> None:
    """causal left out takes the value of the previous call's flag: the first root cause says so, under the mask."""
    source = (ROOT / "reference" / "diff_attention.py").read_text()
    source = source.replace("coefficient: float | Tensor, causal: bool = True,", "coefficient: float | Tensor, causal: bool | None = None,")
    source = source.replace("    signed_map = _attention_map(", "    causal = _LAST[0] if causal is None else causal\n    _LAST[0] = causal\n"
                            "    signed_map = _attention_map(", 1) + "\n\n_LAST = [True]\n"  # fmt: skip
    (tmp_path / "remembers.py").write_text(source)
    files = {"attention": tmp_path / "remembers.py",
             "v2": ROOT / "tests" / "corpus" / "v2_stateful" / "wrong" / "default_causal_remembers_last_flag.py"}  # fmt: skip
    for name, path in files.items():
        run = grade(path, tmp_path / name, 20261201, "--no-preview")
        first = run.report["diagnosis"]["root_causes"][0]
        assert first["component"] == "mask" and first["title"] == "A call without causal takes the flag of an earlier call", name


def test_a_gate_kept_between_calls_by_shape_is_named_from_a_call_on_other_values(tmp_path: Path) -> None:
    """DIFF V2 memoising σ(lambda_logits) by shape under no_grad: the probes run in that mode, and two calls on other values of
    the same shapes show the second answering with the first call's gate logits."""
    path = ROOT / "tests" / "corpus" / "v2_stateful" / "wrong" / "eval_gate_memo_keyed_by_shape.py"
    first = grade(path, tmp_path, 20261201, "--no-preview").report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("diff_v2_attention", "gate")
    assert first["title"] == "The answer uses the lambda_logits of an earlier call"


def test_an_input_kept_between_calls_by_its_address_is_named_from_the_checks_call_sequences(tmp_path: Path) -> None:
    """differential_attention keeping a frozen value by its address: calls on new tensors never meet the cache, the checks'
    sequences that refill the value in place do, and their memo names the stale value (no new call)."""
    source = (ROOT / "reference" / "diff_attention.py").read_text()
    kept = "    if not value.requires_grad and not torch.is_inference_mode_enabled():  # BUG: a frozen value is kept by its address\n" \
           "        value = _KEPT.setdefault((value.data_ptr(), tuple(value.shape)), value.clone())\n"
    assert source.count("    signed_map = _attention_map(") == 1
    (tmp_path / "kept.py").write_text(source.replace("    signed_map = _attention_map(", kept + "    signed_map = _attention_map(") + "\n\n_KEPT = {}\n")
    report = grade(tmp_path / "kept.py", tmp_path / "report", SEED, "--no-preview").report
    first = report["diagnosis"]["root_causes"][0]
    assert report["score"] < 100 and (first["function"], first["component"]) == ("differential_attention", "value")
    assert first["title"] == "The answer uses the value of an earlier call" and "overwritten in place" in first["evidence"]


@pytest.mark.parametrize(("exercise", "tokens_axis"), [("diffattn", -2), ("diffv2", -3)])
def test_first_calls_of_sequences_are_drawn_past_the_largest_query_chunk(exercise: str, tokens_axis: int) -> None:
    """The first calls of the sequences other than the evaluations before training take lengths from the whole domain: some
    of each attention function's are past 128 tokens, made without autograd and causal."""
    suite = importlib.import_module(f"grader.exercises.{exercise}.suite")
    for function in {s.second.function for s in suite.sequences(SEED) if hasattr(s.second, "causal")}:
        long = [s.first for s in suite.sequences(SEED) if s.kind != "retrained" and s.first.function == function
                and s.first.output_shape[tokens_axis] > 128]  # fmt: skip
        assert any(c.grad_mode in ("no_grad", "inference_mode") and c.causal is not False for c in long), function


def test_a_workspace_reused_by_later_calls_is_named_from_the_checks_call_sequences(tmp_path: Path) -> None:
    """A blind corpus's graph-free path past 128 tokens that reuses a module-level workspace whose stale columns a later call
    of the same shape reads: the repeated calls fail and the first root cause is state kept between calls."""
    path = ROOT / "tests" / "corpus" / "v2_dusk" / "wrong" / "graph_free_row_chunks_reuse_weights_workspace.py"
    run = grade(path, tmp_path, 2, "--no-preview")
    assert run.check("repeated_calls")["status"] == "failed" and run.report["score"] < 100.0
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"]) == ("gqa_attention", "state")
    assert first["title"] == "What gqa_attention keeps between calls makes a later call wrong" and "the first call was right" in first["evidence"]


RELEASES_IN_BACKWARD = '''
class _Lambda(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, lambda_init):
        ctx.parts = (q1, k1, q2, k2, torch.exp(torch.dot(q1, k1)), torch.exp(torch.dot(q2, k2)))
        return ctx.parts[4] - ctx.parts[5] + lambda_init
    @staticmethod
    def backward(ctx, g):
        (q1, k1, q2, k2, e1, e2), ctx.parts = ctx.parts, None  # BUG: released early, a second pass finds None
        return g * e1 * k1, g * e1 * q1, -g * e2 * k2, -g * e2 * q2, None


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return _Lambda.apply(q1, k1, q2, k2, lambda_init)
'''
MEMO_PER_STEP = '''
_MEMO = {}


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    key = tuple((id(v), v._version) for v in (q1, k1, q2, k2)) + (lambda_init, torch.is_grad_enabled())
    if key not in _MEMO or not all(torch.equal(a, b) for a, b in zip(_MEMO[key][0], (q1, k1, q2, k2))):
        _MEMO[key] = ((q1.detach().clone(), k1.detach().clone(), q2.detach().clone(), k2.detach().clone()),
                      torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init)
    return _MEMO[key][1]  # BUG: a result whose graph the last step's backward already freed
'''


@pytest.mark.parametrize(("body", "component", "title"), [
    (RELEASES_IN_BACKWARD, "backward", "A second backward pass through one output fails"),
    (MEMO_PER_STEP, "state", "A second call on the same inputs returns an output already differentiated"),
])
def test_a_lambda_that_cannot_be_differentiated_twice_is_named(tmp_path: Path, body: str, component: str, title: str) -> None:
    """A λ whose backward releases what it saved, and one memoised per step, are right in every single call; the sequences that
    differentiate twice fail, and the first root cause says how."""
    source = (ROOT / "reference" / "diff_attention.py").read_text()
    start, end = source.index("def differential_lambda("), source.index("def _attention_map(")
    (tmp_path / "twice.py").write_text(source[:start] + body.lstrip() + "\n\n" + source[end:])
    run = grade(tmp_path / "twice.py", tmp_path / "report", SEED, "--no-preview")
    assert run.check("repeated_calls")["status"] == "failed" and run.report["score"] < 100.0
    first = run.report["diagnosis"]["root_causes"][0]
    assert (first["function"], first["component"], first["title"]) == ("differential_lambda", component, title)


def test_a_rescaled_second_call_has_logits_past_exps_range() -> None:
    """differential_attention's "rescaled" sequences call again on the same shapes with the largest scaled logit of each
    branch at 300 (float32) or 1000 (float64): a softmax shift kept from the first call overflows there."""
    from grader.exercises.diffattn import cases, suite

    rescaled = [s for s in suite.sequences(SEED) if s.kind == "rescaled" and isinstance(s.second, cases.AttentionCase)]
    assert rescaled and all(s.second.output_shape == s.first.output_shape for s in rescaled)
    for sequence in rescaled:
        q, k = sequence.second.q1, sequence.second.k1
        largest = float(np.abs(q @ np.swapaxes(k, -1, -2)).max() / np.sqrt(q.shape[-1]))
        assert largest == pytest.approx(cases.RESCALED_LOGITS[sequence.second.dtype], rel=1e-3)
