"""``diffgrade batch``: grade a whole class with one seed, fast, resumably.

The batch process starts one fork server (torch is imported once), draws the
reference's preview once, computes the oracle's expected values once
(:attr:`Exercise.prepare`), and then forks ``--jobs`` light grading
processes. Each one opens a single pytest session (grader.core.checksession) and
grades the students it is sent one after another, each with the same
:func:`grader.core.session.grade` as ``diffgrade FILE`` and in a worker of its
own; it writes that student's reports atomically and sends back one JSON
line. Whatever happens to a grading process (a crash, a hang past its
deadline) becomes the error record of the student it was grading, never the
batch's end: a new process takes over the rest. The gradebook (grades.csv)
and the class summary are written atomically once all are done, or when
interrupted.

A batch resumes only with the settings that its output folder was graded
with (``batch.json``); then a student whose file is unchanged and whose report
is intact (and not an error) is not graded again, unless ``--force``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import dataclasses
import functools
import gc
import io
import json
import os
import select
import signal
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grader import __version__
from grader.commands import options as shared
from grader.core.checksession import CheckSessionError, RunChecks, run_session
from grader.core.exercise import Exercise
from grader.core.session import (
    InternalError,
    Preview,
    RunOptions,
    UsageError,
    draw_preview,
    grade,
    preload,
)
from grader.core.submissions import ClassError, Entry, discover, extract
from grader.reports import classreport, report
from grader.reports.audience import for_audience
from grader.toolkit import safetext
from grader.worker.client import ForkServer
from grader.worker.isolation import die_with_parent

STATE_FILE = "batch.json"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
GRACE_S = 30.0  # beyond the longest a submission's worker may take, before its grading process is killed


@dataclass(frozen=True)
class BatchOptions:
    """What ``diffgrade batch`` was asked to do."""

    out: Path
    jobs: int
    force: bool
    options: RunOptions  # the per-submission options; its submission path is replaced per student
    audience: Callable[[dict[str, Any]], dict[str, Any]] = lambda document: document


@dataclass
class Outcome:
    """The end of a batch: one record per student, and whether it was cut short."""

    records: list[dict[str, Any]]
    graded: int = 0
    reused: int = 0
    interrupted: bool = False
    duration_s: float = 0.0


def record_of(entry: Entry, document: dict[str, Any]) -> dict[str, Any]:
    """The gradebook line and per-check statuses of one graded student."""
    tiers = document["tiers_selected"]
    return {
        "student": entry.student,
        "folder": entry.folder,
        "score": document["score"],
        "max_score": document["max_score"],
        "tiers": {t["name"]: t["score"] for t in document["tiers"] if t["name"] in tiers},
        "status": document["status"],
        "sha256": document["submission"]["sha256"],
        "seed": document["seed"],
        "duration_s": document["duration_s"],
        "message": document["submission"]["load_error"],
        "checks": [
            {"id": c["id"], "title": c["title"], "tier": t["name"], "status": c["status"]}
            for t in document["tiers"] for c in t["checks"]
        ],  # fmt: skip
        "report": f"{entry.folder}/report.html",
    }


def error_record(entry: Entry, seed: int, status: str, message: str, duration_s: float = 0.0) -> dict[str, Any]:
    """The record of a student who could not be graded (no file, or the grader failed on it)."""
    return {
        "student": entry.student,
        "folder": entry.folder,
        "score": 0.0,
        "max_score": None,
        "tiers": {},
        "status": status,
        "sha256": entry.sha256(),
        "seed": seed,
        "duration_s": round(duration_s, 3),
        "message": safetext.text(message),
        "checks": [],
        "report": None,
    }


def internal_error_record(entry: Entry, seed: int, problem: object) -> dict[str, Any]:
    """The record of a student the grader itself failed on."""
    return error_record(entry, seed, "error", f"internal grader error: {problem}")


def previous_record(entry: Entry, batch: BatchOptions) -> dict[str, Any] | None:
    """The record of an earlier grading of this very file with the same settings, if its report is intact."""
    if batch.force or entry.path is None:
        return None
    try:
        document = json.loads((batch.out / entry.folder / "report.json").read_text(encoding="utf-8"))
        same = (
            document["status"] != "error"  # the grader failed on it last time: grade again
            and document["submission"]["sha256"] == entry.sha256()
            and document["seed"] == batch.options.seed
            and document["tiers_selected"] == list(batch.options.tiers)
            and document["grader_version"] == __version__
            and (batch.out / entry.folder / "report.html").is_file()
        )
        return record_of(entry, document) if same else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def grade_student(
    exercise: Exercise, entry: Entry, batch: BatchOptions, forks: ForkServer, preview: Preview, run_checks: RunChecks
) -> dict[str, Any]:  # fmt: skip
    """Grade one student's file in the grading process's check session, write their reports; return their record."""
    assert entry.path is not None
    options = dataclasses.replace(batch.options, submission=entry.path)
    try:
        run = grade(exercise, options, forks=forks, preview=preview, run_checks=run_checks)
        document = batch.audience(report.build(exercise, run))
        folder = batch.out / entry.folder
        report.write_atomic(folder / "report.html", report.render_html(document))
        report.write_atomic(folder / "report.json", report.to_json(document))  # last: its presence marks the student done
    except UsageError as exc:
        return error_record(entry, batch.options.seed, "error", str(exc))
    except InternalError as exc:
        return internal_error_record(entry, batch.options.seed, exc)
    except CheckSessionError:
        raise  # the grading process's session can grade nobody else (see _serve)
    except Exception as exc:  # any other failure is this student's error record, not the batch's end
        return internal_error_record(entry, batch.options.seed, f"{type(exc).__name__}: {exc}")
    return record_of(entry, document)


class _Grader:
    """One forked grading process: it grades the students it is sent, one at a time, in one check session."""

    def __init__(self, pid: int, orders: int, results: int) -> None:
        self.pid = pid
        self.orders = orders  # we write a student's number and a newline
        self.results = results  # it answers one JSON line per student
        self.entry: Entry | None = None
        self.started = 0.0
        self.deadline = 0.0
        self.received = bytearray()

    def assign(self, number: int, entry: Entry, deadline_s: float) -> bool:
        """Send one student to grade; False if the process is gone (its end is read from its results)."""
        try:
            os.write(self.orders, f"{number}\n".encode())
        except BrokenPipeError:
            return False
        self.entry, self.started = entry, time.monotonic()
        self.deadline = self.started + deadline_s
        return True

    def stop(self, kill: bool) -> int:
        """Close the pipes (the process leaves once it has read every order), or kill it; return its exit status."""
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        os.close(self.orders)
        os.close(self.results)
        return os.waitpid(self.pid, 0)[1]


def _serve(exercise: Exercise, queue: list[Entry], batch: BatchOptions, forks: ForkServer, preview: Preview, orders: int, out: int) -> None:
    """Body of a forked grading process: grade each student whose number arrives on ``orders``, answer on ``out``, leave."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the batch decides what an interrupt means
        die_with_parent()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        numbers = (queue[int(line)] for line in os.fdopen(orders, "rb"))

        def answer(record: dict[str, Any]) -> None:
            view = memoryview((json.dumps(record, allow_nan=False) + "\n").encode())
            while view:
                view = view[os.write(out, view) :]

        def grade_each(run_checks: RunChecks) -> None:
            for entry in numbers:
                try:
                    answer(grade_student(exercise, entry, batch, forks, preview, run_checks))
                except CheckSessionError as exc:  # this process ends; the batch forks a fresh one for the rest
                    answer(internal_error_record(entry, batch.options.seed, exc))
                    return

        try:
            run_session(exercise, set(batch.options.tiers), grade_each)
        except CheckSessionError as exc:  # no student can be graded: say why to each one sent
            for entry in numbers:
                answer(internal_error_record(entry, batch.options.seed, exc))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def run_batch(
    exercise: Exercise, entries: list[Entry], batch: BatchOptions, progress: Callable[[dict[str, Any], int, int], None],
    forks: ForkServer | None = None,
) -> Outcome:  # fmt: skip
    """Grade every entry (skipping the ones already graded) and return all records.

    ``forks``: a fork server already started (grader.commands.launch); without one, the
    batch starts its own when some student needs grading.
    """
    clock = time.monotonic()
    records: dict[str, dict[str, Any]] = {}  # by the student's folder, which is unique
    pending: deque[Entry] = deque()
    reused = 0
    for entry in entries:
        if entry.path is None:
            records[entry.folder] = error_record(entry, batch.options.seed, "no_submission", entry.problem or "no file")
        elif (earlier := previous_record(entry, batch)) is not None:
            records[entry.folder] = earlier
            reused += 1
        else:
            pending.append(entry)
    outcome = Outcome([], reused=reused)
    for record in records.values():
        progress(record, len(records), len(entries))
    if pending:
        own = forks is None
        try:
            forks = ForkServer() if forks is None else forks
        except OSError as exc:
            raise InternalError(f"the fork server could not be started: {exc}") from None
        drawing = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            # The preview's worker waits for the fork server's torch import; meanwhile this process
            # prepares what every grading process shares, the optional part only until the preview is drawn.
            previewing = drawing.submit(draw_preview, exercise, batch.options, forks)
            report.preload()
            preload(exercise)
            if exercise.prepare is not None:
                exercise.prepare(batch.options.seed, previewing.done)
            preview = previewing.result()
            drawing.shutdown()
            gc.collect()
            gc.freeze()  # the forked graders share what is loaded now; the collector must not touch (and so copy) it
            outcome.interrupted = _grade_all(exercise, pending, batch, forks, preview, records, len(entries), progress)
        finally:
            drawing.shutdown(wait=True, cancel_futures=True)
            if own:
                forks.close()
    outcome.graded = sum(r["status"] != "no_submission" for r in records.values()) - outcome.reused
    outcome.records = [records[e.folder] for e in entries if e.folder in records]
    outcome.duration_s = round(time.monotonic() - clock, 3)
    return outcome


