"""Fence the worker in before it loads a submission (Linux; degrades with warnings).

The fork server prepares once what every worker shares (:func:`prepare`: the
allow list of the file system and the seccomp filter) and gives each worker
resources of its own (:class:`Grants`: a uid and gid, a cgroup). Called by
``child.py`` in the forked worker, before any submitted code runs,
:func:`isolate` applies, in order and where the OS allows:

1. the worker's cgroup: memory (shared memory and tmpfs included) and a
   process count, for the worker and all its descendants (the server moves
   the worker into it while the worker goes on with the steps below, and the
   worker waits for that before it returns);
2. new network, mount, PID and IPC namespaces (as an unprivileged user,
   inside a new user namespace as well), the worker as PID 1 of its PID
   namespace, so that when it dies the kernel kills every process the
   submission started. The fork server creates the worker in them with one
   clone(2) (:func:`fork_into_namespaces`); where that is refused, the worker
   enters them itself (``unshare``, then a second fork to become PID 1);
3. in the mount namespace: every file system read-only, a fresh /proc, /run
   (the host services' sockets) hidden, and a small private tmpfs as the
   working directory; as root, the import paths bound read-only below it;
4. Landlock: the worker may read only the interpreter, the packages and the
   shared libraries it uses, and write only its scratch folder; no TCP, and
   no abstract Unix socket or signal reaches past its own processes. Without
   Landlock, the old deny list: the named paths (the reference, the grader,
   a batch's class folder) hidden under empty mounts;
5. as root: a uid and gid of its own, no supplementary groups, a process cap;
6. a seccomp filter refusing the system calls a grader never needs (built
   and compiled by libseccomp in the fork server, loaded by each worker).

Each step that the OS refuses is reported in a warning, and the run goes on:
docs/SECURITY.md lists what is then not defended.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import random
import resource
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
SECCOMP_MODE_FILTER = 2
CLONE_SYSCALLS = {"x86_64": 56, "aarch64": 220}  # clone(2); with no stack and no thread pointers, the same arguments
STATVFS_TO_MOUNT = {
    os.ST_RDONLY: MS_RDONLY, os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME, os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME,
}  # fmt: skip

# Landlock (linux/landlock.h); the system call numbers are the same on every architecture.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_MAKE_CHAR, FS_MAKE_BLOCK = 1 << 6, 1 << 11
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}  # every right known to that ABI
FS_ON_FILES = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV  # the rights a rule on a file may hold
NET_TCP = 0b11  # bind and connect (ABI 4)
SCOPED = 0b11  # abstract Unix sockets and signals (ABI 6)
READ = FS_READ_FILE | FS_READ_DIR
# The scratch folder: everything but running programs and making device files.
WRITE = FS_BY_ABI[5] & ~(FS_EXECUTE | FS_MAKE_CHAR | FS_MAKE_BLOCK)
# What the dynamic loader, the interpreter and torch read besides their own folders.
SYSTEM_READ = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache", "/etc/ld.so.preload", "/sys/devices/system/cpu",
               "/dev/urandom", "/dev/random")  # fmt: skip
SYSTEM_WRITE = ("/dev/null", "/dev/zero")
SITE_FOLDERS = ("site-packages", "dist-packages")

# Each worker's own uid and gid, from a range no system account uses (below 2**31, which some tools misread).
UID_BASE, UID_COUNT = 2_100_000_000, 1 << 24
CGROUP_PREFIX = "diffgrade-"
# System calls a grader never needs: EPERM (see docs/SECURITY.md).
NEVER_NEEDED = (
    "add_key", "request_key", "keyctl", "ptrace", "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open",
    "userfaultfd", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "fsopen", "fsmount", "fsconfig", "fspick",
    "move_mount", "open_tree", "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "open_by_handle_at",
    "name_to_handle_at", "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init", "lookup_dcookie",
    "syslog", "kcmp", "pidfd_getfd", "iopl", "ioperm", "vhangup", "uselib", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "sethostname", "setdomainname",
)  # fmt: skip
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET)
PERSONALITY_QUERY = 0xFFFFFFFF


class _Libc:
    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self.libc.syscall.restype = ctypes.c_long

    def _check(self, result: int, what: str) -> int:
        if result < 0:
            raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")
        return result

    def unshare(self, flags: int) -> None:
        self._check(self.libc.unshare(flags), "unshare")

    def mount(self, source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
        encode = lambda text: None if text is None else text.encode()  # noqa: E731
        self._check(self.libc.mount(encode(source), encode(target), encode(kind), flags, encode(data)), f"mount {target}")

    def prctl(self, option: int, value: int) -> None:
        self._check(self.libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), "prctl")

    def load_filter(self, program: bytes) -> None:
        buffer = ctypes.create_string_buffer(program, len(program))
        fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))  # 8 bytes per BPF instruction
        self.prctl(PR_SET_NO_NEW_PRIVS, 1)
        self._check(self.libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl")

    def syscall(self, number: int, *args: Any) -> int:
        return self._check(self.libc.syscall(ctypes.c_long(number), *args), f"system call {number}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


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


class _Prepared:
    """What :func:`prepare` found in the fork server, shared by every worker it forks."""

    def __init__(self) -> None:
        self.packages: list[tuple[Any, list[str]]] = []
        self.roots: list[str] = []  # folders and files to read: the interpreter, its packages, their libraries
        self.grader: Path = Path(__file__).resolve().parents[1]
        self.keep_out: list[str] = []  # the grader package, or the whole checkout it sits in
        self.installs: list[str] = []  # the interpreter's prefixes: kept even inside a checkout (a .venv)
        self.rules: list[tuple[str, int]] = []  # the roots with keep_out carved out
        self.landlock_abi = 0
        self.seccomp: bytes | None = None  # the filter as libseccomp compiled it (BPF)
        self.seccomp_problem = "the seccomp filter was not prepared"


_prepared = _Prepared()


def prepare() -> None:
    """In the fork server after its warm-up: note once what every worker's isolation needs.

    The packages' search paths (each worker only rewrites them, see
    :func:`_expose_import_paths`: looking through the thousand modules torch
    loads, in every worker, cost milliseconds of copy-on-write faults), the
    file system's allow list, the Landlock ABI and the seccomp filter.
    """
    _prepared.packages = _loaded_packages()
    _prepared.roots = _read_roots(_prepared.packages)
    grader = _prepared.grader
    # An installed grader sits in a site folder beside the packages the worker needs: only it is kept out.
    # Anywhere else it sits in a checkout or an unpacked bundle (the reference, the tests, build/ copies): all of it is.
    _prepared.keep_out = [str(grader if grader.parent.name in SITE_FOLDERS else grader.parent)]
    _prepared.installs = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})
    _prepared.rules = _allow_list(_prepared.roots, _prepared.keep_out, _prepared.installs)
    _prepared.landlock_abi = landlock_abi()
    _prepared.seccomp, _prepared.seccomp_problem = _seccomp_filter()


def _loaded_packages() -> list[tuple[Any, list[str]]]:
    return [(m, list(m.__path__)) for m in list(sys.modules.values()) if type(getattr(m, "__path__", None)) is list]


def _read_roots(packages: list[tuple[Any, list[str]]]) -> list[str]:
    """The folders the worker reads from: import paths, the interpreter's lib folders, shared libraries' folders.

    Only the outermost of nested folders, and every import path.
    """
    found = [p for p in sys.path if p] + [p for _, paths in packages for p in paths]
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        found += [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]
    with open("/proc/self/maps") as stream:
        mapped = {fields[5].strip() for fields in (line.split(None, 5) for line in stream) if len(fields) == 6}
    found += [os.path.dirname(path) for path in mapped if path.startswith("/") and ".so" in os.path.basename(path)]
    found += [p for p in SYSTEM_READ if not p.startswith(("/dev", "/etc"))]
    real = sorted({os.path.realpath(p) for p in found if os.path.isdir(p)})
    roots: list[str] = []
    for path in real:  # parents sort before their children: keep only the outermost
        if not roots or not _within(path, roots[-1]):
            roots.append(path)
    # Rules hold inodes and are looked up from a file towards the root: the import paths get their own,
    # since :func:`_expose_import_paths` binds them where none of their parents lies.
    bound = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    return sorted(set(roots) | bound)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _allow_list(roots: list[str], keep_out: list[str], installs: list[str]) -> list[tuple[str, int]]:
    """Read rules for ``roots``, with every path of ``keep_out`` (and what lies below it) left out.

    A root that holds a kept-out path is not allowed whole: it may be listed,
    and each of its entries is allowed on its own, down to the kept-out
    path's siblings. A root inside a kept-out path is dropped, unless it
    belongs to a Python installation in ``installs`` (a virtual environment
    kept inside a checkout).
    """
    rules: list[tuple[str, int]] = []
    for root in roots:
        if any(_within(root, out) for out in keep_out) and not any(_within(root, p) and p not in keep_out for p in installs):
            continue
        holds = [out for out in keep_out if _within(out, root) and out != root]
        rules += _carve(root, holds) if holds else [(root, READ)]
    return rules


def _carve(folder: str, keep_out: list[str]) -> list[tuple[str, int]]:
    rules = [(folder, FS_READ_DIR)]
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_symlink() or entry.path in keep_out:  # a link's target is allowed where it lies, or not at all
                continue
            below = [out for out in keep_out if _within(out, entry.path)]
            rules += _carve(entry.path, below) if below and entry.is_dir() else [(entry.path, READ)]
    return rules


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers, 0 if none (an old kernel, or Landlock not enabled)."""
    try:
        return _Libc().syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    except OSError:
        return 0


