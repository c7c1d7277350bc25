"""One grading run: read the submission, start its worker, run the checks, collect.

The run happens in this process, which never imports the submission or torch:
the submission runs in a worker (:mod:`grader.worker.client`), the checks run
in a pytest session with pytest-json-report (:mod:`grader.core.checksession`), and
:func:`grade` returns the plain facts that :mod:`grader.core.scoring` and
:mod:`grader.reports.report` turn into a report.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import importlib
import io
import platform
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grader import CHECKOUT_DIR, PACKAGE_DIR, __version__
from grader.core import notebook
from grader.core.checksession import CheckSessionError, RunChecks, run_session
from grader.core.diagnosis import Diagnosis, diagnose
from grader.core.exercise import Exercise, ExperimentUnavailable
from grader.core.experiment import ExperimentError, Measured, section
from grader.core.plugin import GradingContext
from grader.core.scoring import check_record
from grader.worker.client import (
    ForkServer,
    Worker,
    WorkerFailure,
    WorkerLimits,
    WorkerStartFailure,
)

MAX_SUBMISSION_BYTES = 1024 * 1024


class UsageError(Exception):
    """The user asked for something that cannot be graded (exit code 2)."""


class InternalError(Exception):
    """The grader itself failed (exit code 3)."""


@dataclass(frozen=True)
class RunOptions:
    """What to grade and how."""

    submission: Path
    seed: int
    tiers: tuple[str, ...]
    reference: Path | None = None
    no_reference_reason: str = "no reference implementation was given, so there is no preview curve"
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    isolate: bool = True
    hide: tuple[Path, ...] = ()  # more for the worker not to read (a batch: the class and its reports)


@dataclass
class Submission:
    """The submitted file as read by the grader, or why it cannot be loaded."""

    path: Path
    source: str | None
    sha256: str | None
    size: int | None
    problem: str | None
    notes: tuple[str, ...] = ()  # how the source was obtained (a notebook's cells), for the report


@dataclass
class Run:
    """Everything a grading run found, before scoring."""

    options: RunOptions
    submission: Submission
    checks: list[dict[str, Any]]
    load_failure: str | None
    experiment: dict[str, Any] | None
    worker: dict[str, Any]
    environment: dict[str, Any]
    started_at: str
    duration_s: float
    diagnosis: Diagnosis  # the root causes (grader/core/diagnosis.py)


def read_submission(path: Path) -> Submission:
    """Read a submission as Python reads source (UTF-8, a BOM or a coding cookie); say why when it cannot be.

    A ``.ipynb`` file is a notebook: its code cells become the source (see grader.core.notebook).
    """
    if not path.exists():
        raise UsageError(f"submission not found: {path}")
    if path.is_dir():
        raise UsageError(f"submission must be a .py or .ipynb file, got a directory: {path}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read submission {path}: {exc.strerror}") from None
    digest = hashlib.sha256(data).hexdigest()
    if path.suffix.lower() == notebook.SUFFIX:
        try:
            converted = notebook.convert(data, MAX_SUBMISSION_BYTES)
        except notebook.NotebookError as exc:
            return Submission(path, None, digest, len(data), str(exc))
        return Submission(path, converted.source, digest, len(data), None, converted.notes)
    problem = None
    if len(data) > MAX_SUBMISSION_BYTES:
        problem = f"the file is {len(data)} bytes, over the limit of {MAX_SUBMISSION_BYTES} bytes for a submission"
    elif not data.strip():
        problem = "the file is empty: write both functions in it"
    text = None
    try:
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:
            if "unknown encoding" in exc.msg:
                raise
            encoding = "utf-8"  # undecodable first lines: decoding says where
        text = data.decode(encoding)
    except SyntaxError as exc:
        problem = problem or f"the file declares an encoding Python does not know ({exc.msg}); save it as UTF-8"
    except UnicodeDecodeError as exc:
        name = "UTF-8" if exc.encoding.startswith("utf-8") else exc.encoding
        problem = problem or f"the file is not valid {name} text (byte {exc.start} cannot be decoded); save it as UTF-8"
    except (UnicodeError, LookupError) as exc:  # a cookie naming a codec that is not a text encoding
        problem = problem or f"the file's encoding declaration cannot be used ({exc}); save it as UTF-8"
    return Submission(path, text, digest, len(data), problem)


def describe_load_error(error: dict[str, Any]) -> str:
    """A student-facing sentence for an exception raised while importing the submission."""
    if error.get("type") in ("SyntaxError", "IndentationError", "TabError"):
        line, column, text = error.get("line"), error.get("column"), str(error.get("text") or "")
        column = column if isinstance(column, int) and 0 < column < 10_000 else 1
        caret = " " * (4 + column - 1) + "^" if text else ""
        return f"{error['type']} at line {line}, column {column}: {error.get('message', '')}\n    {text}\n{caret}".rstrip()
    trace = str(error.get("traceback", "")).rstrip()
    return f"importing the submission raised {error.get('type')}: {error.get('message')}" + (f"\n{trace}" if trace else "")


def hidden_paths(exercise: Exercise, reference: Path | None, extra: tuple[Path, ...] = ()) -> tuple[str, ...]:
    """What the submission's worker must not read: every copy of the reference we know of, and ``extra``.

    That is the one given, the default one under the current folder and the one
    beside the grader's own source checkout; each file is hidden, and its folder
    too when that holds none of what the worker still needs (the interpreter and
    its packages, the grader, the temporary folders, the current folder). A
    folder in ``extra`` is hidden under the same condition, else every file in it.
    """
    default = Path(exercise.default_reference)
    candidates = {p.resolve() for p in (reference, default, CHECKOUT_DIR / default) if p is not None and p.is_file()}
    needed = [Path(sys.prefix), Path(sys.base_prefix), PACKAGE_DIR / "worker", Path(tempfile.gettempdir()), Path.cwd()]

    def holds_needed(folder: Path) -> bool:
        return any(p.resolve().is_relative_to(folder) for p in needed)

    hidden: list[str] = []
    for file in sorted(candidates):
        hidden.append(str(file))
        if not holds_needed(file.parent):
            hidden.append(str(file.parent))
    for path in (p.resolve() for p in extra if p.exists()):
        if path.is_dir() and holds_needed(path):
            hidden += [str(f) for f in sorted(path.rglob("*")) if f.is_file() and not f.is_symlink()]
        else:
            hidden.append(str(path))
    # The grader itself (its oracle computes every answer) and, in a source
    # checkout, the tests' correct solutions and the git history.
    hidden += [str(PACKAGE_DIR), *(str(CHECKOUT_DIR / name) for name in (".git", "tests") if (CHECKOUT_DIR / name).exists())]
    return tuple(hidden)


def _start(exercise: Exercise, source: str, filename: str, options: RunOptions, forks: ForkServer, hide: tuple[str, ...] = ()) -> Worker:
    warm_up = str(exercise.warm_up) if exercise.warm_up is not None else None
    return Worker(source, filename, list(exercise.functions), options.limits, forks, isolate=options.isolate, hide=hide, warm_up=warm_up)


def _load(worker: Worker) -> tuple[dict[str, Any], str | None]:
    """The functions the submission defines, and why it failed to load (or None)."""
    try:
        reply = worker.load()
    except WorkerStartFailure as exc:
        raise InternalError(f"the worker could not start before loading any code ({exc}); are the limits too tight?") from None
    except WorkerFailure as exc:
        return {}, f"the submission could not be imported: {exc}"
    if reply.get("status") != "ok" or not isinstance(reply.get("functions"), dict):
        error = reply.get("error")
        return {}, describe_load_error(error if isinstance(error, dict) else {"type": "unknown error"})
    functions = {name: _described_function(reply["functions"].get(name)) for name in worker.functions}
    return functions, None


def _described_function(described: Any) -> dict[str, Any]:
    """A function description from the worker, reduced to well-formed fields (it may be forged)."""
    if not isinstance(described, dict) or described.get("kind") not in ("missing", "not_callable", "callable"):
        return {"kind": "missing"}
    parameters = described.get("parameters")
    fields = {"name": str, "kind": str, "has_default": bool}
    if not (isinstance(parameters, list) and all(
        isinstance(p, dict) and all(isinstance(p.get(k), t) for k, t in fields.items()) for p in parameters
    )):
        parameters = None
    return {"kind": described["kind"], "type": str(described.get("type", "")), "parameters": parameters}


# Modules a run imports on the way (pytest's own plugins, pdb through its
# debugging plugin); a batch imports them before it forks its graders.
RUN_IMPORTS = ("_pytest.helpconfig", "_pytest.setuponly", "_pytest.setupplan", "_pytest.skipping",
               "_pytest.tracemalloc", "_pytest.warnings", "concurrent.futures.thread", "pdb")  # fmt: skip


def preload(exercise: Exercise) -> None:
    """Import (and compute) what every grading run needs, check modules included, so that forked runs share it."""
    for name in RUN_IMPORTS:
        importlib.import_module(name)
    platform.platform()  # cached once known; the first call starts a `uname -p` process
    for path in sorted(exercise.checks_dir.glob("test_*.py")):
        parts = [path.stem]
        folder = path.parent
        while (folder / "__init__.py").is_file():
            parts.insert(0, folder.name)
            folder = folder.parent
        importlib.import_module(".".join(parts))


@dataclass(frozen=True)
class Preview:
    """The reference's run of the experiment, or why there is none (the same for every submission with one seed)."""

    measured: Measured | None
    note: str | None


