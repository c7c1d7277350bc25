"""Grade every file of the test corpora on two seeds and dump each check's status and score.

Used to show that a speed change changes no grade: run it before the change
and after, and compare the two files::

    python benchmarks/grades_unchanged.py before.json
    python benchmarks/grades_unchanged.py after.json
    python benchmarks/grades_unchanged.py --diff before.json after.json

The corpora are tests/corpus/correct, wrong, the mutants of
tests/corpus/mutants.py, the completed and the untouched stub, and both
files folders of tests/corpus/domain and tests/corpus/heldout. They are graded
with ``diffgrade batch`` (default jobs, isolation on, instructor audience).
The JSON maps seed -> submission -> check id -> [status, score]; a second
part, ``details``, keeps each check's message, hint and worst ratio, so that
changes of wording show too (they are reported, but only status and score are
grades).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from corpus.mutants import CORRECT_DIR, MUTANTS, WRONG_DIR, completed_stub_source, mutant_source  # noqa: E402

SEEDS = (1, 20261201)
CORPUS = ROOT / "tests" / "corpus"


def write_class(folder: Path) -> None:
    """Every corpus file, under a name that says where it comes from."""
    sources: dict[str, str] = {}
    for path in sorted(CORRECT_DIR.glob("*.py")):
        sources[f"correct__{path.stem}"] = path.read_text()
    for path in sorted(WRONG_DIR.glob("*.py")):
        sources[f"wrong__{path.stem}"] = path.read_text()
    for mutant in MUTANTS:
        sources[f"mutant__{mutant.name}"] = mutant_source(mutant)
    sources["stub__completed"] = completed_stub_source()
    sources["stub__untouched"] = (ROOT / "exercise" / "diff_attention.py").read_text()
    for corpus in ("domain", "heldout"):
        for kind in ("correct", "wrong"):
            for path in sorted((CORPUS / corpus / kind).glob("*.py")):
                sources[f"{corpus}_{kind}__{path.stem}"] = path.read_text()
    for name, text in sources.items():
        (folder / f"{name}.py").write_text(text)


def grade(seed: int, room: Path, out: Path) -> dict[str, Any]:
    """Grade the class with one seed: {student: {check: [status, score]}}, and the details."""
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(out), "--seed", str(seed), "--quiet",
               "--audience", "instructor"]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(f"seed {seed}: {time.perf_counter() - started:.1f} s, exit {done.returncode}", file=sys.stderr)
    if done.returncode not in (0, 1):
        raise SystemExit(done.stderr[-2000:])
    grades: dict[str, Any] = {}
    details: dict[str, Any] = {}
    for report in sorted(out.glob("*/report.json")):
        document = json.loads(report.read_text())
        student = report.parent.name
        checks = [c for t in document["tiers"] for c in t["checks"]]
        grades[student] = {c["id"]: [c["status"], c["score"]] for c in checks}
        details[student] = {c["id"]: {k: c.get(k) for k in ("message", "hint", "worst_ratio", "counterexample")} for c in checks}
    return {"grades": grades, "details": details}


def diff(before_path: Path, after_path: Path) -> int:
    """Print every difference; exit 1 if a status or a score differs."""
    before, after = json.loads(before_path.read_text()), json.loads(after_path.read_text())
    graded, worded = 0, 0
    for seed in sorted(set(before) | set(after)):
        b, a = before.get(seed, {}), after.get(seed, {})
        students = sorted(set(b.get("grades", {})) | set(a.get("grades", {})))
        for student in students:
            gb, ga = b["grades"].get(student), a["grades"].get(student)
            if gb != ga:
                graded += 1
                print(f"GRADE seed {seed} {student}: {gb} -> {ga}")
            db, da = b["details"].get(student), a["details"].get(student)
            if db != da and db is not None and da is not None:
                for check in sorted(set(db) | set(da)):
                    if db.get(check) != da.get(check):
                        worded += 1
                        print(f"detail seed {seed} {student} {check}:\n  before {db.get(check)}\n  after  {da.get(check)}")
        print(f"seed {seed}: {len(students)} submissions, "
              f"{sum(len(g) for g in b.get('grades', {}).values())} checks compared")  # fmt: skip
    print(f"{graded} submissions with a different status or score; {worded} checks with different details")
    return 1 if graded else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--diff"]:
        return diff(Path(argv[1]), Path(argv[2]))
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="diffgrade-grades-") as scratch:
        room = Path(scratch) / "class"
        room.mkdir()
        write_class(room)
        for seed in SEEDS:
            result[str(seed)] = grade(seed, room, Path(scratch) / f"out_{seed}")
    Path(argv[0]).write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"{sum(len(r['grades']) for r in result.values())} reports written to {argv[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
