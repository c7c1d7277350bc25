"""Measure grading speed against the cost of importing torch, on this machine.

Prints, in one run:

(a) one submission, all tiers, end to end (``diffgrade FILE`` with the
    preview curve, as a student runs it), divided by the wall time of
    ``python -c "import torch"`` (median of ROUNDS alternating runs each);
(b) classes of 50 submissions, right ones (the correct corpus and the
    completed stub) and wrong ones (the wrong files, the stub, the mutants of
    the test corpus) in two mixes, each graded with ``diffgrade batch``
    (default --jobs, isolation on): submissions per second, and the wall
    time per submission divided by the torch import;
(c) for each class, the floor: one torch import (no call can be made
    before the fork server has imported torch), then the CPU time of the
    submissions' own code (their calls and backward passes, the
    ``worker.submission_cpu_s`` of every report) and of one bare sandboxed
    worker per student (forked, isolated, loading a two-line file, ending:
    measured here, fork server and grading side included), spread over every
    core: no grader that makes the same calls in a sandbox per student could
    grade the class faster than that.

Run from the repository root: ``python benchmarks/speed.py [ROUNDS] [EXERCISE]``
(EXERCISE: ``diff_attention``, the default, or ``diff_v2``, whose classes
come from tests/corpus/v2: its correct files and its wrong ones).
Targets (issues 10 and 11): (a) at most 1.5; (b) at least 10 submissions per second.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from corpus.mutants import (  # noqa: E402
    CORRECT_DIR,
    MUTANTS,
    WRONG_DIR,
    completed_stub_source,
    mutant_source,
)

from grader.worker.client import ForkServer, Worker, WorkerLimits  # noqa: E402

CLASS_SIZE = 50
BARE_WORKERS = 30
BARE_SOURCE = "import torch\n\ndef gqa_attention(q, k, v, causal=True):\n    return q\n"
# Classes of 50 with this many right submissions: the test corpus's mix (mostly
# wrong: every wrong one costs a diagnosis and a counterexample search), and half.
CLASS_MIXES = (12, 25)


def seconds(command: list[str], cwd: Path) -> float:
    """Wall time of one command that must succeed or fail normally (exit 0 or 1)."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=CACHING)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}")
    return took


# The grader's modules load from their bytecode cache, as they do once installed (pip compiles them) or after a first run:
# an environment that sets PYTHONDONTWRITEBYTECODE would otherwise have every run compile them again (about 0.8 CPU s).
CACHING = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}

V2_CORPUS = ROOT / "tests" / "corpus" / "v2"
# What each exercise's benchmark grades: its correct single submission, its reference, and its class's files.
EXERCISES = {
    "diff_attention": (CORRECT_DIR / "einsum.py", ROOT / "reference" / "diff_attention.py"),
    "diff_v2": (V2_CORPUS / "correct" / "einsum_grouped.py", ROOT / "reference" / "diff_v2_attention.py"),
}


def class_sources(exercise: str) -> tuple[list[str], list[str]]:
    """The right and the wrong submissions a class of ``exercise`` is made of."""
    if exercise == "diff_v2":
        right = [p.read_text() for p in sorted((V2_CORPUS / "correct").glob("*.py"))]
        wrong = [p.read_text() for p in sorted((V2_CORPUS / "wrong").glob("*.py"))]
        return right, wrong + [(ROOT / "exercise" / "diff_v2_attention.py").read_text()]
    right = [p.read_text() for p in sorted(CORRECT_DIR.glob("*.py"))] + [completed_stub_source()]
    wrong = [p.read_text() for p in sorted(WRONG_DIR.glob("*.py"))] + [(ROOT / "exercise" / "diff_attention.py").read_text()]
    return right, wrong + [mutant_source(m) for m in MUTANTS]


