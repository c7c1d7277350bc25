"""Calls at the sizes of large models: lengths past a 1024-token buffer and a 2048-token window, wide heads, logits below a
finite mask value."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from grader.exercises.diffattn import suite as attention_suite
from grader.exercises.diffv2 import suite as v2_suite
from grader.toolkit import domain

CORRECT = '''
import math
import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _map(q, k, causal):
    logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        logits = logits.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(logits, dim=-1)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return torch.matmul(_map(q1, k1, causal) - coefficient * _map(q2, k2, causal), value)
'''
# Each wrong file: the correct one with one realistic edit (text replaced, by what), and the check that must fail.
WRONG = {
    "mask_buffer_of_1024_tokens": (
        (("        logits = logits.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float(\"-inf\"))",
          "        logits = logits.masked_fill(_FUTURE[:t, :t], float(\"-inf\"))"),
         ("def _map(", "_FUTURE = torch.ones(1024, 1024, dtype=torch.bool).triu(1)\n\n\ndef _map(")),
        "causal_values",
    ),
    "key_blocks_of_512_never_rescaled": (
        (("    return torch.softmax(logits, dim=-1)",
          "    top, total, parts = None, 0.0, []\n"
          "    for block in logits.split(512, dim=-1):\n"
          "        top = block.amax(dim=-1, keepdim=True) if top is None else torch.maximum(top, block.amax(dim=-1, keepdim=True))\n"
          "        parts.append(torch.exp(block - top))\n"
          "        total = total + parts[-1].sum(dim=-1, keepdim=True)\n"
          "    return torch.cat(parts, dim=-1) / total"),),
        "causal_values",
    ),
    "finite_mask_of_minus_1e4": ((("float(\"-inf\")", "-1e4"),), "large_logit_values"),
    "sliding_window_of_2048_tokens": (
        (("torch.ones(t, t, dtype=torch.bool).triu(1)",
          "torch.ones(t, t, dtype=torch.bool).triu(1) | torch.ones(t, t, dtype=torch.bool).tril(-2048)"),),
        "causal_values",
    ),
    "heads_past_128_scaled_again": (((" / math.sqrt(q.shape[-1])", " / (math.sqrt(q.shape[-1]) * max(1, q.shape[-1] // 64))"),), "causal_values"),
    "causal_mask_on_a_fused_kernels_shapes": (
        (("    if causal:\n        t = q.shape[-2]\n",
          "    t = q.shape[-2]\n    if causal or (16 < t and t % 4 == 0 and q.shape[0] * q.shape[1] % 4 == 0):\n"),),
        "noncausal_values",
    ),
    "shift_from_every_8th_key_past_1024": (
        (("    return torch.softmax(logits, dim=-1)",
          "    if logits.shape[-1] > 1024:\n"
          "        weights = torch.exp(logits - logits[..., ::8].amax(dim=-1, keepdim=True))\n"
          "        return weights / weights.sum(dim=-1, keepdim=True)\n"
          "    return torch.softmax(logits, dim=-1)"),),
        "large_logit_values",
    ),
}
SEED = 5


def _wrong_source(name: str) -> str:
    source = CORRECT
    for old, new in WRONG[name][0]:
        assert old in source
        source = source.replace(old, new)
    return source


def _deepest_logit(q: np.ndarray, k: np.ndarray) -> float:
    """The largest scaled logit q·k/√D of queries and keys laid out [B, H, T, D] (keys broadcast over the heads)."""
    return float((q @ np.swapaxes(k, -1, -2)).max() / np.sqrt(q.shape[-1]))


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_every_run_reaches_model_sizes_in_both_exercises(seed: int) -> None:
    """Each seed's causal sets end with a float32 call past 2048 tokens under inference_mode, the non-causal ones have wide
    heads, the large-logit sets a finite-mask probe."""
    long = [max(c.q1.shape[2] for c in attention_suite.attention_causal(seed))]
    long += [max(c.q.shape[1] for c in s(seed)) for s in (v2_suite.gqa_causal, v2_suite.diff_causal)]
    assert min(long) > domain.LONGEST_CONTEXT
    last = [attention_suite.attention_causal(seed)[-1], *(s(seed)[-1] for s in (v2_suite.gqa_causal, v2_suite.diff_causal))]
    assert {(c.dtype, c.grad_mode) for c in last} == {("float32", domain.LONG_CALL_MODE)}
    wide = [max(c.q1.shape[3] for c in attention_suite.attention_noncausal(seed))]
    wide += [max(c.q.shape[3] for c in s(seed)) for s in (v2_suite.gqa_noncausal, v2_suite.diff_noncausal)]
    assert min(wide) > domain.WIDEST
    deep = [_deepest_logit(c.q1, c.k1) for c in attention_suite.attention_large_logits(seed) if c.dtype == "float64" and c.causal]
    for large_logits in (v2_suite.gqa_large_logits, v2_suite.diff_large_logits):
        deep += [_deepest_logit(np.swapaxes(c.q, 1, 2), np.swapaxes(c.k, 1, 2)[:, :1])
                 for c in large_logits(seed) if c.dtype == "float64" and c.causal]  # fmt: skip
    assert sum(logit < -1e6 for logit in deep) == 3


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_wide_aligned_calls_and_a_key_off_every_stride_in_every_run(seed: int) -> None:
    """Differential attention's causal set has a float64 call with heads of 128 features or more, its wide calls have 24
    (batch, head) pairs over a multiple of 8 tokens past 16 (the one head past a fused kernel's widest aside), and its
    large-logit set ends with a float32 call past 1024 tokens whose odd key in the second half outweighs every other key by
    more than exp's float32 range."""
    causal = attention_suite.attention_causal(seed)
    assert any(c.dtype == "float64" and c.q1.shape[3] >= domain.WIDE_PATH for c in causal)
    wide = [c for c in (*causal, *attention_suite.attention_noncausal(seed)) if domain.WIDEST < c.q1.shape[3] <= domain.KERNEL_WIDEST]
    assert {c.causal for c in wide} == {True, False}
    assert all(c.q1.shape[0] * c.q1.shape[1] == 24 and c.q1.shape[2] % 8 == 0 and c.q1.shape[2] > 16 for c in wide)
    spike = attention_suite.attention_large_logits(seed)[-1]
    logits = (spike.q1 @ np.swapaxes(spike.k1, -1, -2))[0, 0] / np.sqrt(spike.q1.shape[3])
    key = int(np.argmax(logits[0]))
    assert spike.dtype == "float32" and spike.causal is False and spike.q1.shape[2] > domain.LONGEST_BUFFER and key % 2 == 1
    assert (logits[:, key] - np.delete(logits, key, axis=1).max(axis=1)).min() > 89.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_call_past_2048_tokens_has_an_attention_sink_in_both_exercises(seed: int) -> None:
    """The first key of the call past the context window takes most of every late row's weight (so a window that drops it
    changes the output, not one key's 1/T share of it) in both branches and in every query head."""
    from grader.exercises.diffattn import oracle as attention_oracle
    from grader.exercises.diffv2 import oracle as v2_oracle

    first = attention_suite.attention_causal(seed)[-1]
    weights = [attention_oracle.attention_maps(q, k, True)[..., -16:, 0] for q, k in ((first.q1, first.k1), (first.q2, first.k2))]
    for s in (v2_suite.gqa_causal, v2_suite.diff_causal):
        case = s(seed)[-1]
        weights.append(v2_oracle.attention_maps(case.q, case.k, True)[..., -16:, 0])
    assert min(float(w.min()) for w in weights) > 0.5


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The correct file and each wrong one graded in one batch: student -> its instructor report."""
    room = tmp_path_factory.mktemp("class")
    (room / "correct.py").write_text(CORRECT)
    for name in WRONG:
        (room / f"{name}.py").write_text(_wrong_source(name))
    out = tmp_path_factory.mktemp("out")
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(out), "--seed", str(SEED), "--audience", "instructor"]
    subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    return {name: json.loads((out / name / "report.json").read_text(encoding="utf-8")) for name in ("correct", *WRONG)}


def test_the_plain_implementation_earns_full_marks_at_model_sizes(graded: dict[str, dict[str, Any]]) -> None:
    """matmul, masked_fill(-inf) and softmax pass the calls past 1024 and 2048 tokens, with wide heads and at logits of −1e6."""
    assert graded["correct"]["score"] == 100.0


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_buffer_or_block_of_model_size_or_a_finite_mask_costs_points(name: str, graded: dict[str, dict[str, Any]]) -> None:
    """A 1024-token mask buffer, key blocks of 512 never rescaled, a −1e4 mask, a sliding window of 2048 keys, heads of 128
    features and more scaled twice, the causal mask applied on a fused kernel's shapes whatever the flag, and a shift over
    every 8th key of rows past 1024 keys each lose points, in the check that calls at that size."""
    report = graded[name]
    statuses = {check["id"]: check["status"] for tier in report["tiers"] for check in tier["checks"]}
    assert report["score"] < 100.0 and statuses[WRONG[name][1]] == "failed"
