"""The isolation steps: the non-root paths, the fallbacks, and the parts the kernel enforces.

The CI machine runs as root, where tests/test_hostile.py covers the full
protections through the CLI. Here ``os.geteuid`` is patched in a child
process so that the code takes its non-root paths (a user namespace, or
refused namespaces); the kernel does the rest for real. The tests of a
worker's own uid, its seccomp filter and its cgroup run real workers from a
fork server, and skip where the machine cannot offer what they test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT

from grader.worker import isolation
from grader.worker.client import ForkServer, Worker, WorkerLimits

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: only root gives each worker a uid and a cgroup")
LANDLOCK = pytest.mark.skipif(isolation.landlock_abi() < 1, reason="needs a kernel with Landlock")
CGROUPS = pytest.mark.skipif(os.geteuid() != 0 or not isolation._controllers()[0],
                             reason="needs root and cgroup memory and pids controllers")  # fmt: skip

PROBE = textwrap.dedent('''
    import json, os, sys
    sys.path[:0] = {paths!r}
    import isolation
    os.geteuid = lambda: 1000
    if {refuse!r}:
        def refuse(self, flags):
            raise OSError(1, "Operation not permitted")
        isolation._Libc.unshare = refuse
    isolation.prepare()
    if {no_landlock!r}:
        isolation._prepared.landlock_abi = 0
    if {no_seccomp!r}:
        isolation._prepared.seccomp, isolation._prepared.seccomp_problem = None, "ImportError: No module named 'pyseccomp'"
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
    for name, path in {readable!r}.items():
        try:
            with open(path, "rb") as stream:
                facts[name] = stream.read().decode(errors="replace")
        except OSError as exc:
            facts[name] = exc.strerror
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    facts["unmounted_hiding"] = libc.umount2({hidden!r}.encode(), 2) == 0
    facts["made_root_writable"] = libc.mount(None, b"/", None, isolation.MS_REMOUNT | isolation.MS_BIND, None) == 0
    print(json.dumps({{**fenced, **facts}}))
''')


def _probe(tmp_path: Path, refuse: bool, cloned: bool = False, *, no_landlock: bool = False, no_seccomp: bool = False,
           paths: tuple[Path, ...] = (ROOT / "grader" / "worker",), readable: dict[str, str] | None = None) -> dict:  # fmt: skip
    workdir, outside, hidden = tmp_path / "work", tmp_path / "outside.txt", tmp_path / "secret.txt"
    workdir.mkdir()
    hidden.write_text("the reference")
    code = PROBE.format(paths=[str(p) for p in paths], refuse=refuse, cloned=cloned, hidden=str(hidden), workdir=str(workdir),
                        outside=str(outside), no_landlock=no_landlock, no_seccomp=no_seccomp,
                        readable={"hidden": str(hidden), **(readable or {})})  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


NO_CGROUP = "no cgroup (none was made): memory is bounded per process only (RLIMIT_AS, which shared memory escapes), " \
            "and the process count per user (RLIMIT_NPROC)"  # fmt: skip


@LANDLOCK
@pytest.mark.parametrize("cloned", [False, True], ids=["unshared", "cloned"])
def test_user_namespace_path_fences_without_root(cloned: bool, tmp_path: Path) -> None:
    """In a user namespace, entered alone or cloned into: PID 1, locked read-only mounts, the allow list, a private workdir."""
    facts = _probe(tmp_path, refuse=False, cloned=cloned)
    assert facts["protections"] == {"network": True, "pid_namespace": True, "filesystem": True, "allow_list": True,
                                    "unprivileged_user": False, "seccomp": True, "cgroup": False}  # fmt: skip
    assert sorted(facts["warnings"]) == [NO_CGROUP, "not run as root: the worker keeps the invoking user's identity inside a user namespace"]
    assert facts["pid"] == 1 and facts["cwd"] == str(tmp_path / "work" / "home")
    assert facts["outside"] in ("Read-only file system", "Permission denied") and facts["inside"] == "written"
    assert facts["hidden"] == "Permission denied"
    assert not facts["unmounted_hiding"] and not facts["made_root_writable"], "the mounts must be locked"


@LANDLOCK
def test_refused_namespaces_still_get_the_allow_list(tmp_path: Path) -> None:
    """When unshare is refused the worker still runs, Landlock still fences its files, and the warnings say what is lost."""
    facts = _probe(tmp_path, refuse=True)
    assert facts["protections"] == {"network": False, "pid_namespace": False, "filesystem": False, "allow_list": True,
                                    "unprivileged_user": False, "seccomp": True, "cgroup": False}  # fmt: skip
    assert facts["warnings"][1].startswith("no network, mount or PID namespace (Operation not permitted)")
    assert facts["warnings"][2] == "not run as root: the worker keeps the invoking user's identity and can write that user's files"
    assert facts["outside"] == "Permission denied" and facts["hidden"] == "Permission denied" and facts["inside"] == "written"


def test_without_landlock_the_deny_list_hides_the_reference(tmp_path: Path) -> None:
    """Without Landlock the old fence applies: read-only mounts, the reference under an empty mount, and a warning."""
    facts = _probe(tmp_path, refuse=False, no_landlock=True)
    assert facts["protections"]["filesystem"] and not facts["protections"]["allow_list"]
    assert any(w.startswith("no Landlock in this kernel: every file the worker's user may read stays readable") for w in facts["warnings"])
    assert facts["hidden"] == "" and facts["outside"] == "Read-only file system"
    assert not facts["unmounted_hiding"] and not facts["made_root_writable"], "the mounts must be locked"


def test_without_everything_the_warnings_say_what_is_lost(tmp_path: Path) -> None:
    """No namespaces, no Landlock, no seccomp: the worker runs, and a warning names each missing protection."""
    facts = _probe(tmp_path, refuse=True, no_landlock=True, no_seccomp=True)
    assert not any(facts["protections"].values())
    assert facts["outside"] == "written" and facts["hidden"] == "the reference"
    text = "\n".join(facts["warnings"])
    for fragment in ("no cgroup", "no network, mount or PID namespace", "no Landlock", "no seccomp filter (ImportError", "not run as root"):
        assert fragment in text


@LANDLOCK
def test_an_installed_grader_and_its_unpacked_bundle_are_unreadable(tmp_path: Path) -> None:
    """A non-editable install (as Gradescope's setup.sh makes one): its site folder stays readable, the grader in it and the bundle do not."""
    bundle = tmp_path / "autograder" / "source"
    shutil.copytree(ROOT / "grader", bundle / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "reference", bundle / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    shutil.copytree(bundle / "grader", site / "grader")
    (site / "somepackage").mkdir()
    (site / "somepackage" / "__init__.py").write_text("VALUE = 1\n")
    for folder in (tmp_path, *tmp_path.rglob("*")):
        folder.chmod(0o755 if folder.is_dir() else 0o644)
    facts = _probe(tmp_path, refuse=False, paths=(site / "grader" / "worker", site), readable={
        "package": str(site / "somepackage" / "__init__.py"),
        "installed_oracle": str(site / "grader" / "exercises" / "diffattn" / "oracle.py"),
        "bundle_reference": str(bundle / "reference" / "diff_attention.py"),
        "bundle_oracle": str(bundle / "grader" / "exercises" / "diffattn" / "oracle.py"),
        "checkout_reference": str(ROOT / "reference" / "diff_attention.py"),
    })  # fmt: skip
    assert facts["protections"]["allow_list"]
    assert facts["package"] == "VALUE = 1\n"
    for name in ("installed_oracle", "bundle_reference", "bundle_oracle", "checkout_reference"):
        assert facts[name] == "Permission denied", name


def test_the_allow_list_carves_the_grader_out_of_its_site_folder(tmp_path: Path) -> None:
    """A site folder holding the grader is allowed entry by entry, without it; a checkout is left out whole, a .venv in it kept."""
    site = tmp_path / "site-packages"
    for name in ("grader/worker", "torch", "numpy"):
        (site / name).mkdir(parents=True)
    (site / "six.py").write_text("")
    rules = dict(isolation._allow_list([str(site)], [str(site / "grader")], []))
    assert rules == {str(site): isolation.FS_READ_DIR, **{str(site / n): isolation.READ for n in ("torch", "numpy", "six.py")}}
    checkout = tmp_path / "checkout"
    venv_lib = checkout / ".venv" / "lib"
    (checkout / "build" / "lib").mkdir(parents=True)
    venv_lib.mkdir(parents=True)
    rules = dict(isolation._allow_list([str(checkout), str(checkout / "build" / "lib"), str(venv_lib)], [str(checkout)], [str(checkout / ".venv")]))
    assert rules == {str(venv_lib): isolation.READ}


def _facts_of_workers(forks: ForkServer, source: str, count: int) -> list[dict]:
    """Start ``count`` workers at once on ``source`` (which prints one JSON line at import); their lines."""
    workers = [Worker(source, "probe.py", ["differential_lambda"], WorkerLimits(), forks) for _ in range(count)]
    try:
        for worker in workers:
            worker.spawn()
        for worker in workers:
            assert worker.load()["status"] == "ok", worker.load_reply
    finally:
        for worker in workers:
            worker.close()  # all alive until here
    return [json.loads(worker.captured()["stdout"]) for worker in workers]


FUNCTIONS = "\ndef differential_lambda(q1, k1, q2, k2, lambda_init=0.2):\n    return q1.sum()\n"


@ROOT_ONLY
def test_every_live_worker_has_a_uid_of_its_own() -> None:
    """Three workers alive at once run as three distinct unprivileged uids and gids, none of them nobody."""
    source = "import json, os\nprint(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups()}))\n" + FUNCTIONS
    with ForkServer() as forks:
        facts = _facts_of_workers(forks, source, 3)
    uids = {fact["uid"] for fact in facts}
    assert len(uids) == 3 and all(isolation.UID_BASE <= uid < isolation.UID_BASE + isolation.UID_COUNT for uid in uids)
    assert all(fact["gid"] == fact["uid"] and fact["groups"] == [] for fact in facts)


def test_temporary_files_go_to_the_workers_own_scratch_folder() -> None:
    """tempfile, whose first answer the fork server had already cached (its /tmp, read-only in the worker), points into the
    worker's writable scratch folder: code that writes a temporary file, as torch.utils.checkpoint's first use does, works."""
    source = ("import json, os, tempfile\nwith tempfile.NamedTemporaryFile() as f:\n    f.write(b'x')\n"
              "print(json.dumps({'tmp': tempfile.gettempdir(), 'cwd': os.getcwd()}))\n") + FUNCTIONS  # fmt: skip
    with ForkServer() as forks:
        (facts,) = _facts_of_workers(forks, source, 1)
    assert facts["tmp"] == facts["cwd"]


SECCOMP_PROBE = textwrap.dedent('''
    import ctypes, errno, json, os, platform, socket, threading
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    NUMBERS = {"x86_64": {"add_key": 248, "keyctl": 250, "ptrace": 101, "bpf": 321, "userfaultfd": 323, "perf_event_open": 298,
                          "clone": 56, "clone3": 435, "unshare": 272, "io_uring_setup": 425},
               "aarch64": {"add_key": 217, "keyctl": 219, "ptrace": 117, "bpf": 280, "userfaultfd": 282, "perf_event_open": 241,
                           "clone": 220, "clone3": 435, "unshare": 97, "io_uring_setup": 425}}[platform.machine()]
    def errno_of(name, *args):
        result = libc.syscall(ctypes.c_long(NUMBERS[name]), *[ctypes.c_long(a) for a in args])
        return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
    facts = {
        "add_key": errno_of("add_key", 0, 0, 0, 0, -4), "keyctl": errno_of("keyctl", 0, -4),
        "ptrace": errno_of("ptrace", 16, 1), "bpf": errno_of("bpf", 0, 0, 0), "userfaultfd": errno_of("userfaultfd", 0),
        "perf_event_open": errno_of("perf_event_open", 0, 0, -1, -1, 0), "io_uring_setup": errno_of("io_uring_setup", 1, 0),
        "unshare": errno_of("unshare", 0x10000000), "clone_newuser": errno_of("clone", 0x10000000 | 17, 0, 0, 0, 0),
        "clone3": errno_of("clone3", 0, 0),
    }
    try:
        socket.socket(socket.AF_UNIX)
        facts["unix_socket"] = "ok"
    except OSError as exc:
        facts["unix_socket"] = errno.errorcode[exc.errno]
    results = []
    thread = threading.Thread(target=lambda: results.append(sum(range(10))))
    thread.start()
    thread.join()
    facts["thread"] = results
    child = os.fork()
    if child == 0:
        os._exit(5)
    facts["fork"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    import torch
    torch.set_num_threads(2)
    facts["torch"] = float(torch.ones(64, 64).matmul(torch.ones(64, 64)).sum())
    print(json.dumps(facts))
''')


@pytest.mark.skipif(isolation._seccomp_filter()[0] is None, reason="needs the pyseccomp binding and libseccomp")
def test_seccomp_refuses_what_a_grader_never_needs_and_keeps_threads_and_fork() -> None:
    """Keyrings, ptrace, bpf, userfaultfd, perf, io_uring, namespaces and Unix sockets are refused; threads, fork and torch work."""
    with ForkServer() as forks:
        (facts,) = _facts_of_workers(forks, SECCOMP_PROBE + FUNCTIONS, 1)
    for name in ("add_key", "keyctl", "ptrace", "bpf", "userfaultfd", "perf_event_open", "io_uring_setup", "unshare",
                 "clone_newuser", "unix_socket"):  # fmt: skip
        assert facts[name] == "EPERM", (name, facts[name])
    assert facts["clone3"] == "ENOSYS"  # so that glibc falls back to clone
    assert facts["thread"] == [45] and facts["fork"] == 5 and facts["torch"] == 64.0**3


def _groups(forks: ForkServer) -> list[Path]:
    """The cgroup folders of ``forks``'s server in every controller it uses."""
    return [Path(own) / f"{isolation.CGROUP_PREFIX}{forks._process.pid}" for _, own in isolation._controllers()[0]]


@CGROUPS
def test_each_worker_has_a_cgroup_that_is_removed_with_it() -> None:
    """A live worker sits in a group of its own with the limits asked for; it is gone once the worker ends, the server's once it stops."""
    source = "import json\nprint(json.dumps(open('/proc/self/cgroup').read().split()))\n" + FUNCTIONS
    limits = WorkerLimits(address_space_bytes=1500 << 20, max_processes=48)
    with ForkServer() as forks:
        worker = Worker(source, "probe.py", ["differential_lambda"], limits, forks)
        assert worker.load()["status"] == "ok"
        parents = _groups(forks)
        groups = [group for parent in parents for group in parent.iterdir() if group.is_dir()]
        assert len(groups) == len(parents) and worker.info["protections"]["cgroup"]
        for group in groups:
            if (group / "pids.max").exists():
                assert (group / "pids.max").read_text().strip() == "48"
            else:
                assert int((group / "memory.limit_in_bytes").read_text()) == 1500 << 20
            assert (group / "cgroup.procs").read_text().split() == [str(worker._process.pid)]
        worker.close()
        assert not any(group.exists() for group in groups)
    assert not any(parent.exists() for parent in parents)


@CGROUPS
def test_groups_left_by_a_killed_server_are_swept() -> None:
    """A fork server killed without a chance to clean up leaves groups; the next server removes them."""
    forks = ForkServer()
    worker = Worker(FUNCTIONS, "probe.py", ["differential_lambda"], WorkerLimits(), forks)
    assert worker.load()["status"] == "ok"
    parents = _groups(forks)
    os.kill(forks._process.pid, 9)
    forks._process.wait()
    worker.stop()
    assert all(parent.exists() for parent in parents)
    with ForkServer() as again:
        assert Worker(FUNCTIONS, "probe.py", ["differential_lambda"], WorkerLimits(), again).load()["status"] == "ok"
        assert not any(parent.exists() for parent in parents)
    forks.close()


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
