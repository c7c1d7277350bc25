"""Run ``diffgrade`` commands one after another in one process, with one fork server: the suite's warm grader.

A test that only needs a file's report grades it here (``conftest.run_warm``)
instead of in a fresh ``python -m grader``, which would spend most of its two
seconds importing torch and computing the seed's expected values again. A
batch's grading process grades one student after another the same way, hostile
files included; the CLI's own process (exit codes, signals, attacks on the
grading process) is tested with fresh processes (``conftest.run_cli``).

Protocol: one JSON request per line on stdin, ``{"argv": [...], "cwd": "..."}``;
one JSON reply per line on the stdout the process started with, ``{"code": int,
"stdout": str, "stderr": str}``. The commands' own output is captured; file
descriptors 0 and 1 point at /dev/null while they run, so that nothing a
command or a child writes can mix with the replies.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def exit_code(exc: SystemExit) -> int:
    """The exit code a process ending with ``exc`` would have."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)  # sys.exit("message"): Python prints the message
    return 1


def main() -> None:
    """Serve requests until stdin closes."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.environ["NO_COLOR"] = "1"
    from grader.commands.launch import run
    from grader.worker.forks import ForkServer

    forks = ForkServer()
    try:
        for line in requests:
            request = json.loads(line)
            os.chdir(request["cwd"])
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = run(request["argv"], forks)
                except SystemExit as exc:
                    code = exit_code(exc)
                except BaseException:  # what an uncaught exception does to a process: its traceback, exit 1
                    traceback.print_exc()
                    code = 1
            replies.write(json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}) + "\n")
            replies.flush()
    finally:
        forks.close()


if __name__ == "__main__":
    main()
