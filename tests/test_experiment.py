"""The experiment section: the harness's format (grader.core.experiment) and the first exercise's toy experiment in it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.core.experiment import Axis, ExperimentError, Frame, Measured, Panel, Series, problems, section
from grader.exercises.diffattn import expected, oracle, toy
from grader.reports.schema import SCHEMA, validate

AXIS = Axis("x", (0.0, 0.5, 1.0))
EXPERIMENT = SCHEMA["properties"]["experiment"]


def small_frame(*series: Series) -> Frame:
    """A frame of one panel over three x values with the given frame series."""
    return Frame("small", "Small experiment", ("One sentence.",), (Panel("line", "A line", "What it shows.", AXIS, "y", series, (0.0, 1.0)),))


def test_section_adds_the_two_runs_to_every_panel() -> None:
    """Frame series first, then the preview and the submission; a missing run leaves null values and its note."""
    found = section(
        small_frame(Series("Expected", "expected", [1.0, 0.5, float("inf")])),
        Measured({"line": [1.0, 0.5, 0.0]}, {"line": "a remark"}), None,
        None, "the submission did not load",
    )  # fmt: skip
    series = found["panels"][0]["series"]
    assert [(s["role"], s["label"]) for s in series] == [("expected", "Expected"), ("preview", "Reference preview"), ("submission", "Submission")]
    assert series[0]["values"] == [1.0, 0.5, None]  # non-finite values become null
    assert series[1] == {"label": "Reference preview", "role": "preview", "values": [1.0, 0.5, 0.0], "note": "a remark"}
    assert series[2] == {"label": "Submission", "role": "submission", "values": None, "note": "the submission did not load"}
    assert found["panels"][0]["x"] == {"label": "x", "values": [0.0, 0.5, 1.0]}
    assert validate(found, EXPERIMENT, "$.experiment") == []


def test_a_run_without_a_panel_says_so() -> None:
    """A run that measured no curve for a panel gives null values and 'not measured'."""
    found = section(small_frame(), Measured({}), None, Measured({"line": [0.0, 0.0, 0.0]}), None)
    preview = found["panels"][0]["series"][0]
    assert preview["values"] is None and preview["note"] == "not measured"


@pytest.mark.parametrize(
    ("frame", "preview", "message"),
    [
        (small_frame(Series("Mine", "submission", [0.0, 0.0, 0.0])), None, "a frame holds only expected and context series"),
        (small_frame(Series("Short", "expected", [0.0])), None, "series[0].values: 1 values for 3 x values"),
        (small_frame(Series("A", "context", [0.0] * 3), Series("B", "context", [1.0] * 3)), None, "a panel holds one 'context' series at most"),
        (small_frame(), Measured({"line": [0.0] * 4}), "series[0].values: 4 values for 3 x values"),
    ],
)
def test_section_refuses_what_does_not_fit(frame: Frame, preview: Measured | None, message: str) -> None:
    """A series of a measured role in the frame, a wrong length, two series of one role: an ExperimentError naming it."""
    with pytest.raises(ExperimentError, match=message.replace("(", r"\(").replace("[", r"\[")):
        section(frame, preview, None, None, None)


def test_rules_catch_ids() -> None:
    """Panel ids must be identifiers, and unique."""
    found = section(small_frame(), None, None, None, None)
    found["panels"] = [found["panels"][0], dict(found["panels"][0]), {**found["panels"][0], "id": "Not an id"}]
    assert problems(found, "$.experiment") == [
        "$.experiment.panels[1].id: 'line' names an earlier panel too",
        "$.experiment.panels[2].id: must be lowercase letters, digits and underscores (got 'Not an id')",
    ]


# ---- the first exercise's toy experiment -------------------------------------------------------


@pytest.mark.parametrize("seed", [7, 33, 2024, 4_000_000_000])
def test_noise_is_equal_and_uncorrelated_at_the_output(seed: int) -> None:
    """The oracle's outputs, measured as a submission's are, grow exactly like √(1 + λ²); the noisy maps are maps."""
    clean, first, second = toy.noisy_maps(seed)
    for noisy in (first, second):
        assert np.all(noisy[toy.VISIBLE] > 0) and np.all(noisy[~toy.VISIBLE] == 0)
        assert np.allclose(noisy.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    shares = [np.max(np.abs(noisy - clean)[toy.VISIBLE] / clean[toy.VISIBLE]) for noisy in (first, second)]
    assert max(shares) == pytest.approx(toy.NOISE_SHARE)
    probes = toy.probe_cases(seed)
    for case, target in ((probes.noisy[0], second), (probes.clean[0], clean)):
        assert np.allclose(oracle.attention_maps(case.q2, case.k2, True)[0, 0], target, rtol=1e-14, atol=0)
    outputs = [[expected.attention_output(case).values[0, 0] for case in found] for found in (probes.noisy, probes.clean)]
    growth = toy.noise_growth(*outputs)
    assert growth == pytest.approx([math.sqrt(1 + lam * lam) for lam in toy.LAMBDAS], abs=1e-13)


def test_signed_map_readout_of_the_oracle() -> None:
    """With one-hot values the output is A1 - λA2: no negative entry for λ ≤ 0, rows summing to 1 - λ."""
    readout = toy.probe_cases(7).readout
    outputs = [expected.attention_output(case).values[0, 0] for case in readout]
    shares = toy.negative_share(outputs)
    assert [share for lam, share in zip(toy.MAP_LAMBDAS, shares) if lam <= 0] == [0.0] * 5
    assert shares[-1] is not None and shares[-1] > 0
    assert all(np.all(output[:, toy.TOKENS :] == 0) for output in outputs)
    sums = [output[:, : toy.TOKENS].sum(axis=1) for output in outputs]
    assert all(row == pytest.approx(1 - lam, abs=1e-14) for lam, row in zip(toy.MAP_LAMBDAS, sums))


def test_frame_fits_the_format() -> None:
    """The toy experiment's frame, with no runs, is a valid section of five panels."""
    found = section(toy.frame(7), None, "no preview", None, "no submission")
    assert [panel["id"] for panel in found["panels"]] == ["offset_response", "signal_retained", "independent_noise", "negative_entries", "row_sums"]
    assert validate(found, EXPERIMENT, "$.experiment") == []