def _grade_all(
    exercise: Exercise, pending: deque[Entry], batch: BatchOptions, forks: ForkServer, preview: Preview,
    records: dict[str, dict[str, Any]], total: int, progress: Callable[[dict[str, Any], int, int], None],
) -> bool:  # fmt: skip
    """Keep ``batch.jobs`` grading processes busy until every student is graded; True if interrupted.

    A grading process that dies or overruns its deadline costs only the
    student it was grading: that student gets an error record, and a new
    process takes over the rest.
    """
    queue = list(pending)  # forked grading processes find a student by their number in it
    graders: dict[int, _Grader] = {}  # by the descriptor of their results
    seed = batch.options.seed
    limits = batch.options.limits
    # The budget bounds the calls; a restart may add a start and a load on top, then the reports.
    deadline_s = limits.budget_s + limits.startup_timeout_s + 2 * limits.call_timeout_s + GRACE_S

    def done(entry: Entry, record: dict[str, Any]) -> None:
        records[entry.folder] = record
        progress(record, len(records), total)

    def spawn() -> None:  # the processes are forked from this one, which has everything prepared
        orders_read, orders_write = os.pipe()
        results_read, results_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in [orders_write, results_read, *(fd for g in graders.values() for fd in (g.orders, g.results))]:
                os.close(fd)  # a sibling's pipes must close when the batch closes them
            _serve(exercise, queue, batch, forks, preview, orders_read, results_write)
        os.close(orders_read)
        os.close(results_write)
        graders[results_read] = _Grader(pid, orders_write, results_read)

    def lost(grader: _Grader, why: str) -> None:
        del graders[grader.results]
        if grader.entry is not None:
            done(grader.entry, error_record(grader.entry, seed, "error", why, time.monotonic() - grader.started))

    number = 0
    try:
        while number < len(queue) or any(g.entry is not None for g in graders.values()):
            if not forks.alive():  # nobody can be graded any more: say so for each, and stop
                for entry in queue[number:]:
                    done(entry, error_record(entry, seed, "error", "not graded: the fork server stopped"))
                number = len(queue)
            idle = [g for g in graders.values() if g.entry is None]
            while len(graders) < batch.jobs and len(idle) < len(queue) - number:
                spawn()
                idle = [g for g in graders.values() if g.entry is None]
            for grader in idle[: len(queue) - number]:
                number += grader.assign(number, queue[number], deadline_s)
            ready, _, _ = select.select(list(graders), [], [], 0.5)
            for fd in ready:
                grader = graders[fd]
                chunk = os.read(fd, 65536)
                if not chunk:
                    code = os.waitstatus_to_exitcode(grader.stop(kill=True))
                    lost(grader, f"the grading process ended without a result (exit code {code})")
                    continue
                grader.received += chunk
                while b"\n" in grader.received and grader.entry is not None:
                    line, _, grader.received = grader.received.partition(b"\n")
                    done(grader.entry, _record_from(bytes(line), grader.entry, seed, time.monotonic() - grader.started))
                    grader.entry = None
            for grader in [g for g in graders.values() if g.entry is not None and time.monotonic() > g.deadline]:
                grader.stop(kill=True)
                lost(grader, f"grading took longer than {time.monotonic() - grader.started:.0f} s and was stopped")
    except KeyboardInterrupt:
        for grader in graders.values():
            grader.stop(kill=True)
        return True
    for grader in graders.values():
        grader.stop(kill=False)
    return False


