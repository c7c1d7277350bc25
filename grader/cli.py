"""The ``diffgrade`` command: arguments, the run, the reports, the exit code.

Exit codes: 0 every check passed; 1 graded, something failed (a submission
that does not import is graded 0); 2 usage error (one line on stderr);
3 internal grader error.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from grader import __version__, gradescope, junit, markdown, report
from grader.audience import AUDIENCES, for_audience
from grader.diffattn import exercise as diff_attention
from grader.exercise import Exercise
from grader.launch import COMMANDS, GRADING_COMMANDS
from grader.session import InternalError, RunOptions, UsageError, grade
from grader.worker.client import ForkServer, MiB, WorkerLimits

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
MAX_SEED = 2**32 - 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Report a usage error in one line and exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _bounded(convert: Callable[[str], Any], noun: str, accept: Callable[[Any], bool], bound: str) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then require ``accept`` of the value, saying what was expected."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {noun} (got {text!r})") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {bound} (got {text})")
        return value

    return parse


_seed = _bounded(int, "an integer", lambda v: 0 <= v <= MAX_SEED, f"in [0, {MAX_SEED}]")
_positive = _bounded(float, "a number", lambda v: 0 < v < 1e9, "positive and finite")
whole = _bounded(int, "a whole number", lambda v: 1 <= v < 10**9, "at least 1")
_score = _bounded(float, "a number", lambda v: math.isfinite(v) and v >= 0, "finite and at least 0")

# Summaries written only when asked for: option -> writer from the report document to the file's text.
SUMMARY_WRITERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "gradescope": gradescope.to_text,
    "junit": junit.to_xml,
    "markdown": markdown.summary,
}


def build_parser(tiers: Sequence[str], default_submission: str, default_reference: str) -> argparse.ArgumentParser:
    """The argument parser of ``diffgrade``."""
    parser = _Parser(
        prog="diffgrade",
        description="Grade a differential-attention submission: T1 contract, T2 values, T3 gradients.",
        epilog="Exit codes: 0 all checks passed, 1 some check failed (with --fail-under: 0 when the score "
        "reaches SCORE, 1 below it), 2 usage error, 3 internal grader error. "
        "Other commands: diffgrade batch SUBMISSIONS --out DIR, diffgrade gradescope-bundle OUT.zip, "
        "diffgrade handout OUT_DIR (see their --help).",
    )
    parser.add_argument("submission", nargs="?", default=default_submission, type=Path,
                        help=f"the .py file or .ipynb notebook to grade (default: {default_submission})")
    parser.add_argument("--json", type=Path, default=Path("report.json"), metavar="PATH",
                        help="where to write the JSON report (default: report.json)")
    parser.add_argument("--html", type=Path, default=Path("report.html"), metavar="PATH",
                        help="where to write the HTML report (default: report.html)")
    add_grading_options(parser, tiers, default_reference)
    ci = parser.add_argument_group("summaries for CI and Gradescope (docs/ci.md)")
    ci.add_argument("--gradescope", type=Path, metavar="PATH",
                    help="also write a Gradescope results.json: one test per check that ran")
    ci.add_argument("--junit", type=Path, metavar="PATH",
                    help="also write JUnit XML: one test suite per tier, one test case per check")
    ci.add_argument("--markdown", type=Path, metavar="PATH",
                    help="also write a Markdown summary, e.g. for $GITHUB_STEP_SUMMARY")
    ci.add_argument("--fail-under", type=_score, metavar="SCORE",
                    help="exit 0 when the score is at least SCORE points and 1 below it, "
                    "instead of 1 whenever a check fails")
    parser.add_argument("--version", action="version", version=f"diffgrade {__version__}")
    return parser  # fmt: skip



def add_grading_options(
    parser: argparse.ArgumentParser, tiers: Sequence[str], default_reference: str, audience: str = "student"
) -> None:
    """The options shared by ``diffgrade`` and ``diffgrade batch``: what to run, limits, audience."""
    parser.add_argument("--seed", type=_seed, metavar="N",
                        help="seed for the random inputs (default: a fresh one, recorded in the report)")
    parser.add_argument("--tiers", default=",".join(tiers), metavar="T1,T2",
                        help=f"comma-separated tiers to run (default: {','.join(tiers)})")
    parser.add_argument("--reference", type=Path, metavar="PATH",
                        help=f"reference implementation that draws the toy-experiment preview curve "
                        f"(default: {default_reference} if it exists)")
    parser.add_argument("--no-preview", action="store_true",
                        help="do not run the reference for the preview curve (faster)")
    limits = parser.add_argument_group("limits on the submission's worker")
    limits.add_argument("--call-timeout", type=_positive, default=WorkerLimits.call_timeout_s, metavar="SECONDS",
                        help=f"wall-clock limit for each call (default: {WorkerLimits.call_timeout_s:g})")
    limits.add_argument("--time-budget", type=_positive, default=WorkerLimits.budget_s, metavar="SECONDS",
                        help=f"wall-clock budget for the whole submission (default: {WorkerLimits.budget_s:g})")
    limits.add_argument("--memory-limit", type=_positive, default=WorkerLimits.address_space_bytes / MiB, metavar="MIB",
                        help=f"address-space limit of the worker (default: {WorkerLimits.address_space_bytes // MiB})")
    limits.add_argument("--cpu-limit", type=whole, default=WorkerLimits.cpu_seconds, metavar="SECONDS",
                        help=f"CPU-time limit of each worker process (default: {WorkerLimits.cpu_seconds})")
    limits.add_argument("--process-limit", type=whole, default=WorkerLimits.max_processes, metavar="N",
                        help=f"processes and threads the worker may run, when run as root (default: {WorkerLimits.max_processes})")
    limits.add_argument("--no-isolation", action="store_true",
                        help="run the worker without namespaces or a user switch (debugging only; the report says so)")
    parser.add_argument("--audience", choices=AUDIENCES, default=audience,
                        help="who every report is for: student shows hidden checks with their title, "
                        f"status and points only, not their messages; instructor shows everything (default: {audience})")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")


def _tiers(text: str, known: Sequence[str], parser: argparse.ArgumentParser) -> tuple[str, ...]:
    chosen = tuple(part.strip().upper() for part in text.split(",") if part.strip())
    unknown = [t for t in chosen if t not in known]
    if not chosen or unknown:
        parser.error(f"argument --tiers: must list tiers among {','.join(known)} (got {text!r})")
    return tuple(t for t in known if t in chosen)


def _reference(args: argparse.Namespace, default: Path, parser: argparse.ArgumentParser) -> tuple[Path | None, str]:
    """The reference to draw the preview with, or None and the reason there is none."""
    if args.no_preview:
        return None, "the preview was turned off (--no-preview)"
    if args.reference is None:
        reason = f"there is no reference implementation at {default} (pass --reference PATH to draw the preview curve)"
        return (default, "") if default.is_file() else (None, reason)
    if not args.reference.is_file():
        parser.error(f"argument --reference: not a file: {args.reference}")
    return args.reference, ""


def main(argv: Sequence[str] | None = None, forks: ForkServer | None = None) -> int:
    """Run ``diffgrade`` and return its exit code; ``forks``: a fork server already started (grader.launch)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in COMMANDS:
        module, function = COMMANDS[arguments[0]].split(":")
        command = getattr(importlib.import_module(module), function)
        return int(command(arguments[1:], forks) if arguments[0] in GRADING_COMMANDS else command(arguments[1:]))
    return grade_command(arguments, forks)


