"""Shared helpers: grade a file with the real CLI (in a fresh process, or in a warm one that grades file after file), read its report."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The test exercise's checks are graded checks (they need a grading run's fixture), and the corpora are student
# files (some named like tests, *_test.py): neither is a test of this suite.
collect_ignore = ["exercises", "corpus"]
REFERENCE = ROOT / "reference" / "diff_attention.py"
STUB = ROOT / "exercise" / "diff_attention.py"


@dataclass
class Graded:
    """One CLI run: exit code, streams, and the JSON report (None if none was written)."""

    code: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None
    html: str | None

    def check(self, check_id: str) -> dict[str, Any]:
        """The report's entry for one check."""
        assert self.report is not None
        return next(c for t in self.report["tiers"] for c in t["checks"] if c["id"] == check_id)

    def tier(self, name: str) -> dict[str, Any]:
        """The report's entry for one tier."""
        assert self.report is not None
        return next(t for t in self.report["tiers"] if t["name"] == name)


def cli_command(args: list[str], reports: Path) -> tuple[list[str], Path, Path]:
    """The arguments of a ``diffgrade`` run of ``args`` for a test, and where its JSON and HTML reports go."""
    command = list(args)
    if "--audience" not in args:
        command += ["--audience", "instructor"]  # the tests read every check's message
    if "--json" in args:
        return command, Path(args[args.index("--json") + 1]), Path(args[args.index("--html") + 1])
    json_path, html_path = reports / "report.json", reports / "report.html"
    return [*command, "--json", str(json_path), "--html", str(html_path)], json_path, html_path


def graded_run(code: int, stdout: str, stderr: str, json_path: Path, html_path: Path) -> Graded:
    """A finished run, with the reports it wrote."""
    report = json.loads(json_path.read_text()) if json_path.exists() else None
    html = html_path.read_text() if html_path.exists() else None
    return Graded(code, stdout, stderr, report, html)


def run_cli(args: list[str], workdir: Path, reports: Path | None = None, timeout: float = 300) -> Graded:
    """Run ``python -m grader ARGS`` in a fresh process in ``workdir``, reports written to ``reports`` (default: workdir)."""
    command, json_path, html_path = cli_command(args, reports or workdir)
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "grader", *command], cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)
    return graded_run(done.returncode, done.stdout, done.stderr, json_path, html_path)


class WarmGraders:
    """Up to two processes of tests/grading_server.py (the machine has two cores), each taken by one run at a time."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self.idle: queue.Queue[subprocess.Popen[str]] = queue.Queue()
        self.lock = threading.Lock()
        self.processes: list[subprocess.Popen[str]] = []  # the servers alive, idle or busy

    def take(self) -> subprocess.Popen[str]:
        """An idle server, started when none is idle and fewer than ``size`` are alive."""
        with self.lock:
            if self.idle.empty() and len(self.processes) < self.size:
                process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "grading_server.py")], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())  # fmt: skip
                self.processes.append(process)
                return process
        return self.idle.get()

    def retire(self, process: subprocess.Popen[str]) -> None:
        """Kill a server that failed a request; the next request starts another."""
        process.kill()
        process.wait()
        with self.lock:
            self.processes.remove(process)

    def run(self, command: list[str], workdir: Path, timeout: float) -> dict[str, Any]:
        """The reply to one request; a server that does not answer within ``timeout``, or ends, is retired."""
        process = self.take()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps({"argv": command, "cwd": str(workdir)}) + "\n")
        process.stdin.flush()
        line = process.stdout.readline() if select.select([process.stdout], [], [], timeout)[0] else None
        if not line:
            self.retire(process)
            if line is None:
                raise subprocess.TimeoutExpired(command, timeout)
            raise RuntimeError(f"the grading server ended with code {process.returncode}")
        self.idle.put(process)
        return dict(json.loads(line))

    def close(self) -> None:
        """Let every server finish (end of input) and wait for it."""
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


WARM = WarmGraders()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the warm graders."""
    WARM.close()


