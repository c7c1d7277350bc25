"""What the harness needs to know about an exercise, and nothing more.

An exercise is a folder under ``grader/`` that provides an :class:`Exercise`:
the functions a submission must define, the folder of pytest checks, the
titles of its tiers, and an optional experiment run on both the submission and
the reference. The harness (worker, session, scoring, reports) knows only this.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grader.worker.client import Worker

# An experiment takes a loaded worker and the run's seed and returns JSON-ready
# curves, or raises ExperimentUnavailable with a sentence saying why not. Its
# frame gives, for a seed, the fields shared by every run of it (axes, truth).
Experiment = Callable[[Worker, int], dict[str, Any]]
ExperimentFrame = Callable[[int], dict[str, Any]]
# A handout builder takes a seed and returns the files it adds to the student
# handout beside the stub and the task statement: relative path -> text.
HandoutBuilder = Callable[[int], dict[str, str]]


class ExperimentUnavailable(Exception):
    """An experiment could not produce its curves; the message says why."""


@dataclass(frozen=True)
class Exercise:
    """The exercise-specific half of a grading run."""

    name: str
    functions: tuple[str, ...]
    checks_dir: Path
    tiers: dict[str, str]  # tier name -> title, in grading order
    default_submission: str
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
