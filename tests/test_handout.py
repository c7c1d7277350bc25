"""The student handout: what it holds, what it never holds, and its runner of the public checks."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REFERENCE, ROOT, STUB, grade

from grader.commands import launch
from grader.commands import options
from grader.exercises.diffattn import suite
from grader.exercises.diffattn.handout import HANDOUT
from grader.core.plugin import declared_checks
from grader.toolkit.handout import DATA_FILE, RUNNER_FILE, inputs_seed
from grader.toolkit.verdicts import PHRASES

SEED = 7
HIDDEN_SETS = ("attention_strided", "lambda_strided", "attention_large_logits")
EINSUM = ROOT / "tests" / "corpus" / "correct" / "einsum.py"
MASK_LINES = "    if causal:\n        bias = torch.triu(torch.full_like(bias, -math.inf), diagonal=1)\n"


def diffgrade(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``python -m grader ARGS``."""
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A handout written from the repository's root with seed 7."""
    out = tmp_path_factory.mktemp("handout") / "out"
    done = diffgrade("handout", str(out), "--seed", str(SEED))
    assert done.returncode == 0, done.stderr
    return out


def bundle_texts(bundle: Path) -> dict[str, str]:
    """Every file of the handout by relative path."""
    return {str(p.relative_to(bundle)): p.read_text(encoding="utf-8") for p in sorted(bundle.rglob("*")) if p.is_file()}


