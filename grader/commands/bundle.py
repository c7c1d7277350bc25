"""``diffgrade gradescope-bundle OUT.zip``: the autograder zip to upload to Gradescope.

The zip holds, at its root, ``setup.sh``, ``run_autograder`` and a README
rendered from the ``gradescope_*`` templates, and diffgrade's own source
(``pyproject.toml``, ``README.md``, ``grader/``, ``templates/``) in
``diffgrade/``, which setup.sh installs after the pinned torch. It is made from
a source checkout (the folder that holds the ``grader`` package and
pyproject.toml), without the reference implementation or the tests. Entries are
sorted and dated 1980-01-01, so the same source gives the same zip.
See docs/ci.md.
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import zipfile
from pathlib import Path
from typing import Sequence

import jinja2

from grader import CHECKOUT_DIR, __version__
from grader.commands import options as shared
from grader.core import registry
from grader.core.exercise import Exercise
from grader.reports import gradescope, report

TORCH_REQUIREMENT = "torch==2.13.0"
ROOT_VARIABLE = "DIFFGRADE_AUTOGRADER_ROOT"
DEFAULT_ROOT = "/autograder"
SOURCE_FOLDER = "diffgrade"
SOURCE_ITEMS = ("pyproject.toml", "README.md", "grader", "templates")
# What run_autograder passes to diffgrade besides the file and the outputs:
# no preview curve (the reference is not shipped), and the student's view of
# every report (hidden checks without their messages).
GRADE_OPTIONS = ("--no-preview", "--audience", "student")
SCRIPTS = {"setup.sh": "gradescope_setup.sh.j2", "run_autograder": "gradescope_run_autograder.j2"}
DOCUMENTS = {"README.md": "gradescope_README.md.j2"}
_EPOCH = (1980, 1, 1, 0, 0, 0)


class BundleError(Exception):
    """The bundle cannot be made here; the message says why."""


def checkout() -> Path:
    """The source checkout diffgrade runs from: the folder above the ``grader`` package."""
    root = CHECKOUT_DIR
    missing = [item for item in SOURCE_ITEMS if not (root / item).exists()]
    if missing:
        raise BundleError(f"gradescope-bundle needs diffgrade's source checkout, with {', '.join(SOURCE_ITEMS)} "
                          f"beside each other (got {root}, which lacks {', '.join(missing)})")  # fmt: skip
    return root


def source_files(root: Path) -> list[Path]:
    """The files of the source to ship, relative to ``root``, sorted; caches and hidden files left out."""
    found = []
    for item in SOURCE_ITEMS:
        paths = [root / item] if (root / item).is_file() else sorted((root / item).rglob("*"))
        for path in paths:
            relative = path.relative_to(root)
            if path.is_file() and path.suffix != ".pyc" and not any(p.startswith(".") or p == "__pycache__" for p in relative.parts):
                found.append(relative)
    return sorted(found)


def render(exercise: Exercise) -> dict[str, str]:
    """setup.sh, run_autograder and README.md, rendered for ``exercise`` (students upload a file like its stub)."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(report.template_dir())),
        autoescape=False, keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
    )  # fmt: skip
    values = {
        "version": __version__,
        "root": f"${{{ROOT_VARIABLE}:-{DEFAULT_ROOT}}}",
        "root_variable": ROOT_VARIABLE,
        "torch_requirement": TORCH_REQUIREMENT,
        "source_folder": SOURCE_FOLDER,
        "grade_options": shlex.join(("--exercise", exercise.name, *GRADE_OPTIONS)),
        "expected_name": Path(exercise.default_submission).name,
        "exercise": exercise.name,
        "fallback": json.dumps(gradescope.document(0.0, 0.0, "", [])),
    }
    return {name: environment.get_template(template).render(values) for name, template in {**SCRIPTS, **DOCUMENTS}.items()}


def build(root: Path, exercise: Exercise) -> bytes:
    """The zip's bytes: the rendered files at its root, the source of ``root`` under ``diffgrade/``."""
    entries = {name: text.encode("utf-8") for name, text in render(exercise).items()}
    entries.update({f"{SOURCE_FOLDER}/{path.as_posix()}": (root / path).read_bytes() for path in source_files(root)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.create_system = 3  # Unix, so that unzip applies the permissions below
            info.external_attr = (0o100755 if name in SCRIPTS else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, entries[name])
    return buffer.getvalue()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``diffgrade gradescope-bundle``."""
    parser = shared.Parser(
        prog="diffgrade gradescope-bundle",
        description="Make the autograder zip for a Gradescope programming assignment: setup.sh installs "
        f"{TORCH_REQUIREMENT} and this diffgrade; run_autograder grades the one .py or .ipynb file submitted "
        "and writes results/results.json.",
        epilog="Upload the zip as the assignment's autograder (100 points). Exit codes: 0 written, "
        "2 usage error or no source checkout. See docs/ci.md.",
    )
    parser.add_argument("out", type=Path, metavar="OUT.zip", help="where to write the zip")
    shared.add_exercise_option(parser, registry.DEFAULT)
    return parser


def main(argv: Sequence[str]) -> int:
    """Run ``diffgrade gradescope-bundle OUT.zip`` and return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.out.suffix.lower() != ".zip":
        parser.error(f"argument OUT.zip: must end in .zip (got {str(args.out)!r})")
    if args.out.exists() and not args.out.is_file():
        parser.error(f"argument OUT.zip: must name a regular file (got {str(args.out)!r})")
    try:
        archive = build(checkout(), shared.chosen_exercise(args, parser))
        report.write_atomic(args.out, archive)
    except BundleError as exc:
        return shared.fail(shared.EXIT_USAGE, str(exc))
    except OSError as exc:
        return shared.fail(shared.EXIT_USAGE, f"cannot write {exc.filename or args.out}: {exc.strerror}")
    print(f"wrote {report.printable_path(args.out)}: upload it as the autograder of a Gradescope programming assignment")
    return shared.EXIT_PASSED
