"""Grade an independent corpus on several seeds: how many wrong files reach full marks, how many correct ones miss them.

The corpora were written by people who had not seen the checks, each wrong
file with one labelled bug (labels.json): tests/corpus/domain/, which the
domain-wide case sets were measured against while they were built, and
tests/corpus/heldout/, written meanwhile and graded only once the work was
done. Every file is graded with ``diffgrade batch`` once per seed; the
script prints, per seed, the wrong files at full marks and the correct files
below full marks, then the totals. Run it from the repository root:

    python benchmarks/domain_coverage.py [--corpus domain|heldout] [SEEDS ...]    (default: domain, 1 2 3 4 5)
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def grade(folder: Path, seed: int, out: Path) -> dict[str, float]:
    """Every file of ``folder`` graded with ``seed``: student -> score."""
    command = [sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "--seed", str(seed), "--force"]
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    with open(out / "grades.csv", newline="", encoding="utf-8") as stream:
        return {row["student"]: float(row["score"] or 0.0) for row in csv.DictReader(stream)}


def main(argv: list[str]) -> int:
    """Print the wrong files at full marks and the correct files below it, per seed."""
    corpus = ROOT / "tests" / "corpus" / "domain"
    if argv[:1] == ["--corpus"]:
        corpus, argv = ROOT / "tests" / "corpus" / argv[1], argv[2:]
    seeds = [int(s) for s in argv] or [1, 2, 3, 4, 5]
    labels = json.loads((corpus / "labels.json").read_text(encoding="utf-8"))
    wrong_total, correct_total = len(list((corpus / "wrong").glob("*.py"))), len(list((corpus / "correct").glob("*.py")))
    credited: set[str] = set()
    rejected: set[str] = set()
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds:
            wrong = grade(corpus / "wrong", seed, Path(scratch) / f"wrong-{seed}")
            correct = grade(corpus / "correct", seed, Path(scratch) / f"correct-{seed}")
            full = sorted(name for name, score in wrong.items() if score >= 100.0)
            short = sorted(f"{name} ({score:g})" for name, score in correct.items() if score < 100.0)
            credited.update(full)
            rejected.update(name.split(" ")[0] for name in short)
            print(f"seed {seed}: {len(full)}/{len(wrong)} wrong at full marks, {len(short)}/{len(correct)} correct below full marks")
            for name in full:
                print(f"    wrong at 100: {name}: {labels.get(f'wrong/{name}.py', {}).get('bug', '?')}")
            for name in short:
                print(f"    correct below 100: {name}")
    print(f"over {len(seeds)} seeds: {len(credited)}/{wrong_total} wrong files at full marks on some seed, "
          f"{len(rejected)}/{correct_total} correct files below full marks on some seed")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
