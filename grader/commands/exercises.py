"""``diffgrade exercises``: list the installed exercises (built-in and registered plug-ins)."""

from __future__ import annotations

import json
from typing import Sequence

from grader.commands.options import EXIT_FAILED, EXIT_PASSED, Parser
from grader.core import registry


def build_parser() -> Parser:
    """The argument parser of ``diffgrade exercises``."""
    parser = Parser(
        prog="diffgrade exercises",
        description="List the installed exercises: name, title, version, the functions a submission defines, "
        f"and the default stub. Plug-ins register under the entry-point group {registry.ENTRY_POINT_GROUP} "
        "(docs/authoring.md).",
        epilog="Exit codes: 0 listed, 1 some exercise could not be loaded (it is listed with the reason), 2 usage error.",
    )
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    return parser


def main(argv: Sequence[str]) -> int:
    """List the exercises; return the exit code."""
    args = build_parser().parse_args(argv)
    rows: list[dict[str, object]] = []
    for entry in registry.entries().values():
        try:
            exercise = entry.load()
        except registry.ExerciseError as exc:
            rows.append({"name": entry.name, "origin": entry.origin, "problem": str(exc)})
            continue
        rows.append({"name": exercise.name, "title": exercise.title, "version": exercise.version,
                     "origin": entry.origin, "functions": list(exercise.functions), "stub": exercise.default_submission,
                     "default": exercise.name == registry.DEFAULT})  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            if "problem" in row:
                print(f"{row['name']}  ({row['origin']}): cannot be loaded: {row['problem']}")
                continue
            default = ", the default" if row["default"] else ""
            print(f"{row['name']}  {row['title']} (version {row['version']}, {row['origin']}{default})")
            print(f"    functions: {', '.join(row['functions'])}")  # type: ignore[arg-type]
            print(f"    stub:      {row['stub']}")
    return EXIT_FAILED if any("problem" in row for row in rows) else EXIT_PASSED