def grade_command(argv: Sequence[str], forks: ForkServer | None = None) -> int:
    """Grade one submission: ``diffgrade [SUBMISSION] [options]``."""
    exercise = diff_attention()
    parser = build_parser(tuple(exercise.tiers), exercise.default_submission, exercise.default_reference)
    args = parser.parse_args(argv)
    _check_report_paths(args, parser)
    options = run_options(args, parser, exercise)
    try:
        run = grade(exercise, options, forks=forks)
        document = for_audience(report.build(exercise, run), args.audience)
        pages = {args.json: report.to_json(document), args.html: report.render_html(document)}
        pages.update({getattr(args, o): write(document) for o, write in SUMMARY_WRITERS.items() if getattr(args, o) is not None})
    except UsageError as exc:
        return fail(EXIT_USAGE, str(exc))
    except InternalError as exc:
        return fail(EXIT_INTERNAL, f"internal error: {exc}")
    except KeyboardInterrupt:
        return fail(130, "interrupted; no report was written")
    except Exception as exc:  # the promise is: never a traceback at the user
        return fail(EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    try:
        for path, text in pages.items():
            report.write_atomic(path, text)
    except OSError as exc:
        return fail(EXIT_USAGE, f"cannot write the report {exc.filename or path}: {exc.strerror}")
    if not args.quiet:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        summary = report.render_text(document, [report.printable_path(p) for p in pages], color=color)
        try:
            sys.stdout.write(summary.encode(sys.stdout.encoding or "utf-8", errors="replace").decode(sys.stdout.encoding or "utf-8"))
            sys.stdout.flush()
        except BrokenPipeError:  # e.g. piped into head: the reports are written, that is enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return exit_code(document, args.fail_under)


def run_options(args: argparse.Namespace, parser: argparse.ArgumentParser, exercise: Exercise, seed: int | None = None) -> RunOptions:
    """The grading options from parsed arguments (see add_grading_options); ``seed`` when --seed was not given."""
    reference, no_reference_reason = _reference(args, Path(exercise.default_reference), parser)
    if args.seed is not None:
        seed = args.seed
    return RunOptions(
        submission=getattr(args, "submission", Path(exercise.default_submission)),
        seed=seed if seed is not None else secrets.randbelow(MAX_SEED + 1),
        tiers=_tiers(args.tiers, tuple(exercise.tiers), parser),
        reference=reference,
        no_reference_reason=no_reference_reason,
        limits=WorkerLimits(
            call_timeout_s=args.call_timeout,
            budget_s=args.time_budget,
            address_space_bytes=int(args.memory_limit * MiB),
            cpu_seconds=args.cpu_limit,
            max_processes=args.process_limit,
        ),
        isolate=not args.no_isolation,
    )


def _check_report_paths(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Each report option names a regular file (or a new one), and no two name the same file."""
    seen: dict[Path, str] = {}
    for option in ("json", "html", *SUMMARY_WRITERS):
        target = getattr(args, option)
        if target is None:
            continue
        if target.exists() and not target.is_file():
            parser.error(f"argument --{option}: must name a regular file (got {str(target)!r})")
        if target.resolve() in seen:
            parser.error(f"arguments --{seen[target.resolve()]} and --{option} must name different files (both are {target})")
        seen[target.resolve()] = option


def exit_code(document: dict[str, Any], fail_under: float | None = None) -> int:
    """The exit code of a graded run: 3 if a check errored; else, with ``fail_under``,
    0 when the score is at least ``fail_under`` and 1 below it; without it, 0 only
    when every check that ran passed."""
    if document["status"] == "error":
        return EXIT_INTERNAL
    if fail_under is not None:
        return EXIT_PASSED if document["score"] >= fail_under else EXIT_FAILED
    return EXIT_PASSED if document["status"] == "passed" else EXIT_FAILED


def fail(code: int, message: str) -> int:
    """Print ``diffgrade: message`` on stderr and return ``code``."""
    print(f"diffgrade: {message}", file=sys.stderr)
    return code
