"""One pytest session over the exercise's checks, in which submissions are graded in turn.

pytest's configuration and collection cost about as much as running the
checks themselves, so they happen once per process: :func:`run_session`
starts ``pytest.main``, and from inside the session's test loop hands its
``body`` a function that runs every collected check for one submission (one
:class:`GradingContext`) and returns pytest-json-report's records of them.
``diffgrade FILE`` grades one submission that way; each grading process of a
batch grades one student after another.

Running the same items again is what pytest's own runner allows for reruns;
the session's pytest-json-report plugin is emptied before each submission,
so that no record of one submission reaches another.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, Callable, TypeVar
from unittest import mock

import pytest
from pytest_jsonreport.plugin import JSONReport

from grader.core.exercise import Exercise
from grader.core.plugin import GradingContext, GradingPlugin

T = TypeVar("T")
RunChecks = Callable[[GradingContext], list[dict[str, Any]]]

# pytest's plugins that grading has no use for: each costs time (the unittest
# plugin's import, the unraisable-exception plugin's forced garbage
# collections, the cache provider's writes beside the checks). The terminal
# plugin stays: pytest-json-report asks it for each test's status.
UNUSED_PLUGINS = ("cacheprovider", "unittest", "unraisableexception", "threadexception", "doctest", "junitxml",
                  "pastebin", "nose", "stepwise", "faulthandler", "logging", "tmpdir", "monkeypatch")  # fmt: skip


class CheckSessionError(Exception):
    """The checks cannot run: a check module failed to import, pytest refused its arguments, or an
    internal error stopped a submission's checks half-way (the session can grade nobody after it)."""


class _SubmissionReport(JSONReport):
    """pytest-json-report's plugin, emptied before each submission.

    One instance serves the whole session: pytest keeps every plugin ever
    registered in a session (with all its records), so registering one per
    submission would grow a long session's memory without end.
    """

    def restart(self, session: pytest.Session) -> None:
        """Forget the previous submission's records (the constructor's own state) and start timing the next."""
        JSONReport.__init__(self, session.config)
        self.pytest_sessionstart(session)


class _Session:
    """The plugin that owns the test loop: it calls ``body`` once, with :meth:`run`."""

    def __init__(self, body: Callable[[RunChecks], Any], grading: GradingPlugin, report: _SubmissionReport) -> None:
        self.body = body
        self.grading = grading
        self.report = report
        self.session: pytest.Session | None = None
        self.unimportable: list[str] = []
        self.broken: str | None = None  # what stopped a submission's checks half-way
        self.result: Any = None
        self.error: BaseException | None = None

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember a check module that failed to import."""
        if report.failed:
            self.unimportable.append(str(report.longrepr))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        """Grade whatever ``body`` grades, instead of running the items once."""
        self.session = session
        try:
            if self.unimportable:
                raise CheckSessionError(f"a check module failed to import: {self.unimportable[0][-2000:]}")
            self.result = self.body(self.run)
        except BaseException as exc:  # pytest would swallow it: it is raised again after pytest.main
            self.error = exc
        return True

    def run(self, context: GradingContext) -> list[dict[str, Any]]:
        """Run every collected check for one submission; return pytest-json-report's test records.

        An internal error that escapes pytest's own handling of a check (a
        fault in a hook) leaves the session half-way through its items: it is
        raised as CheckSessionError, and so is every later call.
        """
        assert self.session is not None
        if self.broken is not None:
            raise CheckSessionError(f"an earlier internal error stopped this check session ({self.broken})")
        self.grading.context = context
        self.report.restart(self.session)
        items = self.session.items
        try:
            for index, item in enumerate(items):
                following = items[index + 1] if index + 1 < len(items) else None
                item.ihook.pytest_runtest_protocol(item=item, nextitem=following)
            self.report.pytest_sessionfinish(self.session)
        except Exception as exc:
            self.broken = f"{type(exc).__name__}: {exc}"
            raise CheckSessionError(f"the checks stopped with an internal error ({self.broken})") from exc
        finally:
            terminal = self.session.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:  # it keeps every test report of the session: a long one would grow
                terminal.stats.clear()
        assert self.report.report is not None
        return list(self.report.report["tests"])


def _pytest_args(exercise: Exercise) -> list[str]:
    checks = exercise.checks_dir
    return [
        *(argument for plugin in UNUSED_PLUGINS for argument in ("-p", f"no:{plugin}")),
        "--capture=sys",
        str(checks),
        "-c", str(checks / "pytest.ini"),
        "--rootdir", str(checks),
        "--noconftest",
        "--import-mode=importlib",
        "-p", "pytest_jsonreport.plugin",  # its options, which its plugin class reads
        "--json-report-file=none",
        "-q",
    ]  # fmt: skip


def run_session(exercise: Exercise, tiers: set[str], body: Callable[[RunChecks], T]) -> T:
    """Start one pytest session over ``exercise``'s checks, call ``body(run)`` inside it, return what it returns.

    ``run(context)`` runs every check (those of unselected ``tiers`` are
    skipped) for the submission behind ``context``. What ``body`` raises is
    raised here; a session that cannot start raises :class:`CheckSessionError`.
    """
    grading = GradingPlugin(tiers)
    report = _SubmissionReport()
    owner = _Session(body, grading, report)
    only_ours = mock.patch.dict(os.environ, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # whatever else is installed
    with only_ours, contextlib.redirect_stdout(io.StringIO()) as output:
        code = pytest.main(_pytest_args(exercise), plugins=[owner, grading, report])
    if owner.error is not None:
        raise owner.error
    if code == pytest.ExitCode.INTERRUPTED and owner.session is None:
        raise KeyboardInterrupt
    if owner.session is None:
        raise CheckSessionError(f"the checks could not run (pytest exit code {int(code)}):\n{output.getvalue()[-2000:]}")
    return owner.result