def _record_from(line: bytes, entry: Entry, seed: int, took: float) -> dict[str, Any]:
    """The student's record as a grading process sent it, or an error record when it is not one."""
    try:
        record = json.loads(line.decode())
        if isinstance(record, dict) and record.get("folder") == entry.folder:
            return record
    except ValueError:
        pass
    return error_record(entry, seed, "error", "the grading process sent a malformed result", took)


def gradebook(records: list[dict[str, Any]], tiers: list[str]) -> str:
    """grades.csv: one row per student, in the order of the records."""
    columns = ["student", "score", "max_score", *tiers, "status", "sha256", "seed", "duration_s"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for r in records:
        row = {**r, **{t: r["tiers"].get(t, "") for t in tiers}, "student": safetext.line(str(r["student"]))}
        if row["student"].startswith(FORMULA_STARTS):  # a spreadsheet must show the name, not run it
            row["student"] = "'" + row["student"]
        writer.writerow(["" if row[c] is None else row[c] for c in columns])
    return buffer.getvalue()


def load_state(out: Path) -> dict[str, Any] | None:
    """The settings (see :func:`settings`) an earlier batch in ``out`` was graded with, or None for a fresh folder."""
    path = out / STATE_FILE
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        return state["settings"] if isinstance(state, dict) and isinstance(state.get("settings"), dict) else None
    except (OSError, ValueError):
        return None


def settings(options: RunOptions, audience: str, exercise: Exercise) -> dict[str, Any]:
    """What a student's report depends on besides their file: a resumed batch must keep it all."""
    return {
        "exercise": exercise.name,
        "seed": options.seed,
        "tiers": list(options.tiers),
        "audience": audience,
        "isolation": options.isolate,
        "reference": None if options.reference is None else str(options.reference.resolve()),
        "limits": dataclasses.asdict(options.limits),
    }


def save_state(out: Path, current: dict[str, Any], exercise: Exercise) -> None:
    """Record the batch's settings, so that a later run resumes with the same ones."""
    state = {"exercise": exercise.name, "grader_version": __version__, "settings": current}
    report.write_atomic(out / STATE_FILE, report.to_json(state))


def temporary_folder() -> tempfile.TemporaryDirectory[str]:
    """A private folder to unpack a class archive into."""
    return tempfile.TemporaryDirectory(prefix="diffgrade-class-")


def plain_progress(stream: Any) -> Callable[[dict[str, Any], int, int], None]:
    """Progress as one line per student: for logs and other non-terminals."""

    def show(record: dict[str, Any], done: int, total: int) -> None:
        score = "" if record["max_score"] is None else f" {record['score']:g}/{record['max_score']:g}"
        student = safetext.line(str(record["student"]))  # already one line (grader.core.submissions); a log line must never split
        stream.write(f"[{done}/{total}] {student}:{score} {record['status']} ({record['duration_s']:.1f} s)\n")
        stream.flush()

    return show


def bar_progress(stream: Any, width: int = 28) -> Callable[[dict[str, Any], int, int], None]:
    """A progress bar with counts, rate and time left, redrawn in place on a terminal."""
    started = time.monotonic()
    first: list[int] = []

    def show(record: dict[str, Any], done: int, total: int) -> None:
        if not first:
            first.append(done - 1)  # students reused from an earlier run do not count towards the rate
        elapsed = time.monotonic() - started
        fresh = done - first[0]
        rate = fresh / elapsed if elapsed > 0 and fresh > 0 else 0.0
        left = f"{(total - done) / rate:.0f} s left" if rate > 0 and done < total else ""
        filled = round(width * done / total)
        line = f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {rate:.1f}/s  {left}"
        stream.write(line.ljust(72) + ("\n" if done == total else ""))
        stream.flush()

    return show


def default_jobs() -> int:
    """The number of cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def write_outputs(out: Path, outcome: Outcome, tiers: list[str], summary: dict[str, Any], html: str) -> None:
    """grades.csv, summary.json and summary.html, each atomically."""
    report.write_atomic(out / "grades.csv", gradebook(outcome.records, tiers))
    report.write_atomic(out / "summary.json", report.to_json(summary))
    report.write_atomic(out / "summary.html", html)


def stream_is_terminal(stream: Any) -> bool:
    """Whether progress may be redrawn in place."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``diffgrade batch``."""
    parser = shared.Parser(
        prog="diffgrade batch",
        description="Grade a class: one submission per student, all with the same seed, in parallel. "
        "Writes OUT/<student>/report.json and report.html, OUT/grades.csv, OUT/summary.json and OUT/summary.html. "
        "Students already graded in OUT with the same seed and an unchanged file are not graded again.",
        epilog="Exit codes: 0 every student passed every check, 1 some student lost points or could not be graded, "
        "2 usage error, 3 internal grader error, 130 interrupted (run the same command again to resume).",
    )
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                        help="a folder (one .py or .ipynb per student, or one subfolder per student) or a .zip of one")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder for the reports (created if needed)")
    parser.add_argument("--jobs", type=shared.whole, default=default_jobs(), metavar="N",
                        help=f"students graded at the same time (default: the number of cores, here {default_jobs()})")
    parser.add_argument("--force", action="store_true", help="grade every student again, and allow a new seed in an old OUT")
    shared.add_exercise_option(parser, "the exercise whose functions most of the class's submissions define")
    shared.add_grading_options(parser, audience="instructor")
    return parser  # fmt: skip


