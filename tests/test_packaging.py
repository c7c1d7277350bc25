"""A wheel built from the repository carries what the CLI needs, and nothing that collides."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import REFERENCE, ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built without network access."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    return next(out.glob("diffgrade-*.whl"))


def test_wheel_contains_templates_and_check_config(wheel: Path) -> None:
    """Templates ship as grader/templates, the checks' pytest.ini ships with the checks."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"grader/templates/report.html.j2", "grader/templates/summary.txt.j2"} <= names
    assert "grader/exercises/diffattn/checks/pytest.ini" in names
    assert "grader/worker/child.py" in names


def test_wheel_installs_no_colliding_top_level_packages(wheel: Path) -> None:
    """Only the grader package is installed: no top-level reference, templates, tests or exercise."""
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"grader"}


def test_installed_wheel_grades_the_reference(wheel: Path, tmp_path: Path) -> None:
    """Unpacked as a plain (non-editable) install, the CLI grades and renders its reports."""
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    # -S keeps site-packages (and any editable install of this checkout) out of
    # sys.path; the dependencies come in through PYTHONPATH after the wheel.
    env = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{sysconfig.get_paths()['purelib']}", "NO_COLOR": "1"}
    where = subprocess.run([sys.executable, "-S", "-c", "import grader; print(grader.__file__)"], env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert where.stdout.strip().startswith(str(target))
    done = subprocess.run(
        [sys.executable, "-S", "-m", "grader", str(REFERENCE), "--seed", "8", "--tiers", "T1", "--no-preview",
         "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")],
        env=env, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Score: 20.0/20.0" in done.stdout
    assert (tmp_path / "r.html").read_text().count("<svg") >= 1
