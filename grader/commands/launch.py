"""The ``diffgrade`` command's entry point: start the fork server first, then everything else.

Grading one file, or a class, waits above all for the fork server's torch
import. This module imports only the standard library and
:mod:`grader.worker.forks`, so the server starts within milliseconds of the
command, and the grader's own imports (pytest, numpy, jinja2, about 0.35 s)
overlap its warm-up.
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn, Sequence

from grader.worker.forks import ForkServer

# Other commands, ``diffgrade NAME ...``: each is "module:function" taking the
# remaining arguments and returning an exit code. Imported only when used.
COMMANDS: dict[str, str] = {
    "batch": "grader.commands.batch:main",
    "exercises": "grader.commands.exercises:main",
    "gradescope-bundle": "grader.commands.bundle:main",
    "handout": "grader.commands.handout:main",
}
GRADING_COMMANDS = ("batch",)  # those whose function also takes the fork server: function(argv, forks)
NO_GRADING = ("-h", "--help", "--version")


def grades(argv: Sequence[str]) -> bool:
    """Whether these arguments grade (a file or a class) rather than run another command or print help."""
    command = argv[0] if argv and argv[0] in COMMANDS else None
    return command in (None, *GRADING_COMMANDS) and not any(a in NO_GRADING for a in argv)


def run(argv: Sequence[str], forks: ForkServer | None = None) -> int:
    """Run the command ``argv`` names (grading one file when it names none) and return its exit code."""
    arguments = list(argv)
    name = arguments[0] if arguments and arguments[0] in COMMANDS else None
    module, function = COMMANDS.get(name or "", "grader.commands.grade_file:main").split(":")
    command = getattr(importlib.import_module(module), function)
    if name is None:
        return int(command(arguments, forks))
    return int(command(arguments[1:], forks) if name in GRADING_COMMANDS else command(arguments[1:]))


def entry_point() -> NoReturn:
    """Console-script entry point (``diffgrade``, ``python -m grader``)."""
    argv = sys.argv[1:]
    forks = None
    if grades(argv):
        try:
            forks = ForkServer()
        except OSError:
            forks = None  # the grading run starts its own and reports the failure properly
    try:
        code = run(argv, forks)
    finally:
        if forks is not None:
            forks.close()
    sys.exit(code)
