"""One pytest session over the exercise's checks, in which submissions are graded in turn.

pytest's configuration and collection cost about as much as running the
checks themselves, so they happen once per process: :func:`run_session`
starts ``pytest.main``, and from inside the session's test loop hands its
``body`` a function that runs every collected check for one submission (one
:class:`GradingContext`) and returns pytest-json-report's records of them.
``diffgrade FILE`` grades one submission that way; each grading process of a
batch grades one student after another.

Running the same items again is what pytest's own runner allows for reruns;
each submission gets a fresh pytest-json-report plugin, so that no record
of one submission reaches another.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, Callable, TypeVar
from unittest import mock

import pytest
from pytest_jsonreport.plugin import Hooks as JSONReportHooks
from pytest_jsonreport.plugin import JSONReport

from grader.exercise import Exercise
from grader.plugin import GradingContext, GradingPlugin

T = TypeVar("T")
RunChecks = Callable[[GradingContext], list[dict[str, Any]]]

# pytest's plugins that grading has no use for: each costs time (the unittest
# plugin's import, the unraisable-exception plugin's forced garbage
# collections, the cache provider's writes beside the checks). The terminal
# plugin stays: pytest-json-report asks it for each test's status.
UNUSED_PLUGINS = ("cacheprovider", "unittest", "unraisableexception", "threadexception", "doctest", "junitxml",
                  "pastebin", "nose", "stepwise", "faulthandler", "logging", "tmpdir", "monkeypatch")  # fmt: skip


class CheckSessionError(Exception):
    """The checks could not run (a check module failed to import, or pytest refused its arguments)."""


class _SubmissionReport(JSONReport):
    """pytest-json-report's plugin for one submission; the session declared the plugin's hooks already."""

    def pytest_addhooks(self, pluginmanager: pytest.PytestPluginManager) -> None:
        """Declared once per session (by :class:`_Session`): declaring them again is an error."""


class _Session:
    """The plugin that owns the test loop: it calls ``body`` once, with :meth:`run`."""

    def __init__(self, body: Callable[[RunChecks], Any], grading: GradingPlugin) -> None:
        self.body = body
        self.grading = grading
        self.session: pytest.Session | None = None
        self.broken: list[str] = []
        self.result: Any = None
        self.error: BaseException | None = None

    def pytest_addhooks(self, pluginmanager: pytest.PytestPluginManager) -> None:
        """Declare pytest-json-report's hooks, which the checks' metadata hook implements."""
        pluginmanager.add_hookspecs(JSONReportHooks)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember a check module that failed to import."""
        if report.failed:
            self.broken.append(str(report.longrepr))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        """Grade whatever ``body`` grades, instead of running the items once."""
        self.session = session
        try:
            if self.broken:
                raise CheckSessionError(f"a check module failed to import: {self.broken[0][-2000:]}")
            self.result = self.body(self.run)
        except BaseException as exc:  # pytest would swallow it: it is raised again after pytest.main
            self.error = exc
        return True

    def run(self, context: GradingContext) -> list[dict[str, Any]]:
        """Run every collected check for one submission; return pytest-json-report's test records."""
        assert self.session is not None
        config = self.session.config
        report = _SubmissionReport(config)
        config.pluginmanager.register(report)
        self.grading.context = context
        try:
            report.pytest_sessionstart(self.session)
            items = self.session.items
            for index, item in enumerate(items):
                following = items[index + 1] if index + 1 < len(items) else None
                item.ihook.pytest_runtest_protocol(item=item, nextitem=following)
            report.pytest_sessionfinish(self.session)
        finally:
            config.pluginmanager.unregister(report)
            if getattr(config, "_json_report", None) is report:  # set by the plugin's pytest_configure
                del config._json_report
            terminal = config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:  # it keeps every test report of the session: a long one would grow
                terminal.stats.clear()
        assert report.report is not None
        return list(report.report["tests"])


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
    grading = GradingPlugin(None, tiers)
    owner = _Session(body, grading)
    only_ours = mock.patch.dict(os.environ, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # whatever else is installed
    with only_ours, contextlib.redirect_stdout(io.StringIO()) as output:
        code = pytest.main(_pytest_args(exercise), plugins=[owner, grading])
    if owner.error is not None:
        raise owner.error
    if owner.session is None:
        raise CheckSessionError(f"the checks could not run (pytest exit code {int(code)}):\n{output.getvalue()[-2000:]}")
    return owner.result
