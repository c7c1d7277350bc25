"""What the harness needs to know about an exercise, and nothing more.

An exercise is a package that provides an :class:`Exercise` (see
docs/authoring.md): the functions a submission must define, the folder of its
pytest checks, the titles of its tiers, where its stub, task statement and
reference live, an optional experiment run on both the submission and the
reference, and what its workers should warm up. The harness (worker, session,
scoring, reports, commands) knows only this; :mod:`grader.core.registry`
finds the installed exercises.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from grader.core.experiment import Frame, Measured
from grader.worker.client import Worker

if TYPE_CHECKING:
    from grader.core.plugin import GradingContext
    from grader.toolkit.rootcause import Evidence

# An experiment takes a loaded worker and the run's seed and returns what that
# implementation measured (grader.core.experiment), or raises
# ExperimentUnavailable with a sentence saying why not. Its frame gives, for a
# seed, what every run of it shares (panels, axes, truth); the harness puts the
# two together into the report's section (docs/report-schema.md, "experiment").
Experiment = Callable[[Worker, int], Measured]
ExperimentFrame = Callable[[int], Frame]
# A handout builder takes a seed and returns the files it adds to the student
# handout beside the stub and the task statement: relative path -> text.
HandoutBuilder = Callable[[int], dict[str, str]]
# A diagnosis takes the grading context of a submission some of whose checks failed, and the report's
# check objects, and returns what it found for the root causes (grader/core/diagnosis.py).
Diagnose = Callable[["GradingContext", list[dict[str, Any]]], "Evidence"]


class ExperimentUnavailable(Exception):
    """An experiment could not produce its curves; the message says why."""


@dataclass(frozen=True)
class Exercise:
    """The exercise-specific half of a grading run."""

    name: str  # how --exercise names it: lowercase letters, digits and underscores
    title: str  # one line, for listings and reports
    version: str  # recorded in every report: a change of checks or oracle changes it
    functions: tuple[str, ...]
    checks_dir: Path
    tiers: dict[str, str]  # tier name -> title, in grading order
    default_submission: str  # the stub, relative to the repository's root
    statement: str  # the task statement the handout copies, relative to the repository's root
    default_reference: str
    experiment: Experiment | None = None
    experiment_frame: ExperimentFrame | None = None
    # Computes, for a seed, whatever every submission's checks share (the
    # oracle's expected values), so that a batch's forked graders inherit it;
    # what is optional (values computed on demand otherwise) stops once the
    # second argument, if given, returns True.
    prepare: Callable[[int, Callable[[], bool] | None], None] | None = None
    # Computes, for a seed, the expected values alone: a single run does it while its worker starts.
    expect: Callable[[int], None] | None = None
    handout: HandoutBuilder | None = None  # `diffgrade handout`: the public checks, runnable without the grader
    # A Python file with a function ``warm_up(torch)`` that the fork server runs once, before any
    # worker is forked, with the operations solutions commonly use: whatever they import lazily
    # is then loaded while the disk can still be read (workers cannot read the package folders).
    warm_up: Path | None = None
    diagnose: Diagnose | None = None  # probes and declarations behind the report's root causes


@dataclass(frozen=True)
class Preparation:
    """An exercise's ``expect`` and ``prepare``, from the modules of ``package`` that hold what runs share.

    Each module named in ``truths`` has ``prepare(seed)``, which computes the
    oracle's truths of its cases; the module ``catalogue`` has ``CATALOGUE``,
    whose ``prepare(seed, until)`` makes the misconceptions' predictions (see
    grader.toolkit.misconceptions). The modules are imported when first
    needed, so that listing the exercises imports none of them.
    """

    package: str
    truths: tuple[str, ...] = ("suite", "toy")
    catalogue: str = "misconceptions"

    def expect(self, seed: int) -> None:
        """The oracle's truths for every case graded with ``seed``."""
        for name in self.truths:
            importlib.import_module(f"{self.package}.{name}").prepare(seed)

    def prepare(self, seed: int, until: Callable[[], bool] | None = None) -> None:
        """What every submission graded with ``seed`` shares: the oracle's truths, then the misconceptions' predictions
        until ``until()`` is true (those left are made when a diagnosis needs them)."""
        self.expect(seed)
        importlib.import_module(f"{self.package}.{self.catalogue}").CATALOGUE.prepare(seed, until)