def _seccomp_filter() -> tuple[bytes | None, str]:
    """The seccomp filter (default: allow) compiled by libseccomp, or None and why it cannot be built.

    Compiled once here: libseccomp would compile it again in every worker
    (a millisecond each), which only loads the program.
    """
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError, RuntimeError) as exc:  # the binding, or libseccomp itself, is missing
        return None, f"{type(exc).__name__}: {exc}"
    refuse = seccomp.ERRNO(errno.EPERM)
    built = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in NEVER_NEEDED:
        with contextlib.suppress(OSError, ValueError):  # a call this architecture does not have
            built.add_rule(refuse, name)
    for flag in NAMESPACE_FLAGS:  # threads and fork stay allowed
        built.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    built.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags are out of reach in memory; glibc then uses clone
    built.add_rule(refuse, "personality", seccomp.Arg(0, seccomp.NE, PERSONALITY_QUERY))
    built.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.EQ, socket.AF_UNIX))  # the host's services listen on Unix sockets
    with tempfile.TemporaryFile() as program:
        built.export_bpf(program)
        program.seek(0)
        return program.read(), ""


class Grants:
    """What the fork server gives each worker for itself: a uid and gid, and a cgroup.

    As root, every worker gets a uid no other live worker has, so per-user
    kernel state (keyrings, ``RLIMIT_NPROC``, who may signal whom) is never
    shared between two submissions. Where the machine offers cgroups, every
    worker gets a group below the server's own, removed (after killing what
    is left in it) when the worker has been reaped.
    """

    def __init__(self) -> None:
        self.root = os.geteuid() == 0
        self.next_uid = random.randrange(UID_COUNT)  # separate runs rarely meet the same uid
        self.uids: dict[int, int] = {}  # worker pid: its uid
        self.groups: dict[int, list[str]] = {}  # worker pid: its cgroup folders
        self.pending: list[str] = []  # cgroups that still held processes when last removed
        self.controllers, self.problem = _controllers()
        self.parents: list[tuple[str, str]] = []  # (version, the server's folder for its workers' groups)
        self.count = 0
        if self.root:
            self._make_parents()

    def _make_parents(self) -> None:
        """Make the server's own group in each controller (all or none), after removing those of dead servers."""
        for version, own in self.controllers:
            sweep_stale_groups(own)
            parent = os.path.join(own, f"{CGROUP_PREFIX}{os.getpid()}")
            try:
                os.mkdir(parent, 0o755)
                self.parents.append((version, parent))
                if version == "v2":
                    _write(os.path.join(own, "cgroup.subtree_control"), "+memory +pids")
                    _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
            except OSError as exc:
                self.problem = f"cannot create a cgroup in {own}: {exc.strerror}"
                for _, made in self.parents:
                    remove_group(made)
                self.parents = []
                return
        if not self.parents and not self.problem:
            self.problem = "no cgroup controller for memory and processes is mounted"

    def issue(self, memory: int | None, processes: int) -> dict[str, Any]:
        """Choose a uid and make a cgroup for the next worker: the isolation settings it gets."""
        granted: dict[str, Any] = {"uid": None, "cgroups": [], "cgroup_problem": self.problem or "not run as root"}
        if not self.root:
            return granted
        while UID_BASE + self.next_uid in self.uids.values():
            self.next_uid = (self.next_uid + 1) % UID_COUNT
        granted["uid"] = UID_BASE + self.next_uid
        self.next_uid = (self.next_uid + 1) % UID_COUNT
        self.count += 1
        made: list[str] = []
        try:
            for version, parent in self.parents:
                group = os.path.join(parent, f"w{self.count}")
                os.mkdir(group, 0o755)
                made.append(group)
                _limit_group(version, group, memory, processes)
        except OSError as exc:
            self.pending += made
            granted["cgroup_problem"] = f"cannot create the worker's cgroup ({exc.strerror})"
            return granted
        granted["cgroups"] = [os.path.join(group, "cgroup.procs") for group in made]
        granted["cgroup_problem"] = None if made else self.problem
        return granted

    def bind(self, pid: int, granted: dict[str, Any]) -> None:
        """Remember that the worker ``pid`` holds what :meth:`issue` gave it."""
        if granted["uid"] is not None:
            self.uids[pid] = granted["uid"]
        self.groups[pid] = [os.path.dirname(procs) for procs in granted["cgroups"]]

    def place(self, pid: int, granted: dict[str, Any], placed: int) -> None:
        """Move the worker ``pid`` into its cgroup, then tell it on ``placed`` (closed): "ok" or what went wrong."""
        try:
            for procs in granted["cgroups"]:
                _write(procs, str(pid))
            answer = "ok"
        except OSError as exc:
            answer = f"could not enter the worker's cgroup ({exc.strerror})"
        with contextlib.suppress(OSError):  # the worker may be gone already
            os.write(placed, answer.encode())
        os.close(placed)

    def abandon(self, granted: dict[str, Any]) -> None:
        """Give back what :meth:`issue` gave to a worker that was never forked."""
        self.pending += [os.path.dirname(procs) for procs in granted["cgroups"]]
        self.retry()

    def release(self, pid: int) -> None:
        """The worker ``pid`` was reaped: kill what is left in its cgroup, remove it, free its uid."""
        self.pending += self.groups.pop(pid, [])
        self.retry()
        self.uids.pop(pid, None)

    def retry(self) -> None:
        """Remove the groups that could not be removed yet (their processes were still exiting)."""
        self.pending = [group for group in self.pending if not remove_group(group)]


