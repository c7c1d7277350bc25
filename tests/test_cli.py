"""The command line: exit codes, usage errors in one line, seeds, tiers, escaping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REFERENCE, grade, run_cli

from grader.commands import grade_file, launch

HOSTILE_MESSAGE = '<script>alert("x")</script> & <b>bold</b>'


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["does/not/exist.py"], "submission not found: does/not/exist.py"),
        (["."], "got a directory"),
        (["x.py", "--seed", "banana"], "argument --seed: must be an integer"),
        (["x.py", "--seed", "-3"], "must be in [0, 4294967295]"),
        (["x.py", "--tiers", "T9"], "argument --tiers: must list tiers among T1,T2,T3"),
        (["x.py", "--call-timeout", "0"], "must be positive"),
        (["x.py", "--reference", "missing.py"], "argument --reference: not a file"),
        (["x.py", "--json", "same.out", "--html", "same.out"], "arguments --json and --html must name different files"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], fragment: str, tmp_path: Path) -> None:
    """Bad paths and options give exit 2 and exactly one line on stderr, no report."""
    _write(tmp_path / "x.py", "def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):\n    pass\n")
    run = run_cli(args, tmp_path)
    assert run.code == 2
    assert len(run.stderr.strip().splitlines()) == 1 and fragment in run.stderr, run.stderr
    assert run.report is None and "Traceback" not in run.stderr


def test_internal_error_exits_3_without_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An unexpected exception inside the grader becomes exit 3 and one line."""
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("simulated grader bug")

    monkeypatch.setattr(grade_file, "grade", broken)
    code = launch.run([str(REFERENCE), "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    captured = capsys.readouterr()
    assert code == 3
    assert captured.err.strip() == "diffgrade: internal error: RuntimeError: simulated grader bug"


def test_same_seed_reproduces_the_run(tmp_path: Path) -> None:
    """Two runs of a wrong submission with one seed give identical checks and messages."""
    wrong = _write(tmp_path / "wrong.py", _no_scale_source())
    first = grade(wrong, tmp_path / "a", 99)
    second = grade(wrong, tmp_path / "b", 99)
    assert first.code == second.code == 1

    def checks(run):
        return [(c["id"], c["status"], c["message"], c["worst_ratio"]) for t in run.report["tiers"] for c in t["checks"]]

    assert checks(first) == checks(second)
    assert first.report["seed"] == second.report["seed"] == 99


def _no_scale_source() -> str:
    return (
        "import torch\n"
        "def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):\n"
        "    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init\n"
        "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n"
        "    t = q1.shape[-2]\n"
        "    mask = torch.ones(t, t, dtype=torch.bool).triu(1) if causal else torch.zeros(t, t, dtype=torch.bool)\n"
        "    a1 = (q1 @ k1.transpose(-1, -2)).masked_fill(mask, float('-inf')).softmax(-1)\n"
        "    a2 = (q2 @ k2.transpose(-1, -2)).masked_fill(mask, float('-inf')).softmax(-1)\n"
        "    return (a1 - coefficient * a2) @ value\n"
    )


def test_fresh_seed_by_default_and_recorded(tmp_path: Path) -> None:
    """Without --seed two runs draw different seeds, each recorded in its report."""
    sub = _write(tmp_path / "sub.py", _no_scale_source())
    seeds = set()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        run = run_cli([str(sub), "--no-preview", "--tiers", "T1"], tmp_path / name)
        seeds.add(run.report["seed"])
    assert len(seeds) == 2


def test_tiers_option_runs_only_those_tiers(tmp_path: Path) -> None:
    """--tiers T1 grades out of T1's 20 points and lists T2/T3 checks as skipped."""
    run = grade(REFERENCE, tmp_path, 5, "--tiers", "T1")
    assert run.code == 0
    assert run.report["score"] == run.report["max_score"] == 20.0
    assert run.report["tiers_selected"] == ["T1"]
    skipped = [c for t in run.report["tiers"][1:] for c in t["checks"]]
    assert skipped and all(c["status"] == "skipped" and c["score"] == 0 for c in skipped)
    assert all("not selected" in c["message"] for c in skipped)


def test_student_text_is_escaped_in_html(tmp_path: Path) -> None:
    """An exception message containing markup appears escaped in the HTML report, never raw."""
    sub = _write(
        tmp_path / "hostile.py",
        "def differential_lambda(*a, **k):\n"
        f"    raise ValueError({HOSTILE_MESSAGE!r})\n"
        "def differential_attention(*a, **k):\n"
        f"    raise ValueError({HOSTILE_MESSAGE!r})\n",
    )
    run = grade(sub, tmp_path, 3)
    assert run.code == 1
    assert "<script>alert" not in run.html and "<b>bold</b>" not in run.html
    assert "&lt;script&gt;alert(" in run.html
    assert HOSTILE_MESSAGE in run.check("lambda_values")["message"]
    json.dumps(run.report, allow_nan=False)


@pytest.mark.parametrize(
    "prefix", [b"\xef\xbb\xbf", b"# -*- coding: latin-1 -*-\n# caf\xe9\n"], ids=["bom", "latin1-cookie"]
)
def test_source_is_decoded_like_python_does(prefix: bytes, tmp_path: Path) -> None:
    """A UTF-8 byte-order mark or a coding cookie is honoured, as by the interpreter."""
    path = tmp_path / "encoded.py"
    path.write_bytes(prefix + REFERENCE.read_bytes())
    run = grade(path, tmp_path, 2, "--tiers", "T1")
    assert run.code == 0 and run.report["score"] == 20.0, run.report["submission"]["load_error"]


def test_report_paths_can_be_chosen(tmp_path: Path) -> None:
    """--json and --html write where they are told, creating folders."""
    json_path, html_path = tmp_path / "out" / "a.json", tmp_path / "out" / "b.html"
    run = run_cli([str(REFERENCE), "--no-preview", "--tiers", "T1", "--seed", "1",
                   "--json", str(json_path), "--html", str(html_path)], tmp_path)  # fmt: skip
    assert run.code == 0
    assert json.loads(json_path.read_text())["score"] == 20.0
    assert json_path.stat().st_mode & 0o044 == 0o044, "reports are readable like ordinary files"
    assert html_path.read_text().lstrip().lower().startswith("<!doctype html>")


def test_a_lone_surrogate_in_a_message_is_written_not_fatal(tmp_path: Path) -> None:
    """An exception message with a lone surrogate is graded (exit 1) and written as valid UTF-8, with U+FFFD in its place."""
    path = tmp_path / "surrogate.py"
    path.write_text(
        "def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):\n    raise ValueError('bad \\ud800 char')\n"
        "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n    raise ValueError('bad \\ud800 char')\n"
    )
    run = grade(path, tmp_path, 3, "--tiers", "T1")
    assert run.code == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert "raised ValueError: bad \ufffd char" in run.check("lambda_returns_0dim_tensor")["message"]
    (tmp_path / "report.html").read_bytes().decode("utf-8")


def test_the_fork_server_starts_first_only_for_a_grading_run() -> None:
    """diffgrade FILE and diffgrade batch start the fork server before their own imports; other commands and --help do not."""
    from grader.commands.launch import grades

    assert grades([]) and grades(["x.py", "--seed", "3"]) and grades(["batch", "class/", "--out", "o"])
    assert not grades(["handout", "out/"]) and not grades(["gradescope-bundle", "a.zip"])
    assert not grades(["--help"]) and not grades(["x.py", "--version"]) and not grades(["batch", "-h"])
