"""A plug-in exercise defined only under tests/ is found, chosen and graded end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PLUGINS = ROOT / "tests" / "exercises"
EXERCISE = PLUGINS / "softmax_exercise"
WRONG = {
    "no_shift": "import torch\n\ndef stable_softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n",
    "last_axis_only": "import torch\n\ndef stable_softmax(x, dim=-1):\n    return torch.softmax(x, dim=-1)\n",
    "in_place": "import torch\n\ndef stable_softmax(x, dim=-1):\n    x.sub_(x.amax(dim=dim, keepdim=True)).exp_()\n    return x / x.sum(dim=dim, keepdim=True)\n",
}


def diffgrade(args: list[str], workdir: Path, plugins: Path | None = PLUGINS) -> subprocess.CompletedProcess[str]:
    """Run ``python -m grader ARGS`` in ``workdir`` with ``plugins`` (a folder of installed distributions) importable."""
    paths = [str(p) for p in (plugins, os.environ.get("PYTHONPATH")) if p]
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=workdir, capture_output=True, text=True, env=env, timeout=300)


def graded(path: Path, workdir: Path, *extra: str) -> tuple[int, dict]:
    """Grade ``path`` with seed 4 and the instructor's view; the exit code and the JSON report."""
    done = diffgrade([str(path), "--seed", "4", "--audience", "instructor", "--json", str(workdir / "r.json"),
                      "--html", str(workdir / "r.html"), *extra], ROOT)  # fmt: skip
    assert (workdir / "r.json").exists(), done.stderr
    return done.returncode, json.loads((workdir / "r.json").read_text())


def scores(report: dict) -> dict[str, float]:
    """Each check's score by id."""
    return {c["id"]: c["score"] for t in report["tiers"] for c in t["checks"]}


def test_listed_with_the_built_in_exercises(tmp_path: Path) -> None:
    """diffgrade exercises lists the plug-in after the built-in ones, with its origin, functions and stub."""
    done = diffgrade(["exercises", "--json"], tmp_path)
    listed = {row["name"]: row for row in json.loads(done.stdout)}
    assert list(listed)[:2] == ["diff_attention", "diff_v2"]
    assert listed["stable_softmax"]["origin"] == "diffgrade-test-exercises"
    assert listed["stable_softmax"]["functions"] == ["stable_softmax"]
    assert listed["stable_softmax"]["stub"] == "tests/exercises/softmax_exercise/stub.py"


def test_reference_gets_full_marks_and_the_report_names_the_exercise(tmp_path: Path) -> None:
    """The plug-in's reference, chosen from the functions it defines, scores 100 in its two tiers."""
    code, report = graded(EXERCISE / "reference.py", tmp_path)
    assert code == 0 and report["score"] == report["max_score"] == 100.0
    assert (report["exercise"], report["exercise_version"]) == ("stable_softmax", "1.0")
    assert [t["name"] for t in report["tiers"]] == ["T1", "T2"]


def test_stub_scores_zero_and_says_not_implemented(tmp_path: Path) -> None:
    """The plug-in's stub, graded with --exercise and no file, scores 0 and each check says why."""
    done = diffgrade(["--exercise", "stable_softmax", "--seed", "4", "--audience", "instructor",
                      "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")], ROOT)  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    assert done.returncode == 1 and report["score"] == 0.0
    assert report["submission"]["path"].endswith("softmax_exercise/stub.py")
    assert all("NotImplementedError" in c["message"] for t in report["tiers"] for c in t["checks"])


@pytest.mark.parametrize(
    ("name", "lost"),
    [("no_shift", {"large_logits"}), ("last_axis_only", {"values", "large_logits"}), ("in_place", {"input_unchanged"})],
)
def test_wrong_softmaxes_lose_the_points_of_their_bug(name: str, lost: set[str], tmp_path: Path) -> None:
    """Overflow, the wrong axis and an in-place update each lose exactly the checks that see them."""
    path = tmp_path / f"{name}.py"
    path.write_text(WRONG[name])
    code, report = graded(path, tmp_path)
    assert code == 1
    assert {check for check, score in scores(report).items() if score == 0} == lost


def test_batch_grades_a_class_of_the_plug_in(tmp_path: Path) -> None:
    """diffgrade batch picks the plug-in from the class's files, records it, and grades every student."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "ada.py").write_text((EXERCISE / "reference.py").read_text())
    (folder / "bob.py").write_text(WRONG["no_shift"])
    done = diffgrade(["batch", str(folder), "--out", str(tmp_path / "out"), "--seed", "4", "--quiet"], ROOT)
    assert done.returncode == 1, done.stderr
    state = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert state["exercise"] == state["settings"]["exercise"] == "stable_softmax"
    totals = {name: json.loads((tmp_path / "out" / name / "report.json").read_text())["score"] for name in ("ada", "bob")}
    assert totals == {"ada": 100.0, "bob": 60.0}


def test_a_broken_plug_in_is_named_and_does_not_stop_grading(tmp_path: Path) -> None:
    """A registered exercise that cannot be imported is listed with the reason; the others still grade."""
    broken = tmp_path / "broken-0.1.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (broken / "entry_points.txt").write_text("[diffgrade.exercises]\nbroken = no_such_module:exercise\n")
    listing = diffgrade(["exercises"], tmp_path, plugins=tmp_path)
    assert listing.returncode == 1
    assert "broken  (broken): cannot be loaded" in listing.stdout and "No module named 'no_such_module'" in listing.stdout
    done = diffgrade([str(ROOT / "reference" / "diff_attention.py"), "--tiers", "T1", "--no-preview", "--quiet",
                      "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")], tmp_path, plugins=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