def run_warm(args: list[str], workdir: Path, timeout: float = 300) -> Graded:
    """Run ``diffgrade ARGS`` in ``workdir`` in a warm grading process (tests/grading_server.py), as :func:`run_cli` would.

    For tests that read a file's report: the run is the one a fresh process makes, without its torch import.
    """
    command, json_path, html_path = cli_command(args, workdir)
    reply = WARM.run(command, workdir, timeout)
    return graded_run(reply["code"], reply["stdout"], reply["stderr"], json_path, html_path)


def first_root_cause(corpus_file: str, workdir: Path, tiers: str = "T2", *args: str) -> dict[str, Any]:
    """The first root cause of tests/corpus/``corpus_file`` graded on seed 20261201 with ``tiers`` alone (``args``: more options)."""
    path = ROOT / "tests" / "corpus" / corpus_file
    return run_warm([str(path), *args, "--seed", "20261201", "--no-preview", "--tiers", tiers], workdir).report["diagnosis"]["root_causes"][0]


def grade(path: Path, workdir: Path, seed: int = 1234, *extra: str) -> Graded:
    """Grade ``path`` with ``seed`` (no preview curve unless asked for, to save time)."""
    workdir.mkdir(parents=True, exist_ok=True)
    options = list(extra) if "--reference" in extra else ["--no-preview", *extra]
    return run_warm([str(path), "--seed", str(seed), *options], workdir)


def grade_many(jobs: dict[str, tuple[Path, int]], workdir: Path) -> dict[str, Graded]:
    """Grade several files, two at a time (the machine has two cores)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(grade, path, workdir / name, seed) for name, (path, seed) in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def grade_class(files: dict[str, Path], seed: int, workdir: Path, *extra: str) -> dict[str, Graded]:
    """Grade several files as one class with ``diffgrade batch`` (no preview): each file's reports, by name.

    Much faster than :func:`grade_many` (one fork server and one torch import for all); a batch
    report is the report a single run writes (tests/test_batch.py). ``code`` is the exit code a
    single run would give it: 0 when every check passed, else 1.
    """
    room, out = workdir / "class", workdir / "out"
    room.mkdir(parents=True)
    for name, path in files.items():
        (room / f"{name}.py").write_bytes(path.read_bytes())
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(out), "--seed", str(seed), "--no-preview", "--quiet", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode in (0, 1), done.stderr[-2000:]
    graded = {}
    for name in files:
        report = json.loads((out / name / "report.json").read_text())
        code = 0 if report["status"] == "passed" else 1
        graded[name] = Graded(code, "", done.stderr, report, (out / name / "report.html").read_text())
    return graded


@pytest.fixture(scope="session")
def reference_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Graded]:
    """The reference graded on three seeds, once with the preview curve."""
    workdir = tmp_path_factory.mktemp("reference")
    runs = grade_many({f"seed{s}": (REFERENCE, s) for s in (11, 22)}, workdir)
    graded = {int(name[4:]): run for name, run in runs.items()}
    graded[33] = grade(REFERENCE, workdir / "seed33", 33, "--reference", str(REFERENCE))
    return graded


@pytest.fixture(scope="session")
def stub_run(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    """The untouched stub, graded by running diffgrade with no argument from the repository root."""
    workdir = tmp_path_factory.mktemp("stub")
    return run_cli(["--seed", "5"], ROOT, reports=workdir)


ATTENTION_PARAMETERS = ("q1", "k1", "q2", "k2", "value", "coefficient", "causal")


def attention_arguments(call: dict[str, Any], tensors: list[Any]) -> tuple[list[Any], float, bool]:
    """A wire-format differential_attention call bound as Python would bind it: (q1..value, coefficient, causal)."""
    bound = dict(zip(ATTENTION_PARAMETERS, call["args"])) | call["kwargs"]
    value = lambda a: tensors[a["tensor"]] if "tensor" in a else a["value"]  # noqa: E731
    coefficient = value(bound["coefficient"])
    causal = value(bound["causal"]) if "causal" in bound else True
    return [value(bound[n]) for n in ATTENTION_PARAMETERS[:5]], float(coefficient), causal


def load_module(path: Path, name: str | None = None) -> types.ModuleType:
    """The Python file ``path`` imported as a module of its own (``name``: its module name, the file's stem by default)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imported_modules(path: Path) -> set[str]:
    """The full names of the modules that the import statements of the Python file ``path`` name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return found | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