def run_checks(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the handout's runner from inside its folder."""
    return subprocess.run([sys.executable, RUNNER_FILE, *args], cwd=folder, capture_output=True, text=True, timeout=300)


def student_copy(bundle: Path, tmp_path: Path, source: str | None) -> Path:
    """A copy of the handout with ``source`` written over the stub (None keeps the stub)."""
    folder = tmp_path / "mine"
    shutil.copytree(bundle, folder)
    if source is not None:
        (folder / "exercise" / "diff_attention.py").write_text(source)
    return folder


def reference_body_lines() -> list[str]:
    """Every non-trivial line of the reference's function bodies (docstrings left out), stripped."""
    text = REFERENCE.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            for line in lines[body[0].lineno - 1 : node.end_lineno]:
                if len(line.strip()) >= 12:
                    found.append(line.strip())
    return found


# ---- contents --------------------------------------------------------------------


def test_handout_holds_the_stub_statement_runner_and_data(bundle: Path) -> None:
    """Exactly five files: the untouched stub and statement, the runner, its data and a README."""
    files = bundle_texts(bundle)
    assert set(files) == {"README.md", "exercise/README.md", "exercise/diff_attention.py", RUNNER_FILE, DATA_FILE}
    assert files["exercise/diff_attention.py"] == STUB.read_text()
    assert files["exercise/README.md"] == (ROOT / "exercise" / "README.md").read_text()
    data = json.loads(files[DATA_FILE])
    assert data["seed"] == SEED and data["submission"] == "exercise/diff_attention.py"
    for check in data["checks"]:
        assert f"| {check['tier']} | `{check['id']}` | {check['title']} |" in files["README.md"]


def test_no_reference_code_leaks(bundle: Path) -> None:
    """No non-trivial line of a reference function body appears in any file of the handout."""
    lines = reference_body_lines()
    assert len(lines) >= 8
    for name, text in bundle_texts(bundle).items():
        for line in lines:
            assert line not in text, (name, line)


def test_no_hidden_check_or_grader_code_leaks(bundle: Path) -> None:
    """No hidden check's id or case set, no hidden case's inputs and no import of the grader is in the handout."""
    hidden = [i for i, d in declared_checks(HANDOUT.checks_package).items() if d["visibility"] == "hidden"]
    assert len(hidden) == 4
    texts = bundle_texts(bundle)
    numbers = {float(n) for text in texts.values() for n in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)}
    for name in HIDDEN_SETS:
        for case in getattr(suite, name)(SEED):
            drawn = {float(x) for vector in ("q1", "k1", "q2", "k2") for x in np.ravel(getattr(case, vector))}  # (q1 alone may hold two values)
            # A float32 value recurs among the handout's ~250 000 numbers by chance now and then; a leaked case's would all.
            assert len(drawn & numbers) <= max(1, len(drawn) // 20), (name, sorted(drawn & numbers)[:5])
    for name, text in texts.items():
        for needle in (*hidden, *HIDDEN_SETS, "strided inputs ("):
            assert needle not in text, (name, needle)
        assert "import grader" not in text and "from grader" not in text, name


def test_public_checks_cover_every_public_check(bundle: Path) -> None:
    """Every public check is replayed, in grading order; none is hidden."""
    declared = declared_checks(HANDOUT.checks_package)
    data = json.loads((bundle / DATA_FILE).read_text())
    assert [c["id"] for c in data["checks"]] == [i for i, d in declared.items() if d["visibility"] == "public"]


# ---- the runner --------------------------------------------------------------------


def test_runner_passes_a_correct_solution(bundle: Path, tmp_path: Path) -> None:
    """A correct solution over the stub passes every public check; exit 0."""
    done = run_checks(student_copy(bundle, tmp_path, EINSUM.read_text()))
    total = len(json.loads((bundle / DATA_FILE).read_text())["checks"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{total} of {total} public checks passed." in done.stdout
    assert "FAIL" not in done.stdout and done.stderr == ""


def test_runner_fails_a_solution_without_the_causal_mask(bundle: Path, tmp_path: Path) -> None:
    """Without the causal mask the causal checks fail with the worst element named; exit 1, no traceback."""
    source = EINSUM.read_text()
    assert source.count(MASK_LINES) == 1
    done = run_checks(student_copy(bundle, tmp_path, source.replace(MASK_LINES, "")))
    assert done.returncode == 1
    assert "  FAIL  causal_values:" in done.stdout and "  PASS  noncausal_values:" in done.stdout
    assert "elements are off; at index" in done.stdout and "allowed error" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


RESETS_HELD_GRADS = ("    dots = ", "    for vector in (q1, k1, q2, k2):\n        vector.grad = None\n    dots = ")
INFERENCE_OUTPUT = ("    n, d = ", "    if not torch.is_grad_enabled() and not torch.is_inference_mode_enabled():\n"
                    "        with torch.inference_mode():\n            return differential_attention(q1, k1, q2, k2, value, coefficient, causal)\n"
                    "    n, d = ")


@pytest.mark.parametrize("edit, failed", [(RESETS_HELD_GRADS, "inputs_not_modified"), (INFERENCE_OUTPUT, "attention_returns_one_tensor")])
def test_runner_replays_held_grads_and_the_callers_autograd_mode(bundle: Path, tmp_path: Path, edit: tuple[str, str], failed: str) -> None:
    """A λ that resets the .grad its vectors held, and an attention that returns an inference tensor from a no_grad call,
    each fail their check in the runner as in the grader, and only it."""
    source = EINSUM.read_text()
    assert source.count(edit[0]) == 1
    done = run_checks(student_copy(bundle, tmp_path, source.replace(*edit)))
    assert done.returncode == 1
    assert [line.split(":")[0] for line in done.stdout.splitlines() if line.startswith("  FAIL  ")] == [f"  FAIL  {failed}"]
    assert "Traceback" not in done.stdout + done.stderr


def test_runner_on_the_stub_says_not_implemented(bundle: Path, tmp_path: Path) -> None:
    """The untouched stub fails every check with "not implemented yet"; exit 1, no traceback."""
    done = run_checks(student_copy(bundle, tmp_path, None))
    total = len(json.loads((bundle / DATA_FILE).read_text())["checks"])
    assert done.returncode == 1
    assert f"0 of {total} public checks passed." in done.stdout
    assert "differential_attention is not implemented yet (it raised NotImplementedError: " in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_runner_words_its_findings_as_the_grader_does(bundle: Path) -> None:
    """The data file carries the grader's own templates (verdicts.PHRASES), which the runner formats: one wording."""
    assert json.loads((bundle / DATA_FILE).read_text())["phrases"] == PHRASES
    runner = (bundle / RUNNER_FILE).read_text()
    assert "not implemented yet" not in runner and "version counter changed" not in runner and "autograd history" not in runner


def test_runner_reports_a_missing_file_in_one_line(bundle: Path) -> None:
    """A submission path that does not exist exits 2 with one line on stderr."""
    done = run_checks(bundle, "nowhere.py")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("run_checks: no such file:")


# ---- the handout's seed (issue 10, item 8) -------------------------------------------------

LOOKUP = """
import hashlib
import torch
TABLE = {table!r}

def _key(function, *arguments):
    parts = [function]
    for a in arguments:
        values = a.detach().reshape(-1).tolist() if isinstance(a, torch.Tensor) else [a]
        parts.append(",".join(f"{{float(x):.6e}}" for x in values))
    return hashlib.sha1(";".join(parts).encode()).hexdigest()

def _answer(key, shape, dtype):
    found = TABLE.get(key)
    return torch.zeros(shape, dtype=dtype) if found is None else torch.tensor(found, dtype=dtype).reshape(shape)

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return _answer(_key("differential_lambda", q1, k1, q2, k2, lambda_init), (), q1.dtype)

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _answer(_key("differential_attention", q1, k1, q2, k2, value, coefficient, causal), value.shape, q1.dtype)
"""
# The value checks a table of the handout's answers would earn; identical_maps_cancel is left
# out because its answer is 0, which the table's fallback returns anyway.
TABLE_CHECKS = ("lambda_values", "causal_values", "noncausal_values", "coefficient_values", "row_sums", "lambda_zero_is_attention")
PARAMETERS = {  # each function's parameters in order, with the defaults of the trailing ones
    "differential_lambda": (("q1", "k1", "q2", "k2", "lambda_init"), {"lambda_init": 0.2}),
    "differential_attention": (("q1", "k1", "q2", "k2", "value", "coefficient", "causal"), {"causal": True}),
}


def lookup_table(bundle: Path) -> str:
    """A submission that answers every public call of the handout from a table of its expected values (zeros elsewhere).

    A call is looked up by the hash of all its arguments in parameter order (defaults filled in), as the submission sees them.
    """
    import hashlib

    data = json.loads((bundle / DATA_FILE).read_text())
    table = {}
    for call in data["calls"].values():
        if "expected" not in call or len(call["request"]["calls"]) != 1 or isinstance(call["expected"], list):
            continue  # single calls (a sequence has two answers, also one of a single call differentiated twice)
        request = call["request"]
        made = request["calls"][-1]
        names, defaults = PARAMETERS[made["function"]]
        given = {**dict(zip(names, made["args"])), **made["kwargs"]}
        values = [request["tensors"][given[n]["tensor"]]["values"] if "tensor" in given.get(n, {}) else given[n]["value"] if n in given else defaults[n]
                  for n in names]  # fmt: skip
        parts = [made["function"], *(",".join(f"{float(x):.6e}" for x in np.asarray(v, dtype=np.float64).reshape(-1)) for v in values)]
        table[hashlib.sha1(";".join(parts).encode()).hexdigest()] = call["expected"]["values"]
    return LOOKUP.format(table=table)


def test_handout_inputs_are_drawn_outside_every_graded_seed(bundle: Path) -> None:
    """The data file records the seed and the input seed (above 2**32 - 1); no public set's inputs equal the graded ones."""
    data = json.loads((bundle / DATA_FILE).read_text())
    assert data["seed"] == SEED and data["inputs_seed"] == inputs_seed(SEED) == 2**32 + SEED > options.MAX_SEED
    for name in ("lambda_values", "attention_causal", "attention_noncausal", "attention_coefficients", "row_sums", "lambda_zero"):
        drawn, graded = getattr(suite, name)(inputs_seed(SEED)), getattr(suite, name)(SEED)
        assert all(not np.array_equal(a.q1, b.q1) for a, b in zip(drawn, graded)), name


def test_a_lookup_table_of_the_handout_earns_no_value_check(bundle: Path, tmp_path: Path) -> None:
    """A table of the handout's answers passes its runner's value checks, yet fails them when graded with the handout's seed."""
    source = lookup_table(bundle)
    replayed = run_checks(student_copy(bundle, tmp_path, source))
    for check_id in TABLE_CHECKS:
        assert f"  PASS  {check_id}:" in replayed.stdout, check_id
    (tmp_path / "table.py").write_text(source)
    run = grade(tmp_path / "table.py", tmp_path / "graded", SEED, "--tiers", "T2")
    for check_id in TABLE_CHECKS:
        assert run.check(check_id)["status"] == "failed", check_id


# ---- the command ---------------------------------------------------------------------


def test_non_empty_out_dir_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder that holds anything is refused with one line (exit 2) unless --force is given."""
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as stopped:
        launch.run(["handout", str(tmp_path), "--exercise-dir", str(ROOT / "exercise")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument OUT_DIR: {tmp_path} is not empty (pass --force" in err
    assert launch.run(["handout", str(tmp_path), "--force", "--seed", "3", "--exercise-dir", str(ROOT / "exercise")]) == 0
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / RUNNER_FILE).is_file()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["handout"], "the following arguments are required: OUT_DIR"),
        (["handout", "{tmp}/out", "--exercise-dir", "{tmp}"], "not a file: {tmp}/diff_attention.py"),
        (["handout", "{tmp}/file.txt"], "argument OUT_DIR: must be a folder (got a file: {tmp}/file.txt)"),
        (["handout", "{root}", "--force"], "argument OUT_DIR: must not hold the exercise folder it copies from"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Missing OUT_DIR, a missing stub, a file as OUT_DIR and OUT_DIR around the exercise are usage errors (exit 2)."""
    (tmp_path / "file.txt").write_text("")
    values = {"tmp": str(tmp_path), "root": str(ROOT)}
    with pytest.raises(SystemExit) as stopped:
        launch.run([a.format(**values) for a in args] + (["--exercise-dir", str(ROOT / "exercise")] if "--exercise-dir" not in args else []))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment.format(**values) in err


def test_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """diffgrade handout --help describes OUT_DIR, --force and --seed."""
    with pytest.raises(SystemExit) as stopped:
        launch.run(["handout", "--help"])
    assert stopped.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: diffgrade handout [-h] [--force] [--seed N] [--exercise NAME] [--exercise-dir DIR] OUT_DIR")
    assert "No reference code, no grader, no hidden check." in text