def _controllers() -> tuple[list[tuple[str, str]], str]:
    """The cgroup folders (version, this process's own group) for memory and processes, and a problem if none.

    cgroup v1's ``memory`` and ``pids`` hierarchies, or else cgroup v2 where
    this process's group can delegate both controllers.
    """
    try:
        with open("/proc/self/mountinfo") as stream:
            mounts = [line.split() for line in stream]
        with open("/proc/self/cgroup") as stream:
            own = dict(line.rstrip("\n").split(":", 2)[1:] for line in stream)
    except OSError as exc:
        return [], f"cgroups cannot be read ({exc.strerror})"
    v1: dict[str, str] = {}
    v2 = ""
    for fields in mounts:
        separator = fields.index("-")
        point, kind, options = fields[4], fields[separator + 1], fields[separator + 3].split(",")
        for controller in ("memory", "pids"):
            if kind == "cgroup" and controller in options and controller in own:
                v1[controller] = point + own[controller].rstrip("/")
        if kind == "cgroup2" and "" in own:
            v2 = point + own[""].rstrip("/")
    if v1:
        return [("v1", v1[c]) for c in ("memory", "pids") if c in v1], ""
    if v2:
        try:
            with open(os.path.join(v2, "cgroup.controllers")) as stream:
                offered = stream.read().split()
        except OSError:
            offered = []
        if {"memory", "pids"} <= set(offered):
            return [("v2", v2)], ""
        return [], "the cgroup v2 group of the grader does not offer the memory and pids controllers"
    return [], "no cgroup file system is mounted"


