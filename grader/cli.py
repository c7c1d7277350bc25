"""The ``diffgrade`` command: arguments, the run, the reports, the exit code.

Exit codes: 0 every check passed; 1 graded, something failed (a submission
that does not import is graded 0); 2 usage error (one line on stderr);
3 internal grader error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from grader import __version__, report
from grader.diffattn import exercise as diff_attention
from grader.session import InternalError, RunOptions, UsageError, grade
from grader.worker.client import MiB, WorkerLimits

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
_whole = _bounded(int, "a whole number", lambda v: 1 <= v < 10**9, "at least 1")


def build_parser(tiers: Sequence[str], default_submission: str, default_reference: str) -> argparse.ArgumentParser:
    """The argument parser of ``diffgrade``."""
    parser = _Parser(
        prog="diffgrade",
        description="Grade a differential-attention submission: T1 contract, T2 values, T3 gradients.",
        epilog="Exit codes: 0 all checks passed, 1 some check failed, 2 usage error, 3 internal grader error.",
    )
    parser.add_argument("submission", nargs="?", default=default_submission, type=Path,
                        help=f"the .py file to grade (default: {default_submission})")
    parser.add_argument("--json", type=Path, default=Path("report.json"), metavar="PATH",
                        help="where to write the JSON report (default: report.json)")
    parser.add_argument("--html", type=Path, default=Path("report.html"), metavar="PATH",
                        help="where to write the HTML report (default: report.html)")
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
    limits.add_argument("--cpu-limit", type=_whole, default=WorkerLimits.cpu_seconds, metavar="SECONDS",
                        help=f"CPU-time limit of each worker process (default: {WorkerLimits.cpu_seconds})")
    limits.add_argument("--process-limit", type=_whole, default=WorkerLimits.max_processes, metavar="N",
                        help=f"processes and threads the worker may run, when run as root (default: {WorkerLimits.max_processes})")
    limits.add_argument("--no-isolation", action="store_true",
                        help="run the worker without namespaces or a user switch (debugging only; the report says so)")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument("--version", action="version", version=f"diffgrade {__version__}")
    return parser  # fmt: skip


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


# Other commands, ``diffgrade NAME ...``: each is "module:function" taking the
# remaining arguments and returning an exit code. Imported only when used.
COMMANDS: dict[str, str] = {}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``diffgrade`` and return its exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in COMMANDS:
        module, function = COMMANDS[arguments[0]].split(":")
        return int(getattr(importlib.import_module(module), function)(arguments[1:]))
    return grade_command(arguments)


def grade_command(argv: Sequence[str]) -> int:
    """Grade one submission: ``diffgrade [SUBMISSION] [options]``."""
    exercise = diff_attention()
    parser = build_parser(tuple(exercise.tiers), exercise.default_submission, exercise.default_reference)
    args = parser.parse_args(argv)
    for option in ("json", "html"):
        target = getattr(args, option)
        if target.exists() and not target.is_file():
            parser.error(f"argument --{option}: must name a regular file (got {str(target)!r})")
    if args.json.resolve() == args.html.resolve():
        parser.error(f"arguments --json and --html must name different files (both are {args.json})")
    reference, no_reference_reason = _reference(args, Path(exercise.default_reference), parser)
    options = RunOptions(
        submission=args.submission,
        seed=args.seed if args.seed is not None else secrets.randbelow(MAX_SEED + 1),
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
    try:
        run = grade(exercise, options)
        document = report.build(exercise, run)
        pages = {args.json: report.to_json(document), args.html: report.render_html(document)}
    except UsageError as exc:
        return _fail(EXIT_USAGE, str(exc))
    except InternalError as exc:
        return _fail(EXIT_INTERNAL, f"internal error: {exc}")
    except KeyboardInterrupt:
        return _fail(130, "interrupted; no report was written")
    except Exception as exc:  # the promise is: never a traceback at the user
        return _fail(EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    try:
        for path, text in pages.items():
            report.write_atomic(path, text)
    except OSError as exc:
        return _fail(EXIT_USAGE, f"cannot write the report {exc.filename or path}: {exc.strerror}")
    if not args.quiet:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        summary = report.render_text(document, [report.printable_path(p) for p in (args.json, args.html)], color=color)
        try:
            sys.stdout.write(summary.encode(sys.stdout.encoding or "utf-8", errors="replace").decode(sys.stdout.encoding or "utf-8"))
            sys.stdout.flush()
        except BrokenPipeError:  # e.g. piped into head: the reports are written, that is enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if document["status"] == "error":
        return EXIT_INTERNAL
    return EXIT_PASSED if document["status"] == "passed" else EXIT_FAILED


def _fail(code: int, message: str) -> int:
    print(f"diffgrade: {message}", file=sys.stderr)
    return code


def entry_point() -> NoReturn:
    """Console-script entry point."""
    sys.exit(main())
