"""Measure how far the tolerances sit from correct and from wrong implementations.

Grades every submission of the test corpus (tests/corpus) on a few seeds and
prints, from the reports' ``worst_ratio`` (largest |error| / allowed of a
check): the largest ratio any correct implementation reached, the smallest
ratio by which each wrong implementation that fails a value or gradient check
exceeded its allowance, and the margin between the two. Run from the
repository root: ``python benchmarks/tolerance_margin.py [SEED ...]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import grade_many  # noqa: E402
from corpus.mutants import (  # noqa: E402
    CORRECT_DIR,
    MUTANTS,
    WRONG_DIR,
    completed_stub_source,
    mutant_source,
)


def corpus(folder: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """Correct and wrong submissions as files (mutants written into ``folder``)."""
    correct = {p.stem: p for p in sorted(CORRECT_DIR.glob("*.py"))}
    wrong = {p.stem: p for p in sorted(WRONG_DIR.glob("*.py"))}
    generated = {m.name: mutant_source(m) for m in MUTANTS} | {"stub_completed": completed_stub_source()}
    for name, source in generated.items():
        path = folder / f"{name}.py"
        path.write_text(source)
        (correct if name == "stub_completed" else wrong)[name] = path
    return correct, wrong


def ratios(report: dict) -> list[tuple[float, str]]:
    """(worst_ratio, check id) of every check that reports one."""
    return [(c["worst_ratio"], c["id"]) for t in report["tiers"] for c in t["checks"] if c["worst_ratio"] is not None]


def main(seeds: list[int]) -> None:
    """Grade the corpus on ``seeds`` and print the margin."""
    with tempfile.TemporaryDirectory() as folder:
        correct, wrong = corpus(Path(folder))
        jobs = {f"{name}@{seed}": (path, seed) for seed in seeds for name, path in {**correct, **wrong}.items()}
        runs = grade_many(jobs, Path(folder) / "reports")
    worst_correct = max((r, c, job) for job, run in runs.items() if job.split("@")[0] in correct for r, c in ratios(run.report))
    print(f"corpus: {len(correct)} correct, {len(wrong)} wrong, seeds {seeds}")
    print(f"largest error of a correct implementation: {worst_correct[0]:.3g} of the allowance ({worst_correct[2]}, {worst_correct[1]})")
    caught = []
    for name in wrong:
        exceeded = [(r, c, s) for s in seeds for r, c in ratios(runs[f"{name}@{s}"].report) if r > 1.0]
        if exceeded:
            caught.append(max(exceeded) + (name,))
    print(f"wrong implementations failing a value or gradient comparison: {len(caught)} of {len(wrong)} "
          "(the others fail on type, shape, dtype, mutation, graph or an exception)")
    for ratio, check, seed, name in sorted(caught)[:8]:
        print(f"  {name:<28} {ratio:10.3g} x allowance  ({check}, seed {seed})")
    smallest = min(caught)
    print(f"smallest error of a wrong implementation: {smallest[0]:.3g} x the allowance ({smallest[3]}, {smallest[1]})")
    print(f"margin (smallest wrong / largest correct): {smallest[0] / worst_correct[0]:.3g}")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [1, 2])
