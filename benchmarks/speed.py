"""Measure grading speed against the cost of importing torch, on this machine.

Prints, in one run:

(a) one submission, all tiers, end to end (``diffgrade FILE`` with the
    preview curve, as a student runs it), divided by the wall time of
    ``python -c "import torch"`` (median of ROUNDS alternating runs each);
(b) a class of 50 submissions (the correct corpus, the completed stub, the
    wrong files and mutants of the test corpus, the stub) graded with
    ``diffgrade batch`` (default --jobs, isolation on): submissions per
    second, and the wall time per submission divided by the torch import.

Run from the repository root: ``python benchmarks/speed.py [ROUNDS]``.
Targets (issue 4): (a) at most 1.5; (b) at least 5 submissions per second.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from corpus.mutants import CORRECT_DIR, MUTANTS, WRONG_DIR, completed_stub_source, mutant_source  # noqa: E402

CLASS_SIZE = 50


def seconds(command: list[str], cwd: Path) -> float:
    """Wall time of one command that must succeed or fail normally (exit 0 or 1)."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}")
    return took


def make_class(folder: Path) -> dict[str, int]:
    """Write 50 submissions into ``folder``; return how many of each kind."""
    sources = {f"correct_{p.stem}": p.read_text() for p in sorted(CORRECT_DIR.glob("*.py"))}
    sources["correct_completed_stub"] = completed_stub_source()
    kinds = {"correct": len(sources)}
    wrong = {f"wrong_{p.stem}": p.read_text() for p in sorted(WRONG_DIR.glob("*.py"))}
    wrong["stub"] = (ROOT / "exercise" / "diff_attention.py").read_text()
    for mutant in MUTANTS:
        if len(sources) + len(wrong) >= CLASS_SIZE:
            break
        wrong[f"mutant_{mutant.name}"] = mutant_source(mutant)
    sources.update(wrong)
    kinds["wrong"] = len(wrong)
    for name, text in list(sources.items())[:CLASS_SIZE]:
        (folder / f"{name}.py").write_text(text)
    return kinds


def main(rounds: int) -> None:
    """Measure (a) and (b) and print them with their ratios."""
    python = sys.executable
    submission = CORRECT_DIR / "einsum.py"
    with tempfile.TemporaryDirectory(prefix="diffgrade-speed-") as scratch:
        work = Path(scratch)
        imports, singles = [], []
        for _ in range(rounds):
            imports.append(seconds([python, "-c", "import torch"], work))
            singles.append(seconds([python, "-m", "grader", str(submission), "--seed", "1", "--quiet",
                                    "--reference", str(ROOT / "reference" / "diff_attention.py")], work))  # fmt: skip
        torch_s, single_s = statistics.median(imports), statistics.median(singles)
        room = work / "class"
        room.mkdir()
        kinds = make_class(room)
        count = len(list(room.glob("*.py")))
        batch_s = seconds([python, "-m", "grader", "batch", str(room), "--out", str(work / "out"), "--seed", "1", "--quiet"], ROOT)
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; rounds: {rounds}")
    print(f'python -c "import torch": median {torch_s:.2f} s (runs: {", ".join(f"{t:.2f}" for t in imports)})')
    print(f"(a) one submission, all tiers, with the preview: median {single_s:.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in singles)})")  # fmt: skip
    print(f"    ratio to the torch import: {single_s / torch_s:.2f} (target <= 1.5)")
    print(f"(b) batch of {count} submissions ({kinds['correct']} correct, {kinds['wrong']} wrong): {batch_s:.2f} s, "
          f"{count / batch_s:.2f} submissions/s (target >= 5)")  # fmt: skip
    print(f"    wall time per submission / torch import: {batch_s / count / torch_s:.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
