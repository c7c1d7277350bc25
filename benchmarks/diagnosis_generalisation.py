"""Measure how the diagnosis generalises, on a corpus written without seeing it.

tests/corpus/diagnosis holds wrong differential-attention files, each labelled
with the function whose code holds the bug, its component (a fixed vocabulary:
mask, scale, softmax, lambda, backward, ...), the bug in one sentence, and a
few words any right explanation would contain; and correct files. This script
grades them all with ``diffgrade batch`` (instructor reports, one seed) and,
for each wrong file, reads the first root cause of its report:

* *localises*: the root cause names the labelled function and component;
* *names*: its text contains one of the label's words;
* *wrong*: it names another function or component.

A report without a ``diagnosis`` section (diffgrade before issue 13) is read
the old way: its first hint in report order, whose misconception id is mapped
to a function and components by :data:`HINT_PLACES` below (the only
knowledge of the diagnosis this script has). Correct files must get no root
cause and no hint.

Run from the repository root:
``python benchmarks/diagnosis_generalisation.py [--seed N] [--grader-root DIR]``;
``--grader-root`` grades with another checkout's diffgrade (the "before"
figure comes from the commit before the diagnosis changed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT / "tests" / "corpus"
LAMBDA, ATTENTION = "differential_lambda", "differential_attention"
# Old hint id -> (function, the label components it stands for); None: the function of the check it is on.
HINT_PLACES: dict[str, tuple[str | None, set[str]]] = {
    "float32_inside": (None, {"dtype"}),
    "lambda_sign_swapped": (LAMBDA, {"lambda", "sign"}),
    **{name: (LAMBDA, {"lambda"}) for name in (
        "lambda_default_changed", "lambda_no_init", "lambda_no_exp", "lambda_terms_added",
        "lambda_clamped", "lambda_elementwise", "lambda_sum_of_exponentials", "lambda_sum_not_dot")},
    **{name: (ATTENTION, {"mask"}) for name in (
        "causal_default_false", "mask_first_branch_only", "mask_second_branch_only", "no_mask", "mask_after_softmax",
        "mask_hides_diagonal", "mask_wrong_triangle")},
    "softmax_over_queries": (ATTENTION, {"softmax"}),
    "scale_inverse_d": (ATTENTION, {"scale"}),
    "scale_value_width": (ATTENTION, {"scale"}),
    "no_scale": (ATTENTION, {"scale"}),
    "softmax_overflow": (ATTENTION, {"stability"}),
    "logit_difference": (ATTENTION, {"branch"}),
    "joint_normaliser": (ATTENTION, {"branch", "softmax"}),
    "lambda_times_difference": (ATTENTION, {"coefficient"}),
    "lambda_on_first_branch": (ATTENTION, {"coefficient"}),
    "branches_swapped": (ATTENTION, {"branch", "sign"}),
    "value_half_width": (ATTENTION, {"value"}),
    "value_split_per_branch": (ATTENTION, {"value"}),
    "one_minus_lambda_init": (ATTENTION, {"coefficient"}),
    "normalised_output": (ATTENTION, {"softmax"}),
    "value_detached": (ATTENTION, {"graph"}),
    "coefficient_detached": (ATTENTION, {"graph", "coefficient"}),
    "first_branch_detached": (ATTENTION, {"graph"}),
    "second_branch_detached": (ATTENTION, {"graph"}),
    "output_detached": (ATTENTION, {"graph"}),
    "coefficient_gradient_sign": (ATTENTION, {"backward"}),
    "backward_missing_scale": (ATTENTION, {"backward"}),
    "backward_no_rowsum": (ATTENTION, {"backward"}),
}


def grade_corpus(corpus: Path, seed: int, grader_root: Path, out: Path) -> dict[str, dict[str, Any]]:
    """Grade every corpus file in one batch; return each one's instructor report by its label key."""
    folder = out / "class"
    folder.mkdir()
    for kind in ("wrong", "correct"):
        for path in sorted((corpus / kind).glob("*.py")):
            (folder / f"{kind}__{path.stem}.py").write_text(path.read_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(grader_root), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out / "reports"), "--seed", str(seed),
               "--no-preview", "--quiet", "--exercise", "diff_attention"]  # fmt: skip
    done = subprocess.run(command, cwd=grader_root, env=env, capture_output=True, text=True)
    if done.returncode == 2 and "--exercise" in done.stderr:  # an older diffgrade has no --exercise
        command = command[:-2]
        done = subprocess.run(command, cwd=grader_root, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"diffgrade batch exited {done.returncode}: {done.stderr[-800:]}")
    reports = {}
    for report in (out / "reports").glob("*/report.json"):
        kind, _, stem = report.parent.name.partition("__")
        reports[f"{kind}/{stem}"] = json.loads(report.read_text())
    return reports