def _write(path: str, text: str) -> None:
    with open(path, "w") as stream:
        stream.write(text)


def _limit_group(version: str, group: str, memory: int | None, processes: int) -> None:
    """Set a new group's limits: memory (with swap, where counted) and the number of processes and threads."""
    if version == "v2":
        _write(os.path.join(group, "pids.max"), str(processes))
        if memory is not None:
            _write(os.path.join(group, "memory.max"), str(memory))
            _write(os.path.join(group, "memory.swap.max"), "0")
    elif os.path.exists(os.path.join(group, "pids.max")):
        _write(os.path.join(group, "pids.max"), str(processes))
    elif memory is not None:
        _write(os.path.join(group, "memory.limit_in_bytes"), str(memory))
        with contextlib.suppress(OSError):  # swap accounting is optional
            _write(os.path.join(group, "memory.memsw.limit_in_bytes"), str(memory))


def remove_group(group: str) -> bool:
    """Kill every process in a worker's cgroup and remove it; False if processes are still exiting."""
    try:
        os.rmdir(group)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        if os.path.exists(os.path.join(group, "cgroup.kill")):
            _write(os.path.join(group, "cgroup.kill"), "1")
        else:
            with open(os.path.join(group, "cgroup.procs")) as stream:
                for pid in stream.read().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
        os.rmdir(group)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def remove_server_groups(server: int, attempts: int = 50) -> None:
    """Remove the cgroups of the fork server ``server`` (ended), its workers' included; wait for their processes."""
    import time

    for _, own in _controllers()[0]:
        parent = os.path.join(own, f"{CGROUP_PREFIX}{server}")
        for _ in range(attempts):
            if _remove_tree(parent):
                break
            time.sleep(0.02)


