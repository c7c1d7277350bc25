"""Measure what the worker's protections cost: per worker, and per graded submission.

Two measurements, each alternating the default, isolated worker with an
unisolated one (``--no-isolation``) and printing medians:

1. **per worker**: a warm fork server forks workers for a trivial submission
   and each is started, loaded and closed (what a batch pays per student and
   per restart); the median milliseconds of one worker each way.
2. **per submission**: a full grading run of the reference (no preview curve,
   one fixed seed) in a fresh process.

Run from the repository root:
``python benchmarks/isolation_overhead.py [ROUNDS] [WORKERS]``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.worker.client import ForkServer, Worker, WorkerLimits  # noqa: E402

SOURCE = "import torch\n\ndef differential_lambda(q1, k1, q2, k2, lambda_init=0.2):\n    return q1.sum()\n"


def worker_ms(forks: ForkServer, isolate: bool) -> float:
    """Milliseconds to fork, start, load and close one worker."""
    started = time.perf_counter()
    worker = Worker(SOURCE, "bench.py", ["differential_lambda"], WorkerLimits(), forks, isolate=isolate)
    worker.load()
    worker.close()
    return (time.perf_counter() - started) * 1000


def wall_time(extra: list[str], folder: Path) -> float:
    """Seconds for one full grading run of the reference."""
    command = [sys.executable, "-m", "grader", str(ROOT / "reference" / "diff_attention.py"), "--seed", "1",
               "--no-preview", "--quiet", "--json", str(folder / "r.json"), "--html", str(folder / "r.html"), *extra]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def _line(label: str, values: list[float], unit: str) -> str:
    return f"{label:<28} median {statistics.median(values):7.2f} {unit}  (runs: {', '.join(f'{v:.2f}' for v in values)})"


def main(rounds: int, workers: int) -> None:
    """Measure both ways, alternating, and print the medians and their differences."""
    with ForkServer() as forks:
        worker_ms(forks, True)  # waits for the server's warm-up
        isolated_ms, plain_ms = [], []
        for _ in range(workers):
            isolated_ms.append(worker_ms(forks, True))
            plain_ms.append(worker_ms(forks, False))
    a, b = statistics.median(isolated_ms), statistics.median(plain_ms)
    print(f"per worker ({workers} each way):")
    print(f"  isolated worker (default):  median {a:.2f} ms")
    print(f"  --no-isolation:             median {b:.2f} ms")
    print(f"  isolation per worker: {a - b:+.2f} ms")
    if not rounds:
        return
    with tempfile.TemporaryDirectory() as folder:
        isolated, plain = [], []
        for _ in range(rounds):
            isolated.append(wall_time([], Path(folder)))
            plain.append(wall_time(["--no-isolation"], Path(folder)))
    a, b = statistics.median(isolated), statistics.median(plain)
    print(f"per submission ({rounds} full grading runs each way):")
    print("  " + _line("isolated worker (default):", isolated, "s"))
    print("  " + _line("--no-isolation:", plain, "s"))
    print(f"  extra time per submission: {a - b:+.2f} s; ratio isolated / unisolated: {a / b:.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5, int(sys.argv[2]) if len(sys.argv) > 2 else 40)
