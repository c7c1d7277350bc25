"""Fence the worker in before it loads a submission (Linux; degrades with warnings).

Called by ``child.py`` once numpy and torch are imported and warmed up, and
before any submitted code runs. In order, where the OS allows:

1. new network, mount, PID and IPC namespaces; as an unprivileged user,
   inside a new user namespace as well;
2. the worker as PID 1 of its PID namespace: when it dies, the kernel kills
   every process the submission started, including those that left the
   session.

The fork server creates the worker in its namespaces with one clone(2)
(:func:`fork_into_namespaces`); where that is refused, the worker enters
them itself (``unshare``, then a second fork to become PID 1). Then:

3. in the mount namespace: every file system read-only, the reference hidden
   (an empty tmpfs over its folder, /dev/null over the file), a fresh /proc,
   and a small private tmpfs as the working directory;
4. as root: the ``nobody`` user (no supplementary groups) with a process cap.

Each step that the OS refuses is reported in a warning, and the run goes on:
docs/SECURITY.md lists what is then not defended.
"""

from __future__ import annotations

import ctypes
import os
import platform
import pwd
import resource
import signal
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_PDEATHSIG = 1
CLONE_SYSCALLS = {"x86_64": 56, "aarch64": 220}  # clone(2); with no stack and no thread pointers, the same arguments
STATVFS_TO_MOUNT = {
    os.ST_RDONLY: MS_RDONLY, os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME, os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME,
}  # fmt: skip


class _Libc:
    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

    def unshare(self, flags: int) -> None:
        self._check(self.libc.unshare(flags), "unshare")

    def mount(self, source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
        encode = lambda text: None if text is None else text.encode()  # noqa: E731
        self._check(self.libc.mount(encode(source), encode(target), encode(kind), flags, encode(data)), f"mount {target}")


def worker_namespaces() -> int:
    """The namespaces a worker gets: network, mount, PID and IPC, and as an unprivileged user a user namespace."""
    return CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (0 if os.geteuid() == 0 else CLONE_NEWUSER)


def fork_into_namespaces() -> int | None:
    """``os.fork()``, but the child starts in new :func:`worker_namespaces`, as PID 1 of its own; None if refused.

    One clone(2) does what a fork, ``unshare`` and a second fork (to become
    PID 1) do otherwise, and copying the page tables of a process that has
    torch loaded is most of a fork's cost. Python's own fork bookkeeping
    (``PyOS_BeforeFork`` and the two ``AfterFork`` calls) surrounds the system
    call as in ``os.fork``; glibc's is skipped, which is safe only in a process
    with one thread (the fork server): with more, this returns None.
    """
    number = CLONE_SYSCALLS.get(platform.machine())
    if number is None or len(os.listdir("/proc/self/task")) != 1:  # glibc's fork handlers, skipped here, matter with threads
        return None
    python = ctypes.PyDLL(None, use_errno=True)  # the interpreter lock stays held, as in os.fork
    python.syscall.restype = ctypes.c_long
    python.PyOS_BeforeFork()
    pid = python.syscall(ctypes.c_long(number), ctypes.c_ulong(worker_namespaces() | signal.SIGCHLD), None, None, None, None)
    if pid == 0:
        python.PyOS_AfterFork_Child()
        return 0
    python.PyOS_AfterFork_Parent()
    return pid if pid > 0 else None


def isolate(config: dict[str, Any], entered: tuple[int, int] | None = None) -> dict[str, Any]:
    """Apply every protection the OS allows; return what applied and warnings for what did not.

    ``config`` keys: ``hide`` (paths to make unreadable), ``workdir``,
    ``workdir_bytes`` (size of its tmpfs), ``max_processes``. ``entered``: this
    process was started by :func:`fork_into_namespaces`, and these were its
    user and group ids before; None: enter new namespaces here.
    """
    libc = _Libc()
    root = os.geteuid() == 0  # in a new user namespace not mapped yet, the overflow id: not root
    applied = {"network": False, "pid_namespace": False, "filesystem": False, "unprivileged_user": False}
    warnings: list[str] = []
    created = worker_namespaces()
    try:
        uid, gid = entered or (os.getuid(), os.getgid())
        if entered is None:
            libc.unshare(created)
        if not root:
            _map_user(uid, gid)
        applied["network"] = True
    except OSError as exc:
        warnings.append(f"no network, mount or PID namespace ({exc.strerror}): the submission may use the network, "
                        "see and signal other processes, and its descendants are killed only through its process group")  # fmt: skip
        created = 0
    if created:
        if entered is None:
            _become_namespace_init()
        applied["pid_namespace"] = True
        try:
            left_writable = _fence_filesystem(libc, config, root)
            if not root:
                _lock_mounts(libc)
            applied["filesystem"] = True
            if left_writable:
                warnings.append(f"these mounts stay writable: {', '.join(left_writable)}")
        except OSError as exc:
            warnings.append(f"the file system could not be fenced ({exc}): the reference may be readable")
    if root:
        try:
            _drop_to_nobody(config)
            applied["unprivileged_user"] = True
        except (KeyError, OSError) as exc:  # no "nobody" user, or a container that refuses setuid
            warnings.append(f"could not switch to the unprivileged user nobody ({exc}): the worker runs as root")
    else:
        warnings.append("not run as root: the worker keeps the invoking user's identity "
                        + ("inside a user namespace" if created else "and can write that user's files"))  # fmt: skip
    os.chdir(config["workdir"])
    die_with_parent()  # again: a change of user clears the parent-death signal
    return {"protections": applied, "warnings": warnings}


def _lock_mounts(libc: _Libc) -> None:
    """Enter a nested user and mount namespace: the kernel then locks every mount made so far.

    Without root the worker holds every capability over its own mount
    namespace and could unmount the hiding mounts or make / writable again;
    mounts inherited into a less privileged namespace can be neither
    unmounted one by one nor have their read-only flag cleared.
    """
    libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_user(0, 0)


def _map_user(uid: int, gid: int) -> None:
    """Inside a new user namespace, act as root over a namespace-private view."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as stream:
            stream.write(text)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (so a killed grader leaves no worker)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _become_namespace_init() -> None:
    """Fork; the parent only waits and passes on how the child ended, the child carries on as PID 1."""
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            if number not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be (and need not be) reset
                signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    die_with_parent()


def _mount_flags(path: str) -> int:
    flags = os.statvfs(path).f_flag
    return sum(mount for stat, mount in STATVFS_TO_MOUNT.items() if flags & stat)


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace, parents first."""
    with open("/proc/self/mountinfo") as stream:
        points = {line.split()[4].encode().decode("unicode_escape") for line in stream}
    return sorted(points, key=len)


def _fence_filesystem(libc: _Libc, config: dict[str, Any], root: bool) -> list[str]:
    """Make every file system read-only, hide the named paths, mount a private workdir.

    Returns the mount points that could not be made read-only.
    """
    libc.mount(None, "/", None, MS_REC | MS_PRIVATE)
    left_writable = []
    for point in _mount_points():
        top = "/" + point.split("/")[1]
        if top in ("/proc", "/sys") or (top == "/dev" and not point.startswith(("/dev/shm", "/dev/mqueue"))):
            continue
        try:
            libc.mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _mount_flags(point))
        except OSError:
            if point == "/":
                raise
            left_writable.append(point)
    libc.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in [*config["hide"], "/run"]:  # /run: sockets of the host's services
        if os.path.isdir(path):
            libc.mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=0555")
        elif os.path.exists(path):
            libc.mount("/dev/null", path, None, MS_BIND)
    owner = f",uid={_nobody().pw_uid},gid={_nobody().pw_gid}" if root else ""
    libc.mount("tmpfs", config["workdir"], "tmpfs", MS_NOSUID | MS_NODEV, f"size={config['workdir_bytes']},mode=0700{owner}")
    if root:
        _expose_import_paths(libc, config["workdir"])
    return left_writable


