"""``python -m grader``: the same as the ``diffgrade`` command."""

from grader.cli import entry_point

entry_point()
