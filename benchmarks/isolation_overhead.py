"""Measure what the worker's protections cost per submission.

Grades the reference (no preview curve, one fixed seed) several times with
the default, isolated worker and with ``--no-isolation``, alternating, and
prints the median wall time of each and their ratio. Run from the repository
root: ``python benchmarks/isolation_overhead.py [ROUNDS]``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall_time(extra: list[str], folder: Path) -> float:
    """Seconds for one full grading run of the reference."""
    command = [sys.executable, "-m", "grader", str(ROOT / "reference" / "diff_attention.py"), "--seed", "1",
               "--no-preview", "--quiet", "--json", str(folder / "r.json"), "--html", str(folder / "r.html"), *extra]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def main(rounds: int) -> None:
    """Alternate isolated and unisolated runs and print the medians and their ratio."""
    with tempfile.TemporaryDirectory() as folder:
        isolated, plain = [], []
        for _ in range(rounds):
            isolated.append(wall_time([], Path(folder)))
            plain.append(wall_time(["--no-isolation"], Path(folder)))
    a, b = statistics.median(isolated), statistics.median(plain)
    print(f"rounds: {rounds}")
    print(f"isolated worker (default):  median {a:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in isolated)})")
    print(f"--no-isolation:             median {b:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in plain)})")
    print(f"extra time per submission: {a - b:+.2f} s; ratio isolated / unisolated: {a / b:.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
