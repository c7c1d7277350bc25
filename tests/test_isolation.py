"""The isolation steps as an unprivileged user: through a user namespace, or degraded with warnings.

The CI machine runs as root, where tests/test_hostile.py covers the full
protections. Here ``os.geteuid`` is patched in a child process so that the
code takes its non-root paths; the kernel does the rest for real.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

PROBE = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, {worker_dir!r})
    import isolation
    os.geteuid = lambda: 1000
    if {refuse!r}:
        def refuse(self, flags):
            raise OSError(1, "Operation not permitted")
        isolation._Libc.unshare = refuse
    config = {{"hide": [{hidden!r}], "workdir": {workdir!r}, "workdir_bytes": 1 << 20, "max_processes": 64}}
    if {cloned!r}:  # as the fork server does it: the child starts in its namespaces
        ids = (os.getuid(), os.getgid())
        child = isolation.fork_into_namespaces()
        assert child is not None, "clone refused"
        if child:
            _, status = os.waitpid(child, 0)
            sys.exit(os.waitstatus_to_exitcode(status))
        fenced = isolation.isolate(config, ids)
    else:
        fenced = isolation.isolate(config)
    facts = {{"pid": os.getpid(), "cwd": os.getcwd()}}
    for name, path in (("outside", {outside!r}), ("inside", "inside.txt")):
        try:
            with open(path, "w") as stream:
                stream.write("x")
            facts[name] = "written"
        except OSError as exc:
            facts[name] = exc.strerror
    try:
        facts["hidden"] = open({hidden!r}).read()
    except OSError as exc:
        facts["hidden"] = exc.strerror
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    facts["unmounted_hiding"] = libc.umount2({hidden!r}.encode(), 2) == 0
    facts["made_root_writable"] = libc.mount(None, b"/", None, isolation.MS_REMOUNT | isolation.MS_BIND, None) == 0
    print(json.dumps({{**fenced, **facts}}))
''')


def _probe(tmp_path: Path, refuse: bool, cloned: bool = False) -> dict:
    workdir, outside, hidden = tmp_path / "work", tmp_path / "outside.txt", tmp_path / "secret.txt"
    workdir.mkdir()
    hidden.write_text("the reference")
    code = PROBE.format(worker_dir=str(ROOT / "grader" / "worker"), refuse=refuse, cloned=cloned, hidden=str(hidden),
                        workdir=str(workdir), outside=str(outside))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("cloned", [False, True], ids=["unshared", "cloned"])
def test_user_namespace_path_fences_without_root(cloned: bool, tmp_path: Path) -> None:
    """In a user namespace, entered alone or cloned into: PID 1, read-only locked mounts, a private workdir, the reference hidden."""
    facts = _probe(tmp_path, refuse=False, cloned=cloned)
    assert facts["protections"] == {"network": True, "pid_namespace": True, "filesystem": True, "unprivileged_user": False}
    assert facts["warnings"] == ["not run as root: the worker keeps the invoking user's identity inside a user namespace"]
    assert facts["pid"] == 1
    assert facts["outside"] == "Read-only file system" and facts["inside"] == "written"
    assert facts["hidden"] == ""
    assert not facts["unmounted_hiding"] and not facts["made_root_writable"], "the mounts must be locked"


def test_refused_namespaces_degrade_with_warnings(tmp_path: Path) -> None:
    """When unshare is refused the worker still runs, and the warnings say what is not defended."""
    facts = _probe(tmp_path, refuse=True)
    assert facts["protections"] == {"network": False, "pid_namespace": False, "filesystem": False, "unprivileged_user": False}
    assert facts["warnings"][0].startswith("no network, mount or PID namespace (Operation not permitted)")
    assert facts["warnings"][1] == "not run as root: the worker keeps the invoking user's identity and can write that user's files"
    assert facts["outside"] == "written" and facts["hidden"] == "the reference"


def test_a_process_with_threads_is_never_cloned() -> None:
    """clone(2) skips glibc's fork handlers, so with a second thread running the fork server forks instead."""
    code = textwrap.dedent(f'''
        import sys, threading, time
        sys.path.insert(0, {str(ROOT / "grader" / "worker")!r})
        import isolation
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        print(isolation.fork_into_namespaces())
    ''')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
