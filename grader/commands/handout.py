"""``diffgrade handout OUT_DIR``: everything a student needs, and nothing they must not have.

OUT_DIR gets the exercise's stub and its task statement (``Exercise.statement``), at the same relative paths as in the repository, and the files the
exercise adds (``Exercise.handout``; for diff_attention the public checks'
runner, their precomputed data and a README). Never the reference, the
grader, its oracle, or a hidden check's inputs. The seed is recorded in the
handout; the exercise draws the handout's inputs so that no graded run, with
that seed or any other, gets the same ones (for diff_attention, see
``grader.toolkit.handout.inputs_seed``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from grader.commands import options as shared
from grader.reports import report


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``diffgrade handout``."""
    parser = shared.Parser(
        prog="diffgrade handout",
        description="Write the student handout: the stub, the task statement and a script that runs the public "
        "checks locally (torch and numpy only), with their inputs and expected results precomputed. "
        "No reference code, no grader, no hidden check.",
        epilog="Exit codes: 0 written, 2 usage error, 3 internal error.",
    )
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR",
                        help="the folder to write (created if missing; it must be empty unless --force is given)")
    parser.add_argument("--force", action="store_true",
                        help="write into OUT_DIR even if it is not empty, replacing files of the same names")
    parser.add_argument("--seed", type=shared.seed_number, metavar="N",
                        help="seed of the public checks' inputs (default: a fresh one, recorded in the handout); "
                        "the handout draws from a stream of its own, so grading with the same seed never reuses its inputs")
    shared.add_exercise_option(parser, "diff_attention")
    parser.add_argument("--exercise-dir", type=Path, metavar="DIR",
                        help="the folder holding the exercise's stub and task statement (default: the folder of the "
                        "exercise's stub, e.g. exercise/)")
    return parser  # fmt: skip


def main(argv: Sequence[str]) -> int:
    """Write the handout; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    exercise = shared.chosen_exercise(args, parser)
    if exercise.handout is None:
        parser.error(f"the exercise {exercise.name} has no handout")
    stub, statement = Path(exercise.default_submission), Path(exercise.statement)
    if args.exercise_dir is None:
        args.exercise_dir = stub.parent
    sources = {stub: args.exercise_dir / stub.name, statement: args.exercise_dir / statement.name}
    for source in sources.values():
        if not source.is_file():
            parser.error(f"not a file: {source} (run from the repository's root or pass --exercise-dir DIR)")
    _check_out_dir(args.out_dir, args.exercise_dir, args.force, parser)
    seed = args.seed if args.seed is not None else shared.fresh_seed()
    try:
        files = {str(target): source.read_text(encoding="utf-8") for target, source in sources.items()}
        files.update(exercise.handout(seed))
    except (OSError, UnicodeError) as exc:
        return shared.fail(shared.EXIT_USAGE, f"cannot read the exercise: {exc}")
    except Exception as exc:  # the promise is: never a traceback at the user
        return shared.fail(shared.EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    try:
        for name, text in files.items():
            report.write_atomic(args.out_dir / name, text)
    except OSError as exc:
        return shared.fail(shared.EXIT_USAGE, f"cannot write the handout: {exc.filename or args.out_dir}: {exc.strerror}")
    print(f"Wrote the handout (public checks drawn with seed {seed}, in the handout's own stream: "
          f"no graded run draws these inputs) to {report.printable_path(args.out_dir)}:")
    for name in sorted(files):
        print(f"  {name}")
    return shared.EXIT_PASSED


def _check_out_dir(out_dir: Path, exercise_dir: Path, force: bool, parser: argparse.ArgumentParser) -> None:
    """OUT_DIR is a folder or nothing yet, empty unless ``force``, and not around the folder the handout copies."""
    if out_dir.exists() and not out_dir.is_dir():
        parser.error(f"argument OUT_DIR: must be a folder (got a file: {out_dir})")
    if exercise_dir.resolve().is_relative_to(out_dir.resolve()):
        parser.error(f"argument OUT_DIR: must not hold the exercise folder it copies from (got {out_dir})")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        parser.error(f"argument OUT_DIR: {out_dir} is not empty (pass --force to write into it anyway)")
