"""The pytest side of a grading run: the check decorator, fixtures and metadata.

Checks are ordinary pytest test functions decorated with :func:`check`. They
take the ``grading`` fixture (a :class:`GradingContext`) and finish with
:meth:`GradingContext.conclude`, which records the message and fails the test
when the verdict is negative. The plugin hands every check's id, title, tier,
points, message and closest ratio to pytest-json-report as JSON-safe metadata.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

import pytest

from grader.core.experiment import Measured
from grader.toolkit.rootcause import Role
from grader.worker.client import Worker

if TYPE_CHECKING:
    from grader.toolkit.handout import Recipe

MARKER = "diffgrade_check"


class Verdict(Protocol):
    """Anything with ``ok``, ``message`` and ``worst_ratio`` (see grader.toolkit.compare.Comparison)."""

    @property
    def ok(self) -> bool: ...

    @property
    def message(self) -> str: ...

    @property
    def worst_ratio(self) -> float | None: ...


VISIBILITIES = ("public", "hidden")


def check(
    tier: str, points: float, title: str, visibility: str = "public", *, judges: Role | None = None, replay: Recipe | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test function as a graded check worth ``points`` in ``tier``: its one declaration.

    A ``hidden`` check shows students only its title, status and points (see
    grader.reports.audience); a ``public`` one shows everything. ``judges``
    says what it judges, of which functions and inputs, for the root causes
    (docs/diagnosis.md; None: every function's values). ``replay`` says how
    the student handout replays it (grader.toolkit.handout; None: the
    handout leaves it out, as it leaves out every hidden check).
    """
    if visibility not in VISIBILITIES:
        raise ValueError(f"'visibility' must be one of {VISIBILITIES} (got {visibility!r})")
    marked = {"tier": tier, "points": float(points), "title": title, "visibility": visibility, "judges": judges, "replay": replay}
    return getattr(pytest.mark, MARKER)(**marked)


def declared_id(item: pytest.Item) -> str:
    """The id of a check: its test function's name without ``test_``."""
    return item.name.removeprefix("test_")


@dataclass
class GradingContext:
    """Everything a check needs: the seed, the submission's worker and what is known about it."""

    seed: int
    worker: Worker | None  # None when the submission could not be read
    functions: dict[str, dict[str, Any]]
    load_failure: str | None = None
    source: str | None = None  # the submission's source as graded, for the diagnosis to quote its lines
    experiment: Measured | None = None  # the submission's run of the exercise's experiment, set by the check that makes it
    experiment_note: str | None = None
    roles: dict[str, Role] = field(default_factory=dict)  # what each check judges, from its declaration (set by the plugin)
    cache: dict[Any, Any] = field(default_factory=dict)
    notes: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    explanations: dict[str, dict[str, Any]] = field(default_factory=dict)
    current: str = ""

    def explain(self, *, hint: dict[str, Any] | None = None, counterexample: dict[str, Any] | None = None) -> None:
        """Attach a diagnosis hint or a shrunk counterexample to the running check (JSON-safe dicts)."""
        found = self.explanations.setdefault(self.current, {})
        found.update({k: v for k, v in (("hint", hint), ("counterexample", counterexample)) if v is not None})

    def conclude(self, verdict: Verdict) -> None:
        """Record the verdict's message; fail the running check unless it is positive."""
        ratio = verdict.worst_ratio
        self.notes[self.current] = (verdict.message, ratio if ratio is not None and math.isfinite(ratio) else None)
        if not verdict.ok:
            pytest.fail(verdict.message, pytrace=False)

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """Compute a value once per run (worker round trips shared by several checks)."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]


class GradingPlugin:
    """Registered with pytest.main for a session; provides the fixture and the metadata.

    ``context`` is the submission being graded (grader.core.checksession sets it
    before each submission's checks run).
    """

    def __init__(self, tiers: set[str]) -> None:
        self._context: GradingContext | None = None
        self.tiers = tiers
        self.roles: dict[str, Role] = {}

    @property
    def context(self) -> GradingContext:
        """The submission being graded."""
        if self._context is None:
            raise RuntimeError("no submission is being graded")
        return self._context

    @context.setter
    def context(self, context: GradingContext) -> None:
        context.roles = self.roles
        self._context = context

    @pytest.fixture
    def grading(self) -> GradingContext:
        """The grading context of the submission being graded."""
        return self.context

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Skip checks of unselected tiers (they stay in the report as skipped); keep what each check judges."""
        for item in items:
            marker = item.get_closest_marker(MARKER)
            if marker is not None and marker.kwargs.get("judges") is not None:
                self.roles[declared_id(item)] = marker.kwargs["judges"]
            if marker is None:
                item.add_marker(pytest.mark.skip(reason="not a graded check"))
            elif marker.kwargs["tier"] not in self.tiers:
                item.add_marker(pytest.mark.skip(reason=f"tier {marker.kwargs['tier']} was not selected"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """Fail every check at once when the submission did not load; insist that each check concludes."""
        self.context.current = item.nodeid
        if self.context.load_failure is not None:
            self.context.notes[item.nodeid] = (self.context.load_failure, None)
        result = yield
        if item.nodeid not in self.context.notes:
            raise RuntimeError(f"check {item.name} finished without calling grading.conclude()")
        return result

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """Fail a check without running it when the submission did not load."""
        if self.context.load_failure is not None:
            pytest.fail(self.context.load_failure, pytrace=False)
        return None

    def pytest_json_runtest_metadata(self, item: pytest.Item, call: pytest.CallInfo[None]) -> dict[str, Any]:
        """Id, title, tier, points, visibility, the recorded message and explanations, as JSON-safe values."""
        marker = item.get_closest_marker(MARKER)
        if marker is None:
            return {}
        described: dict[str, Any] = {
            "id": declared_id(item),
            "title": str(marker.kwargs["title"]),
            "tier": str(marker.kwargs["tier"]),
            "points": float(marker.kwargs["points"]),
            "visibility": str(marker.kwargs.get("visibility", "public")),
        }
        if call.when == "call":
            described["message"], described["worst_ratio"] = self.context.notes.get(item.nodeid, ("", None))
            described.update(self.context.explanations.get(item.nodeid, {}))
        if call.excinfo is not None and not call.excinfo.errisinstance((pytest.fail.Exception, pytest.skip.Exception)):
            described["internal_error"] = f"{call.excinfo.typename}: {call.excinfo.value}"
        return described


def declared_checks(package: str) -> dict[str, dict[str, Any]]:
    """Every check's declaration (tier, points, title, visibility, judges, replay) by id, in grading order, from the check modules of ``package``."""
    found: dict[str, dict[str, Any]] = {}
    modules = sorted(info.name for info in pkgutil.iter_modules(importlib.import_module(package).__path__) if info.name.startswith("test_"))
    for name in modules:
        module = importlib.import_module(f"{package}.{name}")
        for attribute, function in vars(module).items():
            for mark in getattr(function, "pytestmark", ()):
                if mark.name == MARKER:
                    found[attribute.removeprefix("test_")] = dict(mark.kwargs)
    return found
