"""Grade a labelled corpus of tests/corpus on several seeds and say, per file, whether the checks did their job.

A correct file must score 100 on every seed; a wrong file must lose points in
the tier its label names, or an earlier one, on every seed (the summary also
counts, apart, the wrong files at full marks: credited though wrong). For each wrong
file the table also gives the first hint the report shows (diagnosis is
advice, not a verdict). Every file is graded with ``diffgrade batch``.

    python benchmarks/corpus_grades.py [--corpus NAME] SEED ...

NAME is a folder of tests/corpus with a ``labels.json`` (default ``v2``; e.g.
``v2_blind``, ``diagnosis_unseen``, ``diagnosis_blind``); the exercise is the
one the corpus's files are for.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

CORPORA = Path(__file__).resolve().parents[1] / "tests" / "corpus"
TIERS = ("T1", "T2", "T3")


def graded(corpus: Path, kind: str, seed: int, out: Path) -> dict[str, dict]:
    """Every file of ``corpus``/``kind`` graded with ``seed``: student -> report."""
    command = [sys.executable, "-m", "grader", "batch", str(corpus / kind), "--out", str(out), "--seed", str(seed)]
    subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    return {folder.name: json.loads((folder / "report.json").read_text()) for folder in out.iterdir() if (folder / "report.json").is_file()}


def lost_in(report: dict, tier: str) -> bool:
    """Whether the report loses points in ``tier`` or an earlier tier."""
    allowed = TIERS[: TIERS.index(tier) + 1]
    return any(t["score"] < t["max_score"] for t in report["tiers"] if t["name"] in allowed)


def first_hint(report: dict) -> str:
    """The id of the first hint in report order, or "-"."""
    return next((c["hint"]["id"] for t in report["tiers"] for c in t["checks"] if c.get("hint")), "-")


def main(corpus: Path, seeds: list[int]) -> int:
    """Grade, print a table, and return 1 when a file did not get its verdict on some seed."""
    labels = json.loads((corpus / "labels.json").read_text())
    misses = []
    credited = []  # wrong files at full marks
    hinted_correct = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds:
            for kind in ("correct", "wrong"):
                reports = graded(corpus, kind, seed, Path(scratch) / f"{kind}{seed}")
                for name, report in sorted(reports.items()):
                    label = labels[f"{kind}/{name}"]
                    if kind == "correct":
                        ok = report["score"] == report["max_score"]
                        hinted_correct += [f"{name} (seed {seed})"] if first_hint(report) != "-" else []
                        print(f"seed {seed} correct {name:28s} {report['score']:6.1f} {'ok' if ok else 'MISS'}")
                    else:
                        ok = lost_in(report, label["tier"])
                        credited += [f"{name} (seed {seed})"] if report["score"] == report["max_score"] else []
                        scores = " ".join(f"{t['name']} {t['score']:g}/{t['max_score']:g}" for t in report["tiers"])
                        print(f"seed {seed} wrong   {name:28s} {label['tier']} {scores}  hint {first_hint(report)}  {'ok' if ok else 'MISS'}")
                    if not ok:
                        misses.append(f"{kind}/{name} (seed {seed})")
    print(f"SUMMARY {corpus.name}, seeds {seeds}: misses {len(misses)}: {', '.join(misses) or 'none'}; wrong files at full marks: "
          f"{', '.join(credited) or 'none'}; correct files with a hint: {', '.join(hinted_correct) or 'none'}")
    return 1 if misses else 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    name = "v2"
    if arguments[:1] == ["--corpus"] and len(arguments) > 1:
        name, arguments = arguments[1], arguments[2:]
    if not (CORPORA / name / "labels.json").is_file():
        sys.exit(f"corpus_grades.py: no labelled corpus tests/corpus/{name} (a folder with labels.json)")
    sys.exit(main(CORPORA / name, [int(a) for a in arguments] or [1]))