def first_cause(report: dict[str, Any]) -> dict[str, Any] | None:
    """The report's first root cause as {function, components, text}: its diagnosis section, else its first hint."""
    diagnosis = report.get("diagnosis")
    if isinstance(diagnosis, dict):
        causes = diagnosis.get("root_causes") or []
        if not causes:
            return None
        cause = causes[0]
        text = " ".join(str(cause.get(k) or "") for k in ("title", "evidence", "advice"))
        return {"function": cause.get("function"), "components": {cause.get("component")}, "text": text}
    for tier in report["tiers"]:
        for check in tier["checks"]:
            hint = check.get("hint")
            if hint:
                function, components = HINT_PLACES.get(hint["id"], ("(unknown hint)", set()))
                function = function or (LAMBDA if check["id"].startswith("lambda_") else ATTENTION)
                text = " ".join(str(hint.get(k) or "") for k in ("text", "maths", "id"))
                return {"function": function, "components": components, "text": text}
    return None


def main() -> None:
    """Grade the corpus and print, per wrong file, its label and first root cause, then the three rates."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--grader-root", type=Path, default=ROOT, help="the checkout whose diffgrade grades")
    labelled = sorted(p.parent.name for p in CORPORA.glob("diagnosis*/labels.json"))
    parser.add_argument("--corpus", choices=labelled, default="diagnosis",
                        help="the folder of tests/corpus to grade (every one but diagnosis was written after the diagnosis was)")
    args = parser.parse_args()
    corpus = CORPORA / args.corpus
    labels = json.loads((corpus / "labels.json").read_text())
    with tempfile.TemporaryDirectory() as folder:
        reports = grade_corpus(corpus, args.seed, args.grader_root.resolve(), Path(folder))
    wrong = sorted(k for k, v in labels.items() if not v["correct"])
    localised, named, mistaken, silent = [], [], [], []
    print(f"{'submission':<40} {'label':<34} first root cause")
    for key in wrong:
        if key not in reports:
            raise SystemExit(f"{key}: no report was written (see the batch's grades.csv)")
        label, cause = labels[key], first_cause(reports[key])
        where = f"{label['function'].removeprefix('differential_')}/{label['component']}"
        if cause is None:
            silent.append(key)
            print(f"{key:<40} {where:<34} -")
            continue
        place_ok = cause["function"] == label["function"] and label["component"] in cause["components"]
        words_ok = any(word.lower() in cause["text"].lower() for word in label["names"])
        (localised if place_ok else mistaken).append(key)
        if words_ok and place_ok:
            named.append(key)
        found = f"{str(cause['function']).removeprefix('differential_')}/{','.join(sorted(map(str, cause['components'])))}"
        print(f"{key:<40} {where:<34} {found:<30} {'localised' if place_ok else 'WRONG PLACE'}{' named' if words_ok and place_ok else ''}")
    correct = sorted(k for k, v in labels.items() if v["correct"])
    hinted = [k for k in correct if first_cause(reports[k]) is not None]
    n = len(wrong)
    print(f"\ncorpus {args.corpus}, seed {args.seed}, grader {args.grader_root}: {n} wrong, {len(correct)} correct")
    print(f"first root cause localises the bug: {len(localised)}/{n} ({100 * len(localised) / n:.0f}%)")
    print(f"first root cause names the bug:     {len(named)}/{n} ({100 * len(named) / n:.0f}%)")
    print(f"first root cause is wrong:          {len(mistaken)}/{n}" + (f" ({', '.join(mistaken)})" if mistaken else ""))
    print(f"no root cause at all:               {len(silent)}/{n}")
    print(f"correct files with a root cause or hint: {len(hinted)}/{len(correct)}" + (f" ({', '.join(hinted)})" if hinted else ""))


if __name__ == "__main__":
    main()
