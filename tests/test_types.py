"""The grader type-checks: mypy, configured in pyproject.toml, finds no error in grader/."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_mypy_finds_no_error() -> None:
    """python -m mypy (the files and settings of [tool.mypy]) exits 0."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", "/dev/null"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