_packages: list[tuple[Any, list[str]]] | None = None  # what remember_packages found


def remember_packages() -> None:
    """Note every loaded package's search path once, in the fork server after its warm-up.

    Each worker then only rewrites those paths (see :func:`_expose_import_paths`):
    looking through the thousand modules torch loads, in every worker, cost
    milliseconds of copy-on-write faults.
    """
    global _packages
    _packages = _loaded_packages()


def _loaded_packages() -> list[tuple[Any, list[str]]]:
    return [(m, list(m.__path__)) for m in list(sys.modules.values()) if type(getattr(m, "__path__", None)) is list]


def _expose_import_paths(libc: _Libc, workdir: str) -> None:
    """Keep every import path readable after the switch to ``nobody``.

    The interpreter and its packages may sit below a folder only root can
    enter (a home folder, a 0700 temporary folder). Each import path is bound,
    read-only, below the workdir, and sys.path and the ``__path__`` of every
    loaded package are pointed there, so that the standard library and the
    parts of torch that load lazily stay importable; file permissions inside
    are unchanged.
    """
    base = os.path.join(workdir, ".imports")
    os.mkdir(base, 0o755)
    moved: dict[str, str] = {}
    for index, path in enumerate(dict.fromkeys(p for p in sys.path if p and os.path.isdir(p))):
        target = os.path.join(base, str(index))
        os.mkdir(target)
        libc.mount(path, target, None, MS_BIND | MS_REC)  # with the hiding mounts below it
        libc.mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _mount_flags(path))
        moved[os.path.abspath(path)] = target

    def relocate(path: str) -> str:
        for old in sorted(moved, key=len, reverse=True):
            if path == old or path.startswith(old + os.sep):
                return moved[old] + path[len(old):]
        return path

    sys.path[:] = [relocate(os.path.abspath(p)) if p else p for p in sys.path]
    for module, path in _packages if _packages is not None else _loaded_packages():
        module.__path__ = [relocate(p) for p in path]
    sys.path_importer_cache.clear()


def _nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def _drop_to_nobody(config: dict[str, Any]) -> None:
    nobody = _nobody()
    if os.stat(config["workdir"]).st_uid == 0:  # no private tmpfs: hand over the grader's folder
        os.chown(config["workdir"], nobody.pw_uid, nobody.pw_gid)
    processes = config["max_processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
    os.environ["HOME"] = config["workdir"]
    sys.path[:] = [p for p in sys.path if os.access(p, os.R_OK)]
