"""Which exercises are installed, and which one a submission is for.

The harness names no exercise anywhere else. The built-in exercises are listed
here; any installed distribution adds more by declaring, in its metadata, an
entry point in the group ``diffgrade.exercises`` whose object is a function
returning an :class:`~grader.core.exercise.Exercise` (the mechanism pytest uses
for its plugins)::

    [project.entry-points."diffgrade.exercises"]
    softmax = "my_package.softmax:exercise"

A submission is matched to an exercise by the top-level names its source
defines, read without running it (:func:`defined_names`).
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Iterable

from grader.core.exercise import Exercise

ENTRY_POINT_GROUP = "diffgrade.exercises"
# Built-in exercises: name -> "module:function" returning the Exercise. The first is the default.
BUILT_IN: dict[str, str] = {
    "diff_attention": "grader.exercises.diffattn:exercise",
    "diff_v2": "grader.exercises.diffv2:exercise",
}
DEFAULT = next(iter(BUILT_IN))


class ExerciseError(Exception):
    """No exercise (or more than one) fits what was asked; the message says which were available."""


@dataclass(frozen=True)
class Entry:
    """One installed exercise, not yet loaded: its name and where its factory lives."""

    name: str
    target: str  # "module:function"
    origin: str  # "built-in" or the distribution that registered it

    def load(self) -> Exercise:
        """Import the factory and build the exercise; a broken plug-in is an ExerciseError."""
        module, _, function = self.target.partition(":")
        try:
            factory: Callable[[], Exercise] = getattr(importlib.import_module(module), function)
            exercise = factory()
        except Exception as exc:  # a plug-in is third-party code: say which one failed, and how
            raise ExerciseError(f"the exercise {self.name!r} ({self.origin}, {self.target}) cannot be loaded: "
                                f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
        if not isinstance(exercise, Exercise):
            raise ExerciseError(f"the exercise {self.name!r} ({self.target}) must return an Exercise "
                                f"(got {exercise!r} that is a {type(exercise).__name__})")  # fmt: skip
        if exercise.name != self.name:
            raise ExerciseError(f"the exercise registered as {self.name!r} ({self.target}) calls itself {exercise.name!r}")
        return exercise


def entries() -> dict[str, Entry]:
    """Every installed exercise by name: the built-in ones, then the registered plug-ins (sorted by name)."""
    found = {name: Entry(name, target, "built-in") for name, target in BUILT_IN.items()}
    for point in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        if point.name not in found:  # a plug-in cannot replace a built-in exercise
            origin = point.dist.name if point.dist is not None else "an installed package"
            found[point.name] = Entry(point.name, point.value, origin)
    return found


def named(name: str) -> Exercise:
    """The installed exercise called ``name`` (a built-in one without scanning the installed packages' entry points)."""
    if name in BUILT_IN:  # a plug-in cannot replace it, so no scan can change the answer
        return Entry(name, BUILT_IN[name], "built-in").load()
    known = entries()
    if name not in known:
        raise ExerciseError(f"no exercise is called {name!r} (installed: {', '.join(known)}; see diffgrade exercises)")
    return known[name].load()


def defined_names(source: str) -> tuple[set[str], set[str]]:
    """The names a module's top level binds (functions, classes, assignments, imports), and which of them
    are functions or classes defined there, without running it.

    A source Python cannot parse still shows its ``def`` lines, so a submission
    with a syntax error is matched all the same (and then graded 0 with the reason).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        found = set(re.findall(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)", source, re.M))
        return found, found
    names: set[str] = set()
    functions: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            functions.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names | functions, functions


def matching(sources: Iterable[str], candidates: Iterable[Exercise]) -> Exercise:
    """The one exercise whose functions ``sources`` define most often.

    Each source votes for the exercises that share the most functions with it;
    the exercise with the most votes wins. A source that defines no function
    at all (empty, not text, a script, a star import) cannot vote; when no
    source can, the default exercise is chosen, whose grading then says what
    is wrong with the file. Functions defined but none of an exercise's, or a
    tie, is an ExerciseError that names the candidates and their functions.
    """
    exercises = list(candidates)
    votes = dict.fromkeys((e.name for e in exercises), 0)
    voters = 0
    for source in sources:
        names, functions = defined_names(source)
        shared = {e.name: len(names & set(e.functions)) for e in exercises}
        best = max(shared.values(), default=0)
        voters += bool(functions) or best > 0
        for name, count in shared.items():
            votes[name] += int(best > 0 and count == best)
    listing = "; ".join(f"{e.name}: {', '.join(e.functions)}" for e in exercises)
    top = max(votes.values(), default=0)
    winners = [e for e in exercises if votes[e.name] == top]
    default = [e for e in exercises if e.name == DEFAULT]
    if voters == 0 and default:
        return default[0]
    if top == 0:
        raise ExerciseError(f"the submission defines none of the functions of an installed exercise ({listing}); "
                            "pass --exercise NAME")  # fmt: skip
    if len(winners) > 1:
        raise ExerciseError(f"cannot tell which exercise the submission is for: it fits "
                            f"{' and '.join(e.name for e in winners)} equally ({listing}); pass --exercise NAME")  # fmt: skip
    return winners[0]


def loadable() -> tuple[list[Exercise], list[str]]:
    """Every installed exercise that loads, and a sentence for each one that does not."""
    exercises, problems = [], []
    for entry in entries().values():
        try:
            exercises.append(entry.load())
        except ExerciseError as exc:
            problems.append(str(exc))
    return exercises, problems


def for_sources(sources: Iterable[str]) -> Exercise:
    """The installed exercise that ``sources`` (one submission, or a class) are for; see :func:`matching`."""
    exercises, problems = loadable()
    try:
        return matching(sources, exercises)
    except ExerciseError as exc:
        raise ExerciseError(" ".join([str(exc), *problems])) from None
