"""``diffgrade gradescope-bundle``: the zip's contents, its scripts, and run_autograder end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from grader.commands import bundle, launch
from grader.core import registry

CORRECT = ROOT / "tests" / "corpus" / "correct" / "einsum.py"
RESULT_KEYS = {"score", "execution_time", "output", "visibility", "stdout_visibility", "tests"}
TEST_KEYS = {"name", "number", "score", "max_score", "status", "output", "tags", "visibility"}


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle of this checkout, made with the real command."""
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    assert launch.run(["gradescope-bundle", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def unpacked(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle unzipped, as Gradescope puts it in /autograder/source."""
    target = tmp_path_factory.mktemp("source")
    zipfile.ZipFile(archive).extractall(target)
    return target


def _autograde(unpacked: Path, tree: Path, path: str | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run run_autograder on the simulated autograder folder ``tree``; return the process and results.json."""
    env = {**os.environ, bundle.ROOT_VARIABLE: str(tree), "NO_COLOR": "1",
           "PATH": path or f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    done = subprocess.run(["bash", str(unpacked / "run_autograder")], cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    return done, json.loads((tree / "results" / "results.json").read_text())


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A simulated /autograder with these files in submission/."""
    (tmp_path / "submission").mkdir()
    for name, text in files.items():
        (tmp_path / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "submission" / name).write_text(text)
    return tmp_path


# --- The zip -----------------------------------------------------------------


def test_zip_holds_scripts_readme_and_the_source(archive: Path) -> None:
    """setup.sh, run_autograder (executable) and README.md at the root; diffgrade's source, no reference or tests."""
    infos = {info.filename: info for info in zipfile.ZipFile(archive).infolist()}
    assert {name for name in infos if "/" not in name} == {"setup.sh", "run_autograder", "README.md"}
    assert {"diffgrade/pyproject.toml", "diffgrade/README.md", "diffgrade/grader/commands/grade_file.py",
            "diffgrade/templates/report.html.j2", "diffgrade/grader/exercises/diffattn/checks/pytest.ini"} <= set(infos)  # fmt: skip
    assert {name.split("/")[1] for name in infos if "/" in name} == {"pyproject.toml", "README.md", "grader", "templates"}
    assert not [name for name in infos if "__pycache__" in name or name.endswith(".pyc")]
    assert [(infos[n].external_attr >> 16) & 0o777 for n in ("setup.sh", "run_autograder", "README.md")] == [0o755, 0o755, 0o644]


def test_same_source_gives_the_same_zip(archive: Path) -> None:
    """Entries are sorted and dated 1980-01-01, so building again gives identical bytes."""
    assert bundle.build(bundle.checkout(), registry.named("diff_attention")) == archive.read_bytes()


def test_scripts_parse_and_setup_installs_pinned_torch_first(unpacked: Path) -> None:
    """Both scripts pass bash -n; setup.sh installs torch==2.13.0, then the shipped diffgrade source."""
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(unpacked / script)], check=True)
    installs = [line.split("pip install ", 1)[1] for line in (unpacked / "setup.sh").read_text().splitlines() if "pip install " in line]
    assert installs == ["torch==2.13.0", '"$here/diffgrade"']


def test_submission_runs_unprivileged_and_sees_the_student_view(unpacked: Path) -> None:
    """run_autograder keeps the worker's isolation and asks for the student's view; the README says so."""
    script = (unpacked / "run_autograder").read_text()
    assert "--no-isolation" not in script
    assert 'diffgrade "${candidates[0]}" --exercise diff_attention --no-preview --audience student' in script
    readme = (unpacked / "README.md").read_text()
    assert "`nobody`" in readme and "never passes `--no-isolation`" in readme


def test_shipped_source_builds_a_complete_wheel(unpacked: Path, tmp_path: Path) -> None:
    """The source tree that setup.sh installs builds a wheel with the templates and the checks' configuration."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path), str(unpacked / "diffgrade")],
        check=True, capture_output=True,
    )  # fmt: skip
    names = set(zipfile.ZipFile(next(tmp_path.glob("diffgrade-*.whl"))).namelist())
    assert {"grader/commands/grade_file.py", "grader/templates/report.html.j2", "grader/exercises/diffattn/checks/pytest.ini", "grader/worker/child.py"} <= names


@pytest.mark.parametrize(("out", "fragment"), [("bundle.tar", "must end in .zip (got 'bundle.tar')"), (".zip", "must end in .zip")])
def test_bad_output_is_a_one_line_usage_error(out: str, fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An output that is not a .zip file exits 2 with one line on stderr."""
    with pytest.raises(SystemExit) as stopped:
        launch.run(["gradescope-bundle", out])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and len(error.strip().splitlines()) == 1 and fragment in error, error


# --- run_autograder ----------------------------------------------------------


def test_correct_submission_scores_100(unpacked: Path, tmp_path: Path) -> None:
    """A correct file (beside an ignored notebook checkpoint) gets 100 points, one passed test per check."""
    tree = _tree(tmp_path, {"diff_attention.py": CORRECT.read_text(), ".ipynb_checkpoints/old-checkpoint.py": "x = 1\n"})
    done, results = _autograde(unpacked, tree)
    assert done.returncode == 0, done.stderr
    assert set(results) == RESULT_KEYS and all(set(test) == TEST_KEYS for test in results["tests"])
    assert results["score"] == 100.0
    assert len(results["tests"]) == 28 and {t["status"] for t in results["tests"]} == {"passed"}
    assert {t["visibility"] for t in results["tests"]} <= {"visible", "after_published"}
    report = json.loads((tree / "results" / "report.json").read_text())
    assert report["audience"] == "student" and report["submission"]["path"].endswith("submission/diff_attention.py")
    assert (tree / "results" / "report.html").is_file()


def test_empty_submission_scores_0_with_a_message(unpacked: Path, tmp_path: Path) -> None:
    """No .py or .ipynb file: score 0, no tests, and an output that says what to upload."""
    done, results = _autograde(unpacked, _tree(tmp_path, {"notes.txt": "hello\n"}))
    assert done.returncode == 0
    assert set(results) == RESULT_KEYS
    assert (results["score"], results["tests"], results["visibility"]) == (0.0, [], "visible")
    assert results["output"] == "No .py or .ipynb file was found in your submission. Upload one file, diff_attention.py, with your implementation."


def test_several_candidates_score_0_and_are_named(unpacked: Path, tmp_path: Path) -> None:
    """Two candidate files: score 0, and the output names both."""
    _, results = _autograde(unpacked, _tree(tmp_path, {"a.py": "", "work/b.ipynb": "{}"}))
    assert results["score"] == 0.0 and results["tests"] == []
    assert results["output"] == ("Your submission has 2 Python files or notebooks (a.py, work/b.ipynb). "
                                 "Upload exactly one, diff_attention.py, and submit again.")  # fmt: skip


def test_diffgrade_failure_scores_0_with_its_error(unpacked: Path, tmp_path: Path) -> None:
    """When diffgrade ends without results.json, run_autograder writes one with the exit code and last error line."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "diffgrade").write_text("#!/bin/sh\necho 'diffgrade: internal error: simulated' >&2\nexit 3\n")
    (fake / "diffgrade").chmod(0o755)
    path = os.pathsep.join([str(fake), str(Path(sys.executable).parent), os.environ["PATH"]])
    tree = tmp_path / "autograder"
    tree.mkdir()
    done, results = _autograde(unpacked, _tree(tree, {"diff_attention.py": "x = 1\n"}), path)
    assert done.returncode == 0
    assert set(results) == RESULT_KEYS and results["score"] == 0.0
    assert results["output"] == ("The autograder could not grade your submission (diffgrade exit code 3: "
                                 "diffgrade: internal error: simulated). Please tell your instructor.")  # fmt: skip
    assert "diffgrade: internal error: simulated" in done.stderr
