"""``python -m grader``: the same as the ``diffgrade`` command."""

from grader.commands.launch import entry_point

entry_point()
