"""Finding a class's submissions in a folder or a zip archive.

A class is a folder, or a ``.zip`` of one, holding one submission per
student: either a file (``alice.py``, ``bob.ipynb``: the student is the file's
stem) or a folder (``carol/``: the student is the folder's name) with exactly
one such file in it. Anything a student may have named badly becomes a
problem of that student's entry, graded 0 with the reason; only an unusable
archive or folder is a usage error.

A file name is the student's to choose, newlines and escape sequences
included: every name shown (the student, and the names in a problem) goes
through :func:`grader.toolkit.safetext.line`, so that progress lines, the gradebook,
the summary and the reports show it on one line, its control characters as
visible escapes (``alice\\n::error``), and it can never start a line of its own.
"""

from __future__ import annotations

import hashlib
import re
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.toolkit import safetext

SUFFIXES = (".py", ".ipynb")
IGNORED = ("__MACOSX", "__pycache__")
MAX_ARCHIVE_MEMBERS = 20_000
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
RESERVED = {"grades.csv", "summary.json", "summary.html", "batch.json"}


class ClassError(Exception):
    """The class folder or archive cannot be used at all (a usage error)."""


@dataclass(frozen=True)
class Entry:
    """One student's submission, or why there is none to grade."""

    student: str
    folder: str  # the student's folder name under the batch's output folder
    path: Path | None
    problem: str | None = None

    def sha256(self) -> str | None:
        """SHA-256 of the submission's bytes (None when there is no file or it cannot be read)."""
        if self.path is None:
            return None
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None


def _visible(path: Path) -> bool:
    return not path.name.startswith(".") and path.name not in IGNORED


def _candidate(path: Path) -> bool:
    """A submission file: never a symbolic link, which could make the grader read a file outside the class."""
    return path.is_file() and not path.is_symlink() and path.suffix.lower() in SUFFIXES and _visible(path)


def _folder_entry(student: str, folder: Path) -> tuple[Path | None, str | None]:
    """The one submission file in a student's folder, or the problem with it."""
    found = sorted(p for p in folder.iterdir() if _candidate(p))
    if len(found) == 1:
        return found[0], None
    if not found:
        return None, f"the folder {safetext.line(folder.name)}/ holds no .py or .ipynb file"
    names = ", ".join(safetext.line(p.name) for p in found[:10]) + (f" and {len(found) - 10} more" if len(found) > 10 else "")
    return None, f"the folder {safetext.line(folder.name)}/ holds {len(found)} candidate files ({names}): keep exactly one"


def folder_name(student: str, taken: set[str]) -> str:
    """A safe, unique folder name for a student's reports."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", student).lstrip(".") or "student"
    if name in RESERVED:
        name = f"student-{name}"
    unique, number = name, 2
    while unique in taken:
        unique, number = f"{name}-{number}", number + 1
    taken.add(unique)
    return unique


def discover(root: Path) -> list[Entry]:
    """Every student's entry in a class folder, sorted by student name."""
    if not root.is_dir():
        raise ClassError(f"not a folder: {root}")
    try:
        children = sorted(p for p in root.iterdir() if _visible(p))
    except OSError as exc:
        raise ClassError(f"cannot list {root}: {exc.strerror}") from None
    found: list[tuple[str, Path, Path | None, str | None]] = []  # (student, entry, file, problem)
    for child in children:
        if child.is_symlink():
            student = child.stem if child.suffix.lower() in SUFFIXES else child.name
            link = f"{safetext.line(child.name)} is a symbolic link, which is not followed: put the file itself in the class folder"
            found.append((student, child, None, link))
        elif child.is_dir():
            found.append((child.name, child, *_folder_entry(child.name, child)))
        elif _candidate(child):
            found.append((child.stem, child, child, None))
    names = [student for student, *_ in found]
    entries: list[Entry] = []
    taken: set[str] = set()
    for student, child, path, problem in found:
        if names.count(student) > 1:  # alice.py beside alice.ipynb or alice/: each keeps its own row
            student = f"{student} ({child.name}{'/' if child.is_dir() else ''})"
        shown = safetext.line(student)
        entries.append(Entry(shown, folder_name(shown, taken), path, problem))
    if not entries:
        raise ClassError(f"no submissions in {root}: expected one .py or .ipynb file, or one folder, per student")
    return entries


def extract(archive: Path, into: Path) -> Path:
    """Unpack a class archive safely into ``into``; return the folder that holds the submissions.

    Refused: members with absolute paths or ``..``, links, and archives that
    expand beyond the size or member limits. A single top-level folder (as
    made by zipping a folder) is descended into.
    """
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = bundle.infolist()
            if len(members) > MAX_ARCHIVE_MEMBERS:
                raise ClassError(f"{archive} has {len(members)} members, over the limit of {MAX_ARCHIVE_MEMBERS}")
            total = sum(m.file_size for m in members)
            if total > MAX_ARCHIVE_BYTES:
                raise ClassError(f"{archive} expands to {total} bytes, over the limit of {MAX_ARCHIVE_BYTES}")
            for member in members:
                name = PurePosixPath(member.filename)
                if name.is_absolute() or ".." in name.parts or "\\" in member.filename:
                    raise ClassError(f"{archive} has a member outside the archive's folder: {member.filename!r}")
                if stat.S_ISLNK(member.external_attr >> 16):
                    raise ClassError(f"{archive} has a symbolic link, which is not accepted: {member.filename!r}")
            bundle.extractall(into)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        # corrupt data, an unsupported compression method, an encrypted member
        raise ClassError(f"{archive} is not a readable zip archive ({type(exc).__name__}: {exc})") from None
    except OSError as exc:
        raise ClassError(f"cannot unpack {archive}: {exc.strerror or exc}") from None
    top = [p for p in into.iterdir() if _visible(p)]
    if len(top) == 1 and top[0].is_dir():
        inside = [p for p in top[0].iterdir() if _visible(p)]
        one_students_folder = len([p for p in inside if _candidate(p)]) == 1 and not any(p.is_dir() for p in inside)
        if not one_students_folder:
            return top[0]
    return into
