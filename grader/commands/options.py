"""What every ``diffgrade`` command shares: exit codes, argument types, the grading options, the exercise.

Errors reach the user as one line on stderr (:func:`fail`, :class:`Parser`),
never as a traceback.
"""

from __future__ import annotations

import argparse
import math
import secrets
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn

from grader.core import registry
from grader.core.exercise import Exercise
from grader.core.session import RunOptions, UsageError, read_submission
from grader.reports.audience import AUDIENCES
from grader.worker.client import MiB, WorkerLimits

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
MAX_SEED = 2**32 - 1
DEFAULT_MEMORY_MIB = (WorkerLimits.address_space_bytes or 0) // MiB


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        """Report a usage error in one line and exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def bounded(convert: Callable[[str], Any], noun: str, accept: Callable[[Any], bool], bound: str) -> Callable[[str], Any]:
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


seed_number = bounded(int, "an integer", lambda v: 0 <= v <= MAX_SEED, f"in [0, {MAX_SEED}]")
positive = bounded(float, "a number", lambda v: 0 < v < 1e9, "positive and finite")
whole = bounded(int, "a whole number", lambda v: 1 <= v < 10**9, "at least 1")
score = bounded(float, "a number", lambda v: math.isfinite(v) and v >= 0, "finite and at least 0")


def fresh_seed() -> int:
    """A seed for a run that was not given one."""
    return secrets.randbelow(MAX_SEED + 1)


def fail(code: int, message: str) -> int:
    """Print ``diffgrade: message`` on stderr and return ``code``."""
    print(f"diffgrade: {message}", file=sys.stderr)
    return code


def add_exercise_option(parser: argparse.ArgumentParser, when_absent: str) -> None:
    """``--exercise NAME``; ``when_absent`` says how the command chooses without it."""
    parser.add_argument("--exercise", metavar="NAME",
                        help=f"the exercise to grade against (see diffgrade exercises; default: {when_absent})")  # fmt: skip


def chosen_exercise(args: argparse.Namespace, parser: argparse.ArgumentParser, submissions: Iterable[Path] = ()) -> Exercise:
    """The exercise named by --exercise; without it, the one ``submissions`` are for (the default one when there are none).

    Any problem (an unknown name, a broken plug-in, no exercise or two that fit) is a usage error.
    """
    try:
        if args.exercise is not None:
            return registry.named(args.exercise)
        paths = list(submissions)
        if not paths:
            return registry.named(registry.DEFAULT)
        return registry.for_sources(_text_of(path) for path in paths)
    except registry.ExerciseError as exc:
        parser.error(f"argument --exercise: {exc}")


def _text_of(path: Path) -> str:
    """The source a submission's functions are read from: as graded, or else its bytes as far as they decode."""
    try:
        submission = read_submission(path)
    except UsageError:
        return ""
    if submission.source is not None:
        return submission.source
    try:
        return path.read_bytes()[: 4 * MiB].decode("utf-8", errors="replace")
    except OSError:
        return ""


def add_grading_options(parser: argparse.ArgumentParser, audience: str = "student") -> None:
    """The options shared by ``diffgrade`` and ``diffgrade batch``: what to run, limits, audience."""
    parser.add_argument("--seed", type=seed_number, metavar="N",
                        help="seed for the random inputs (default: a fresh one, recorded in the report)")
    parser.add_argument("--tiers", metavar="T1,T2",
                        help="comma-separated tiers to run (default: every tier of the exercise)")
    parser.add_argument("--reference", type=Path, metavar="PATH",
                        help="reference implementation that draws the experiment's preview curve "
                        "(default: the exercise's reference, e.g. reference/diff_attention.py, if it exists)")
    parser.add_argument("--no-preview", action="store_true",
                        help="do not run the reference for the preview curve (faster)")
    limits = parser.add_argument_group("limits on the submission's worker")
    limits.add_argument("--call-timeout", type=positive, default=WorkerLimits.call_timeout_s, metavar="SECONDS",
                        help=f"wall-clock limit for each call (default: {WorkerLimits.call_timeout_s:g})")
    limits.add_argument("--time-budget", type=positive, default=WorkerLimits.budget_s, metavar="SECONDS",
                        help=f"wall-clock budget for the whole submission (default: {WorkerLimits.budget_s:g})")
    limits.add_argument("--memory-limit", type=positive, default=float(DEFAULT_MEMORY_MIB), metavar="MIB",
                        help=f"address-space limit of the worker (default: {DEFAULT_MEMORY_MIB})")
    limits.add_argument("--cpu-limit", type=whole, default=WorkerLimits.cpu_seconds, metavar="SECONDS",
                        help=f"CPU-time limit of each worker process (default: {WorkerLimits.cpu_seconds})")
    limits.add_argument("--process-limit", type=whole, default=WorkerLimits.max_processes, metavar="N",
                        help=f"processes and threads the worker may run, when run as root (default: {WorkerLimits.max_processes})")
    limits.add_argument("--no-isolation", action="store_true",
                        help="run the worker without namespaces or a user switch (debugging only; the report says so)")
    parser.add_argument("--audience", choices=AUDIENCES, default=audience,
                        help="who every report is for: student shows hidden checks with their title, "
                        f"status and points only, not their messages; instructor shows everything (default: {audience})")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")  # fmt: skip


def _tiers(text: str | None, known: tuple[str, ...], parser: argparse.ArgumentParser) -> tuple[str, ...]:
    if text is None:
        return known
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


def run_options(args: argparse.Namespace, parser: argparse.ArgumentParser, exercise: Exercise, seed: int | None = None) -> RunOptions:
    """The grading options from parsed arguments (see add_grading_options); ``seed`` when --seed was not given."""
    reference, no_reference_reason = _reference(args, Path(exercise.default_reference), parser)
    if args.seed is not None:
        seed = args.seed
    return RunOptions(
        submission=getattr(args, "submission", None) or Path(exercise.default_submission),
        seed=seed if seed is not None else fresh_seed(),
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