def draw_preview(exercise: Exercise, options: RunOptions, forks: ForkServer) -> Preview:
    """Run the reference's experiment with the options' seed; raise UsageError when it cannot be read."""
    if exercise.experiment is None or options.reference is None or not options.reference.is_file():
        return Preview(None, options.no_reference_reason)
    try:
        source = options.reference.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise UsageError(f"cannot read the reference {options.reference}: {exc}") from None
    worker = _start(exercise, source, options.reference.name, options, forks)
    try:
        _, failure = _load(worker)
        if failure is not None:
            raise ExperimentUnavailable(f"the reference could not be loaded: {failure}")
        return Preview(exercise.experiment(worker, options.seed), None)
    except (ExperimentUnavailable, InternalError, WorkerFailure) as exc:
        return Preview(None, f"the preview could not be drawn: {exc}")
    finally:
        worker.close()


def _experiment(exercise: Exercise, preview: Preview, options: RunOptions, context: GradingContext) -> dict[str, Any] | None:
    """The report's experiment section: the exercise's frame with the reference's and the submission's runs."""
    if exercise.experiment is None or exercise.experiment_frame is None:
        return None
    submission_note = context.experiment_note
    if context.experiment is None and submission_note is None:
        submission_note = context.load_failure or "the submission's curves come from a check that did not run"
    try:
        return section(exercise.experiment_frame(options.seed), preview.measured, preview.note, context.experiment, submission_note)
    except ExperimentError as exc:
        raise InternalError(f"the experiment of {exercise.name} does not fit the report's format: {exc}") from None


