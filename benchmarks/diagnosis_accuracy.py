"""Measure how often the misconception hint names the actual bug.

Grades the test corpus (tests/corpus: the mutants, the files in wrong/ and the
correct styles) with one seed, two submissions at a time, and prints for each
wrong submission the misconception it carries (``Mutant.misconception`` or
``WRONG_MISCONCEPTIONS``; none for a bug outside the diagnosed list, such as a
wrong dtype) and the first hint of its report, in report order. Then: the
fraction of in-scope submissions whose first hint names their bug, the same
over all wrong submissions, the hints that named something else, and how many
correct implementations got any hint (it must be 0). Run from the repository
root: ``python benchmarks/diagnosis_accuracy.py [SEED]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import Graded, grade_many  # noqa: E402
from corpus.mutants import MUTANTS, WRONG_MISCONCEPTIONS  # noqa: E402
from tolerance_margin import corpus  # noqa: E402

SEED = 20261129


def hints(run: Graded) -> list[str]:
    """The hint ids of a run's checks, in report order (none when the run wrote no report)."""
    if run.report is None:
        return []
    return [c["hint"]["id"] for t in run.report["tiers"] for c in t["checks"] if c.get("hint")]


def main(seed: int) -> None:
    """Grade the corpus with ``seed`` and print the diagnosis accuracy."""
    actual = {m.name: m.misconception for m in MUTANTS} | WRONG_MISCONCEPTIONS
    with tempfile.TemporaryDirectory() as folder:
        correct, wrong = corpus(Path(folder))
        runs = grade_many({name: (path, seed) for name, path in {**correct, **wrong}.items()}, Path(folder) / "reports")
    failed = {name: run for name, run in runs.items() if run.report is None}
    for name, run in failed.items():
        print(f"{name}: no report (exit {run.code}): {run.stderr.strip().splitlines()[-1:]}")
    found = {name: hints(runs[name]) for name in wrong}
    in_scope = [name for name in wrong if actual.get(name)]
    named = [name for name in in_scope if found[name][:1] == [actual[name]]]
    print(f"corpus: {len(wrong)} wrong ({len(in_scope)} with a bug in the diagnosed list), {len(correct)} correct, seed {seed}")
    print(f"{'submission':<34} {'actual misconception':<26} first hint")
    for name in sorted(wrong, key=lambda n: (actual.get(n) is None, n)):
        first = found[name][0] if found[name] else "-"
        mark = "ok" if name in named else ("" if actual.get(name) is None and first == "-" else "MISS")
        print(f"{name:<34} {actual.get(name) or '(out of scope)':<26} {first:<26} {mark}")
    print(f"in scope: first hint names the bug for {len(named)} of {len(in_scope)} ({100 * len(named) / len(in_scope):.1f}%)")
    print(f"all wrong submissions: {len(named)} of {len(wrong)} ({100 * len(named) / len(wrong):.1f}%)")
    others = sorted({(name, h) for name in wrong for h in found[name] if h != actual.get(name)})
    print(f"hints naming another misconception: {len(others)}" + "".join(f"\n  {n}: {h}" for n, h in others))
    hinted = [name for name in correct if hints(runs[name])]
    print(f"correct implementations with any hint: {len(hinted)} of {len(correct)}" + (f" ({', '.join(hinted)})" if hinted else ""))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else SEED)