def _remove_tree(parent: str) -> bool:
    try:
        groups = [entry.path for entry in os.scandir(parent) if entry.is_dir()]
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return all([remove_group(group) for group in groups]) and remove_group(parent)


def sweep_stale_groups(own: str) -> None:
    """Remove the groups that fork servers which no longer run left behind in ``own`` (a server killed mid-run)."""
    with contextlib.suppress(OSError), os.scandir(own) as entries:
        for entry in entries:
            number = entry.name[len(CGROUP_PREFIX) :]
            if entry.name.startswith(CGROUP_PREFIX) and number.isdigit() and not _alive(int(number)):
                _remove_tree(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def isolate(config: dict[str, Any], entered: tuple[int, int] | None = None) -> dict[str, Any]:
    """Apply every protection the OS allows; return what applied and warnings for what did not.

    ``config`` keys: ``hide`` (paths to keep out of reach: only hidden by
    mounts where Landlock is missing, and carved out of the allow list if an
    allowed folder holds one), ``workdir``, ``workdir_bytes`` (size of its
    tmpfs), ``max_processes``, from :meth:`Grants.issue` ``uid``, ``cgroups``
    and ``cgroup_problem``, and ``placed_fd`` (see :meth:`Grants.place`). ``entered``: this process was started
    by :func:`fork_into_namespaces`, and these were its user and group ids
    before; None: enter new namespaces here.
    """
    libc = _Libc()
    root = os.geteuid() == 0  # in a new user namespace not mapped yet, the overflow id: not root
    applied = {"network": False, "pid_namespace": False, "filesystem": False, "allow_list": False,
               "unprivileged_user": False, "seccomp": False, "cgroup": False}  # fmt: skip
    warnings: list[str] = []
    if entered is None:  # before the fork below: a process forked outside the group would stay outside
        applied["cgroup"] = _await_cgroup(config, warnings)
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
    scratch = config["workdir"]
    fenced = False
    if created:
        if entered is None:
            _become_namespace_init()
        applied["pid_namespace"] = True
        try:
            left_writable, scratch = _fence_filesystem(libc, config, root)
            fenced = True
            if left_writable:
                warnings.append(f"these mounts stay writable: {', '.join(left_writable)}")
        except OSError as exc:
            warnings.append(f"the file system could not be fenced ({exc}): the reference may be readable")
    if fenced:
        try:
            if _prepared.landlock_abi < 1:
                _hide(libc, config["hide"])
            if not root:
                _lock_mounts(libc)  # before Landlock, which forbids writing the new namespace's uid map
            applied["filesystem"] = True
        except OSError as exc:
            warnings.append(f"the file system could not be fenced ({exc}): the reference may be readable")
    applied["allow_list"] = _restrict_files(libc, config, scratch, warnings)
    if root:
        try:
            _drop_user(config, scratch)
            applied["unprivileged_user"] = True
        except OSError as exc:  # a container that refuses setuid
            warnings.append(f"could not switch to a user of its own ({exc}): the worker runs as root")
    else:
        warnings.append("not run as root: the worker keeps the invoking user's identity "
                        + ("inside a user namespace" if created else "and can write that user's files"))  # fmt: skip
    applied["seccomp"] = _filter_calls(warnings)
    if entered is not None:  # the server moved this process while it fenced itself in
        applied["cgroup"] = _await_cgroup(config, warnings)
    os.chdir(scratch)
    os.environ["HOME"] = os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch  # the fork server may have asked for it already: tempfile keeps the first answer (the read-only /tmp)
    die_with_parent()  # again: a change of user clears the parent-death signal
    return {"protections": applied, "warnings": warnings}


def _await_cgroup(config: dict[str, Any], warnings: list[str]) -> bool:
    """Wait until the fork server has moved this process into its cgroup (:meth:`Grants.place`); False if it could not."""
    lost = ("memory is bounded per process only (RLIMIT_AS, which shared memory escapes), "
            "and the process count per user (RLIMIT_NPROC)")  # fmt: skip
    if not config.get("cgroups"):
        warnings.append(f"no cgroup ({config.get('cgroup_problem') or 'none was made'}): {lost}")
        return False
    answer = b""
    while chunk := os.read(config["placed_fd"], 256):
        answer += chunk
    os.close(config["placed_fd"])
    if answer != b"ok":
        warnings.append(f"{answer.decode(errors='replace') or 'the fork server did not place the worker in its cgroup'}: {lost}")
        return False
    return True


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


def _fence_filesystem(libc: _Libc, config: dict[str, Any], root: bool) -> tuple[list[str], str]:
    """Make every file system read-only, mount a fresh /proc and a private workdir, hide /run.

    The workdir's tmpfs holds the scratch folder (the only place the worker
    may write) and, as root, the import paths bound below it. Returns the
    mount points that could not be made read-only, and the scratch folder.
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
    _hide(libc, ["/run"])  # sockets of the host's services
    workdir = config["workdir"]
    libc.mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={config['workdir_bytes']},mode=0755")
    scratch = os.path.join(workdir, "home")
    os.mkdir(scratch, 0o700)
    if root:
        os.chown(scratch, config["uid"], config["uid"])
        _expose_import_paths(libc, workdir)
    return left_writable, scratch


def _hide(libc: _Libc, paths: list[str]) -> None:
    """An empty read-only tmpfs over each folder, /dev/null over each file."""
    for path in paths:
        if os.path.isdir(path):
            libc.mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=0555")
        elif os.path.exists(path):
            libc.mount("/dev/null", path, None, MS_BIND)


def _expose_import_paths(libc: _Libc, workdir: str) -> None:
    """Keep every import path readable after the switch to the worker's own user.

    The interpreter and its packages may sit below a folder only root can
    enter (a home folder, a 0700 temporary folder). Each import path is bound,
    read-only, below the workdir (beside the scratch folder, not in it: the
    allow list grants the bound folders only what it grants the originals),
    and sys.path and the ``__path__`` of every loaded package are pointed
    there, so that the standard library and the parts of torch that load
    lazily stay importable; file permissions inside are unchanged.
    """
    base = os.path.join(workdir, ".imports")
    os.mkdir(base, 0o755)
    moved: dict[str, str] = {}
    for index, path in enumerate(dict.fromkeys(p for p in sys.path if p and os.path.isdir(p))):
        target = os.path.join(base, str(index))
        os.mkdir(target)
        libc.mount(path, target, None, MS_BIND | MS_REC)
        libc.mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _mount_flags(path))
        moved[os.path.abspath(path)] = target

    def relocate(path: str) -> str:
        for old in sorted(moved, key=len, reverse=True):
            if path == old or path.startswith(old + os.sep):
                return moved[old] + path[len(old):]
        return path

    sys.path[:] = [relocate(os.path.abspath(p)) if p else p for p in sys.path]
    for module, paths in _prepared.packages:
        module.__path__ = [relocate(p) for p in paths]
    sys.path_importer_cache.clear()


def _restrict_files(libc: _Libc, config: dict[str, Any], scratch: str, warnings: list[str]) -> bool:
    """Landlock: read only the allow list, write only ``scratch``, no TCP, nothing scoped outside; False if refused.

    Rules hold inodes, so the import paths bound below the workdir get what
    their originals get. The Landlock domain cannot be left, and every
    process the submission starts inherits it.
    """
    abi = _prepared.landlock_abi
    if abi < 1:
        warnings.append("no Landlock in this kernel: every file the worker's user may read stays readable "
                        "except the reference, the grader and a batch's class and reports, which are hidden")  # fmt: skip
        return False
    rules = _prepared.rules
    hidden = [os.path.realpath(p) for p in config["hide"]]
    if any(_within(path, root) for path in hidden for root, access in rules if access & FS_READ_FILE):
        rules = _allow_list(_prepared.roots, _prepared.keep_out + hidden, _prepared.installs)
    rules = [*rules, ("/proc", READ), *((p, FS_READ_FILE) for p in SYSTEM_READ if p.startswith(("/dev", "/etc"))),
             *((p, FS_READ_FILE | FS_WRITE_FILE) for p in SYSTEM_WRITE), (scratch, WRITE)]  # fmt: skip
    handled = FS_BY_ABI[max(v for v in FS_BY_ABI if v <= abi)]
    attr = _RulesetAttr(handled, NET_TCP if abi >= 4 else 0, SCOPED if abi >= 6 else 0)
    try:
        ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
        try:
            for path, access in rules:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # not on this machine
                try:
                    allowed = access & handled & (FS_ON_FILES if not os.path.isdir(path) else ~0)
                    rule = _PathBeneath(allowed, fd)
                    libc.syscall(LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0))
                finally:
                    os.close(fd)
            libc.prctl(PR_SET_NO_NEW_PRIVS, 1)
            libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0))
        finally:
            os.close(ruleset)
    except OSError as exc:
        warnings.append(f"the file system's allow list (Landlock) was refused ({exc.strerror}): every file the worker's "
                        "user may read stays readable except the reference, the grader and a batch's class and reports")  # fmt: skip
        return False
    if abi < 6:
        warnings.append(f"Landlock ABI {abi} cannot scope signals and abstract Unix sockets to the worker")
    return True


def _drop_user(config: dict[str, Any], scratch: str) -> None:
    """Become the worker's own unprivileged user and group, with its process cap."""
    uid = config["uid"]
    if os.stat(scratch).st_uid == 0:  # no private tmpfs: hand over the grader's folder
        os.chown(scratch, uid, uid)
    processes = config["max_processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    sys.path[:] = [p for p in sys.path if os.access(p, os.R_OK)]


def _filter_calls(warnings: list[str]) -> bool:
    """Load the seccomp filter prepared in the fork server; False (and a warning) where it cannot apply."""
    if _prepared.seccomp is None:
        warnings.append(f"no seccomp filter ({_prepared.seccomp_problem}): keyrings, ptrace, bpf, mounts and "
                        "namespaces are refused only by the user switch and the namespaces")  # fmt: skip
        return False
    try:
        _Libc().load_filter(_prepared.seccomp)
    except OSError as exc:
        warnings.append(f"the seccomp filter was refused ({exc.strerror or exc}): keyrings, ptrace, bpf, mounts and "
                        "namespaces are refused only by the user switch and the namespaces")  # fmt: skip
        return False
    return True