def main(argv: list[str], forks: ForkServer | None = None) -> int:
    """Run ``diffgrade batch`` and return its exit code; ``forks``: a fork server already started (grader.commands.launch)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    out: Path = args.out
    if out.exists() and not out.is_dir():
        parser.error(f"argument --out: must be a folder (got a file: {str(out)!r})")
    earlier = load_state(out)
    if out.is_dir() and earlier is None and any(out.iterdir()) and not args.force:
        parser.error(f"argument --out: {str(out)!r} holds files but no earlier batch; choose a new or empty folder, or pass --force")
    source = args.submissions
    if source.is_dir() and out.resolve().is_relative_to(source.resolve()):
        parser.error(f"argument --out: must not be inside the class folder {str(source)!r} (its reports would become students)")
    try:
        with temporary_folder() as unpacked:
            if not source.exists():
                raise UsageError(f"submissions not found: {source}")
            if source.is_file():
                if source.suffix.lower() != ".zip":
                    raise UsageError(f"SUBMISSIONS must be a folder or a .zip archive (got {source})")
                source = extract(source, Path(unpacked))
            entries = discover(source)
            if args.exercise is None and earlier is not None and not args.force:
                args.exercise = earlier.get("exercise")  # resuming: the class keeps its exercise
            exercise = shared.chosen_exercise(args, parser, [e.path for e in entries if e.path is not None])
            seed = args.seed if args.seed is not None else (earlier or {}).get("seed")
            options = shared.run_options(args, parser, exercise, seed)
            current = settings(options, args.audience, exercise)
            if earlier is not None and not args.force:
                changed = [key for key, value in current.items() if earlier.get(key) != value]
                if changed:
                    before = ", ".join(f"{key} {earlier.get(key)!r}" for key in changed)
                    parser.error(f"{str(out)!r} was graded with {before}; pass the same settings to resume, "
                                 "or --force to grade everyone again")  # fmt: skip
            out.mkdir(parents=True, exist_ok=True)
            save_state(out, current, exercise)
            # The workers must read neither the classmates' files nor the reports (instructor's, same seed).
            options = dataclasses.replace(options, hide=(source, out))
            batch = BatchOptions(out, args.jobs, args.force, options, audience=functools.partial(for_audience, audience=args.audience))
            terminal = stream_is_terminal(sys.stderr) and not args.quiet
            show = bar_progress(sys.stderr) if terminal else (plain_progress(sys.stderr) if not args.quiet else lambda *_: None)
            started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
            outcome = run_batch(exercise, entries, batch, show, forks)
    except (UsageError, ClassError) as exc:
        return shared.fail(shared.EXIT_USAGE, str(exc))
    except InternalError as exc:
        return shared.fail(shared.EXIT_INTERNAL, f"internal error: {exc}")
    except KeyboardInterrupt:
        return shared.fail(130, "interrupted; the students graded so far keep their reports: run the same command again to resume")
    except OSError as exc:
        return shared.fail(shared.EXIT_USAGE, f"cannot use {exc.filename or out}: {exc.strerror or exc}")
    except Exception as exc:  # the promise is: never a traceback at the user
        return shared.fail(shared.EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    tiers = list(options.tiers)
    summary = classreport.summarize(
        outcome.records, exercise=exercise.name, seed=options.seed, tiers=tiers, interrupted=outcome.interrupted,
        started_at=started, duration_s=outcome.duration_s, graded=outcome.graded, reused=outcome.reused,
    )  # fmt: skip
    try:
        write_outputs(out, outcome, tiers, summary, classreport.render_html(summary))
    except OSError as exc:
        return shared.fail(shared.EXIT_USAGE, f"cannot write the batch's results in {out}: {exc.strerror}")
    if not args.quiet:
        rate = outcome.graded / outcome.duration_s if outcome.duration_s > 0 else 0.0
        print(f"{len(outcome.records)} students: {outcome.graded} graded in {outcome.duration_s:.1f} s ({rate:.1f}/s), "
              f"{outcome.reused} unchanged since the last run. Mean score {summary['score']['mean'] if summary['score']['mean'] is not None else 0:.1f}/{summary['max_score']:g}.")  # fmt: skip
        print(f"Gradebook: {report.printable_path(out / 'grades.csv')}\nSummary:   {report.printable_path(out / 'summary.html')}")
    if outcome.interrupted:
        return shared.fail(130, "interrupted; the students graded so far keep their reports: run the same command again to resume")
    if any(r["status"] == "error" for r in outcome.records):
        return shared.EXIT_INTERNAL if all(r["status"] == "error" for r in outcome.records) else shared.EXIT_FAILED
    return shared.EXIT_PASSED if all(r["status"] == "passed" for r in outcome.records) else shared.EXIT_FAILED
