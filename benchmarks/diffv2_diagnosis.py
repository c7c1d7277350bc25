"""How well the first root cause of each DIFF V2 report localises the labelled bug (tests/corpus/v2/labels.json).

The first root cause of a wrong file is *right* when it names the labelled
function and a component that fits the label's (:data:`FITTING`: the corpus
labels with words of its own, e.g. ``grouping`` for what the diagnosis calls
``heads``), *wrong* when it names another function or component, *silent*
when there is none. A correct file must get no root cause and 100. Every file
is graded with ``diffgrade batch`` (instructor reports, so hidden causes count).

    python benchmarks/diffv2_diagnosis.py [SEED] [CORPUS]

CORPUS is a folder of tests/corpus: ``v2`` (the default; the probes were
written with its labels in hand), or ``v2_unseen``, ``v2_blind``,
``v2_holdout``, ``v2_fresh``, ``v2_sealed``, ``v2_stateful``, ``v2_practice``, ``v2_acceptance``, ``v2_cold``, ``v2_winter``,
``v2_spring``, ``v2_summer``, ``v2_autumn``, ``v2_solstice``, ``v2_harvest``, ``v2_frost``, ``v2_ember``, ``v2_dusk`` and later ones (``v2_gale`` … ``v2_mist``) (each written afterwards by someone who had not seen the
diagnosis: its first measurement on each is how it generalises).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CORPORA = Path(__file__).resolve().parents[1] / "tests" / "corpus"
FITTING = {
    "grouping": {"heads"},  # which key/value head a query head reads
    "pairing": {"heads"},  # which query heads make a pair, and their roles
    "gate": {"gate"},
    "layout": {"layout", "strided"},  # the [B, T, H, D] axes; .view on a non-contiguous input
    "scale": {"scale"},
    "output": {"output", "heads", "type"},  # a factor or norm after the difference; 2H heads returned; a tuple returned
    "mask": {"mask"},
    "softmax": {"softmax"},
    "stability": {"stability"},
    "graph": {"graph"},
    "dtype": {"dtype"},
    "backward": {"backward"},
    "mutation": {"mutation"},
    "strided": {"strided", "layout"},  # an input's memory (strides, offsets, stride 0)
    "shape": {"shape", "type"},
    "state": {"state"},
    "value": {"value"},
}


def graded(corpus: Path, kind: str, seed: int, out: Path) -> dict[str, dict[str, Any]]:
    """Every file of ``kind`` graded with ``seed``: name -> report."""
    command = [sys.executable, "-m", "grader", "batch", str(corpus / kind), "--out", str(out), "--seed", str(seed), "--exercise", "diff_v2",
               "--audience", "instructor"]  # fmt: skip
    subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    return {folder.name: json.loads((folder / "report.json").read_text()) for folder in out.iterdir() if (folder / "report.json").is_file()}


def verdict(label: dict[str, Any], causes: list[dict[str, Any]]) -> str:
    """right, wrong or silent for the first root cause against the label."""
    if not causes:
        return "silent"
    first = causes[0]
    return "right" if first["function"] == label["function"] and first["component"] in FITTING.get(label["component"], {label["component"]}) else "wrong"


def main(seed: int, corpus: Path) -> int:
    """Grade the corpus, print a line per file and the totals; 1 when a correct file gets a cause or loses points."""
    labels = json.loads((corpus / "labels.json").read_text())
    counts = {"right": 0, "wrong": 0, "silent": 0}
    bad_correct = []
    with tempfile.TemporaryDirectory() as scratch:
        for kind in ("correct", "wrong"):
            for name, report in sorted(graded(corpus, kind, seed, Path(scratch) / kind).items()):
                causes = report["diagnosis"]["root_causes"]
                first = f"{causes[0]['function']}/{causes[0]['component']}: {causes[0]['title']}" if causes else "-"
                if kind == "correct":
                    ok = not causes and report["score"] == report["max_score"]
                    bad_correct += [] if ok else [name]
                    print(f"correct {name:26s} {report['score']:6.1f} causes {len(causes)} {'ok' if ok else 'MISS'}")
                    continue
                label = labels[f"wrong/{name}"]
                found = verdict(label, causes)
                counts[found] += 1
                print(f"wrong   {name:26s} {label['function']}/{label['component']:9s} {found:6s} {first}")
    total = sum(counts.values())
    print(f"SUMMARY {corpus.name}, seed {seed}: {total} wrong files, first cause right {counts['right']}, wrong {counts['wrong']}, silent {counts['silent']}; "
          f"correct files with a cause or below 100: {', '.join(bad_correct) or 'none'}")  # fmt: skip
    return 1 if bad_correct else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, CORPORA / (sys.argv[2] if len(sys.argv) > 2 else "v2")))
