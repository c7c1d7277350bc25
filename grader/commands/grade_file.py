"""``diffgrade [SUBMISSION]``: grade one file, write its reports, return the exit code.

Exit codes: 0 every check passed; 1 graded, something failed (a submission
that does not import is graded 0); 2 usage error (one line on stderr);
3 internal grader error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from grader import __version__
from grader.commands.options import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_PASSED,
    EXIT_USAGE,
    Parser,
    add_exercise_option,
    add_grading_options,
    chosen_exercise,
    fail,
    run_options,
    score,
)
from grader.core.session import InternalError, UsageError, grade
from grader.reports import gradescope, junit, markdown, report
from grader.reports.audience import for_audience
from grader.worker.client import ForkServer

# Summaries written only when asked for: option -> writer from the report document to the file's text.
SUMMARY_WRITERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "gradescope": gradescope.to_text,
    "junit": junit.to_xml,
    "markdown": markdown.summary,
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``diffgrade``."""
    parser = Parser(
        prog="diffgrade",
        description="Grade a submission of an exercise (by default differential attention): "
        "T1 contract, T2 values, T3 gradients.",
        epilog="Exit codes: 0 all checks passed, 1 some check failed (with --fail-under: 0 when the score "
        "reaches SCORE, 1 below it), 2 usage error, 3 internal grader error. "
        "Other commands: diffgrade exercises, diffgrade batch SUBMISSIONS --out DIR, "
        "diffgrade gradescope-bundle OUT.zip, diffgrade handout OUT_DIR (see their --help).",
    )
    parser.add_argument("submission", nargs="?", type=Path,
                        help="the .py file or .ipynb notebook to grade (default: the exercise's stub, "
                        "exercise/diff_attention.py without --exercise)")
    add_exercise_option(parser, "the exercise whose functions the submission defines")
    parser.add_argument("--json", type=Path, default=Path("report.json"), metavar="PATH",
                        help="where to write the JSON report (default: report.json)")
    parser.add_argument("--html", type=Path, default=Path("report.html"), metavar="PATH",
                        help="where to write the HTML report (default: report.html)")
    add_grading_options(parser)
    ci = parser.add_argument_group("summaries for CI and Gradescope (docs/ci.md)")
    ci.add_argument("--gradescope", type=Path, metavar="PATH",
                    help="also write a Gradescope results.json: one test per check that ran")
    ci.add_argument("--junit", type=Path, metavar="PATH",
                    help="also write JUnit XML: one test suite per tier, one test case per check")
    ci.add_argument("--markdown", type=Path, metavar="PATH",
                    help="also write a Markdown summary, e.g. for $GITHUB_STEP_SUMMARY")
    ci.add_argument("--fail-under", type=score, metavar="SCORE",
                    help="exit 0 when the score is at least SCORE points and 1 below it, "
                    "instead of 1 whenever a check fails")
    parser.add_argument("--version", action="version", version=f"diffgrade {__version__}")
    return parser  # fmt: skip


def main(argv: Sequence[str], forks: ForkServer | None = None) -> int:
    """Grade one submission: ``diffgrade [SUBMISSION] [options]``; ``forks``: a fork server already started."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.submission is not None and not args.submission.exists():
        return fail(EXIT_USAGE, f"submission not found: {args.submission}")
    if args.submission is not None and args.submission.is_dir():
        return fail(EXIT_USAGE, f"submission must be a .py or .ipynb file, got a directory: {args.submission}")
    exercise = chosen_exercise(args, parser, [args.submission] if args.submission is not None else [])
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
