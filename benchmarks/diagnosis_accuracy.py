"""Measure how often the diagnosis localises and names the actual bug, on the project's own corpus.

Grades the test corpus (tests/corpus: the mutants, the files in wrong/ and the
correct styles) with one seed, two submissions at a time, and prints for each
wrong submission where its bug is (``ROOT_CAUSES`` in tests/corpus/mutants.py:
the function, the component, words a right explanation contains) and the
first root cause of its report (the ``diagnosis`` section, docs/diagnosis.md):

* *localises*: the first root cause names the bug's function and component;
* *names*: it localises, and its title, evidence or advice contains one of the
  bug's words;
* *wrong*: the first root cause names another function or component.

Then the older measure, the first hint in report order against the named
misconception (``Mutant.misconception``, ``WRONG_MISCONCEPTIONS``), and, for
the correct implementations, how many got any root cause or hint (it must be
0). Run from the repository root: ``python benchmarks/diagnosis_accuracy.py [SEED]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import Graded, grade_many  # noqa: E402
from corpus.mutants import MUTANTS, ROOT_CAUSES, WRONG_MISCONCEPTIONS  # noqa: E402
from tolerance_margin import corpus  # noqa: E402

SEED = 20261129


def hints(run: Graded) -> list[str]:
    """The hint ids of a run's checks, in report order (none when the run wrote no report)."""
    if run.report is None:
        return []
    return [c["hint"]["id"] for t in run.report["tiers"] for c in t["checks"] if c.get("hint")]


def first_cause(run: Graded) -> dict[str, Any] | None:
    """The first root cause of a run's report, or None."""
    causes = (run.report or {}).get("diagnosis", {}).get("root_causes") or []
    return causes[0] if causes else None


def judge(name: str, cause: dict[str, Any] | None) -> str:
    """"named", "localised", "wrong" or "silent" for the first root cause of wrong submission ``name``."""
    if cause is None:
        return "silent"
    function, component, words = ROOT_CAUSES[name]
    if (cause["function"], cause["component"]) != (function, component):
        return "wrong"
    text = " ".join(cause[k] for k in ("title", "evidence", "advice")).lower()
    return "named" if any(word.lower() in text for word in words) else "localised"


def main(seed: int) -> None:
    """Grade the corpus with ``seed`` and print the diagnosis accuracy."""
    actual = {m.name: m.misconception for m in MUTANTS} | WRONG_MISCONCEPTIONS
    with tempfile.TemporaryDirectory() as folder:
        correct, wrong = corpus(Path(folder))
        runs = grade_many({name: (path, seed) for name, path in {**correct, **wrong}.items()}, Path(folder) / "reports")
    failed = {name: run for name, run in runs.items() if run.report is None}
    for name, run in failed.items():
        print(f"{name}: no report (exit {run.code}): {run.stderr.strip().splitlines()[-1:]}")
    verdicts = {name: judge(name, first_cause(runs[name])) for name in wrong}
    print(f"corpus: {len(wrong)} wrong, {len(correct)} correct, seed {seed}")
    print(f"{'submission':<34} {'bug':<36} first root cause")
    for name in sorted(wrong):
        cause = first_cause(runs[name])
        where = "/".join(ROOT_CAUSES[name][:2]).removeprefix("differential_")
        found = "-" if cause is None else f"{str(cause['function']).removeprefix('differential_')}/{cause['component']}"
        print(f"{name:<34} {where:<36} {found:<30} {verdicts[name]}")
    n = len(wrong)
    count = {v: sum(x == v for x in verdicts.values()) for v in ("named", "localised", "wrong", "silent")}
    localised = count["named"] + count["localised"]
    print(f"first root cause localises the bug: {localised}/{n} ({100 * localised / n:.1f}%)")
    print(f"first root cause names the bug:     {count['named']}/{n} ({100 * count['named'] / n:.1f}%)")
    print(f"first root cause is wrong:          {count['wrong']}/{n}" + "".join(f" {k}" for k, v in verdicts.items() if v == "wrong"))
    print(f"no root cause at all:               {count['silent']}/{n}")
    found = {name: hints(runs[name]) for name in wrong}
    in_scope = [name for name in wrong if actual.get(name)]
    named = [name for name in in_scope if found[name][:1] == [actual[name]]]
    print(f"first hint names the named misconception: {len(named)} of {len(in_scope)} in scope, {len(named)} of {n} in all")
    others = sorted({(name, h) for name in wrong for h in found[name] if h != actual.get(name)})
    print(f"hints naming another misconception: {len(others)}" + "".join(f"\n  {who}: {h}" for who, h in others))
    told = [name for name in correct if hints(runs[name]) or first_cause(runs[name])]
    print(f"correct implementations with a root cause or hint: {len(told)} of {len(correct)}" + (f" ({', '.join(told)})" if told else ""))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else SEED)