def cpu_of(pid: int) -> float:
    """CPU seconds of process ``pid`` and of the children it has collected (from /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stream:
        fields = stream.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def bare_worker_cpu_s() -> float:
    """CPU seconds one sandboxed worker costs with no call at all: forked, isolated, loading a two-line file and ending,
    the fork server's, the worker's and this side's time together (the mean of BARE_WORKERS, after one to warm up;
    /proc counts in clock ticks, so one worker alone would be measured to 10 ms at best)."""
    def bare_worker(forks: ForkServer) -> None:
        worker = Worker(BARE_SOURCE, "bare.py", ["gqa_attention"], WorkerLimits(), forks)
        worker.load()
        worker.close()

    with ForkServer() as forks:
        bare_worker(forks)
        server, mine = cpu_of(forks.pid), sum(os.times()[:2])
        for _ in range(BARE_WORKERS):
            bare_worker(forks)
        time.sleep(0.1)  # the server collects the last worker (its CPU time joins the server's) when it notices the exit
        return (cpu_of(forks.pid) - server + sum(os.times()[:2]) - mine) / BARE_WORKERS


def make_class(folder: Path, correct: int, exercise: str) -> None:
    """Write 50 submissions into ``folder``: ``correct`` right ones (for diff_attention: the correct corpus and
    the completed stub, in turn, under new names), then wrong ones (the wrong files, the stub, the mutants)."""
    right, wrong = class_sources(exercise)
    for i in range(correct):
        (folder / f"correct_{i:02d}.py").write_text(right[i % len(right)])
    for i in range(CLASS_SIZE - correct):
        (folder / f"wrong_{i:02d}.py").write_text(wrong[i % len(wrong)])


def batch_rate(python: str, work: Path, correct: int, exercise: str) -> tuple[float, float]:
    """Seconds to grade a class of 50 of ``exercise`` with ``correct`` right submissions, and the CPU seconds of their own code."""
    room = work / f"class_{correct}"
    room.mkdir()
    make_class(room, correct, exercise)
    out = work / f"out_{correct}"
    took = seconds([python, "-m", "grader", "batch", str(room), "--out", str(out), "--seed", "1", "--quiet", "--exercise", exercise], ROOT)
    own = sum(json.loads(report.read_text())["worker"]["submission_cpu_s"] for report in out.glob("*/report.json"))
    return took, own


def main(rounds: int, exercise: str) -> None:
    """Measure (a) and (b) for ``exercise`` and print them with their ratios."""
    python = sys.executable
    subprocess.run([python, "-m", "compileall", "-q", str(ROOT / "grader")], check=True, env=CACHING)
    submission, reference = EXERCISES[exercise]
    with tempfile.TemporaryDirectory(prefix="diffgrade-speed-") as scratch:
        work = Path(scratch)
        imports, singles = [], []
        for _ in range(rounds):
            imports.append(seconds([python, "-c", "import torch"], work))
            singles.append(seconds([python, "-m", "grader", str(submission), "--seed", "1", "--quiet",
                                    "--reference", str(reference)], work))  # fmt: skip
        torch_s, single_s = statistics.median(imports), statistics.median(singles)
        classes = {correct: batch_rate(python, work, correct, exercise) for correct in CLASS_MIXES}
    bare_s = bare_worker_cpu_s()
    print(f"exercise {exercise}; machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; rounds: {rounds}")
    print(f'python -c "import torch": median {torch_s:.2f} s (runs: {", ".join(f"{t:.2f}" for t in imports)})')
    print(f"(a) one submission, all tiers, with the preview: median {single_s:.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in singles)})")  # fmt: skip
    print(f"    ratio to the torch import: {single_s / torch_s:.2f} (target <= 1.5)")
    cores = os.cpu_count() or 1
    for correct, (batch_s, own_s) in classes.items():
        print(f"(b) batch of {CLASS_SIZE} ({correct} correct, {CLASS_SIZE - correct} wrong): {batch_s:.2f} s, "
              f"{CLASS_SIZE / batch_s:.2f} submissions/s (target >= 10); "
              f"wall time per submission / torch import: {batch_s / CLASS_SIZE / torch_s:.3f}")  # fmt: skip
        floor_s = torch_s + (own_s + CLASS_SIZE * bare_s) / cores
        print(f"(c)   the submissions' own code: {own_s:.2f} CPU s; a bare sandboxed worker: {bare_s * 1000:.0f} CPU ms each; "
              f"after one torch import, on {cores} cores, no grader making these calls in a sandbox per student takes less "
              f"than {floor_s:.2f} s ({CLASS_SIZE / floor_s:.1f}/s); the grader's share: {1 - floor_s / batch_s:.0%} of the wall time")  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2] if len(sys.argv) > 2 else "diff_attention")