def grade(
    exercise: Exercise, options: RunOptions, *, forks: ForkServer | None = None, preview: Preview | None = None,
    run_checks: RunChecks | None = None,
) -> Run:  # fmt: skip
    """Grade one submission with one seed; raise UsageError or InternalError, nothing else.

    A batch's grading process passes the batch's fork server, the preview
    drawn once for the seed, and the check session in which it grades one
    student after another (``run_checks``, see grader.core.checksession); alone,
    the run starts each of them itself.
    """
    if run_checks is None:
        try:
            return run_session(exercise, set(options.tiers), lambda run: grade(exercise, options, forks=forks, preview=preview, run_checks=run))
        except CheckSessionError as exc:
            raise InternalError(str(exc)) from None
    # A submission's numbers may overflow the grader's arithmetic (outputs of 1e300, say): every comparison and probe
    # handles infinities and NaN itself, so numpy's warnings about them would only be noise on the user's terminal.
    with np.errstate(all="ignore"):
        return _graded(exercise, options, forks, preview, run_checks)


def _graded(exercise: Exercise, options: RunOptions, forks: ForkServer | None, preview: Preview | None, run_checks: RunChecks) -> Run:
    """:func:`grade` inside the check session ``run_checks``."""
    started, clock = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
    submission = read_submission(options.submission)
    own_forks = forks is None
    if forks is None:
        try:
            forks = ForkServer()
        except OSError as exc:
            raise InternalError(f"the fork server could not be started: {exc}") from None
    worker = None
    # The preview's worker runs beside the checks. A single run computes the expected values in a thread from the start,
    # and its checks do not wait for them: a check that needs a truth not computed yet computes it, or waits for the
    # thread that is computing it (grader.toolkit.tolerance.remember), while the worker answers the others.
    drawing = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    try:
        pending = drawing.submit(draw_preview, exercise, options, forks) if preview is None else None
        if preview is None and exercise.expect is not None:
            drawing.submit(exercise.expect, options.seed)  # (a truth that fails there is computed again by its check, which reports it)
        functions: dict[str, dict[str, Any]] = {}
        load_failure = submission.problem
        if load_failure is None:
            assert submission.source is not None
            worker = _start(exercise, submission.source, options.submission.name, options, forks, hidden_paths(exercise, options.reference, options.hide))
            functions, load_failure = _load(worker)
        context = GradingContext(options.seed, worker, functions, load_failure, source=submission.source)
        checks = run_checks(context)
        diagnosis = diagnose(exercise, context, [check_record(test) for test in checks])
        if pending is not None:
            preview = pending.result()
        assert preview is not None
        experiment = _experiment(exercise, preview, options, context)
    finally:
        drawing.shutdown(wait=True, cancel_futures=True)
        if worker is not None:
            worker.close()
        if own_forks:
            forks.close()
    worker_facts: dict[str, Any] = {"stdout": "", "stderr": "", "restarts": 0, "warnings": [], "protections": {}, "submission_cpu_s": 0.0}
    if worker is not None:
        worker_facts.update(worker.captured(), restarts=worker.restarts, submission_cpu_s=round(worker.submission_cpu_s, 4),
                            **_protections(worker, options))  # fmt: skip
    return Run(
        options=options,
        submission=submission,
        checks=checks,
        load_failure=load_failure,
        experiment=experiment,
        worker=worker_facts,
        environment=_environment(worker),
        started_at=started.isoformat(timespec="seconds"),
        duration_s=round(time.monotonic() - clock, 3),
        diagnosis=diagnosis,
    )


def _protections(worker: Worker, options: RunOptions) -> dict[str, Any]:
    """Which protections the submission's worker ran under, and warnings for the missing ones."""
    if not options.isolate:
        return {"protections": {}, "warnings": ["isolation was turned off (--no-isolation): the submission ran with the grader's privileges"]}
    applied = worker.info.get("protections")
    warnings = worker.info.get("warnings")
    if not isinstance(applied, dict) or not isinstance(warnings, list):
        return {"protections": {}, "warnings": ["the worker did not report its protections"]}
    return {
        "protections": {str(k): bool(v) for k, v in applied.items()},
        "warnings": [str(w) for w in warnings],
    }


def _environment(worker: Worker | None) -> dict[str, Any]:
    import jinja2
    import numpy

    torch_version = worker.info.get("torch") if worker is not None else None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "torch": torch_version if isinstance(torch_version, str) else None,
        "pytest": pytest.__version__,
        "jinja2": jinja2.__version__,
        "grader": __version__,
    }
