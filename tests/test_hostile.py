"""Hostile and broken submissions: graded to the end, nothing credited, nothing outside changed.

Every submission here is graded by the real CLI in its own classroom folder
holding sentinels: a classmate's file, an earlier report, and a copy of the
reference passed with --reference (so the worker must not read it). After the
run no sentinel may have changed and no process the submission started may
still exist. The cases are graded one after another by the suite's warm
grading processes, as a batch grades its students, so each also shows that the
grading process and its fork server survive the case for the next run;
attacks on the grading process itself and memory hogs run in fresh
processes. Limits are kept small so that the suite is safe on a 2-core CI
machine.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REFERENCE, ROOT, Graded, run_cli, run_warm
from corpus.mutants import CORRECT_DIR

from grader.worker import isolation

MARKER = "diffgrade-hostile-marker"
COMM = "dg-hostile-mark"  # what forked children call themselves (a process name holds 15 characters)
LANDLOCK = pytest.mark.skipif(isolation.landlock_abi() < 1, reason="needs a kernel with Landlock (the allow list of files)")
CGROUPS = pytest.mark.skipif(os.geteuid() != 0 or not isolation._controllers()[0],
                             reason="needs root and cgroup memory and pids controllers (a cgroup per worker)")  # fmt: skip
LIMITS = ["--call-timeout", "5", "--time-budget", "120", "--memory-limit", "1200"]

CORRECT = '''
import math
import torch

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    t = q1.shape[-2]
    future = torch.ones(t, t, dtype=torch.bool).triu(1) if causal else torch.zeros(t, t, dtype=torch.bool)
    maps = [(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(future, -math.inf).softmax(-1)
            for q, k in ((q1, k1), (q2, k2))]
    return (maps[0] - coefficient * maps[1]) @ value
'''


def with_attention(body: str) -> str:
    """A correct lambda and an attention function whose body is ``body``."""
    return CORRECT.split("def differential_attention")[0] + (
        "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )


@dataclass(frozen=True)
class Classroom:
    """A folder with the submission, sentinels around it, and where its reports go."""

    root: Path
    submission: Path
    reference: Path
    reports: Path

    def sentinels(self) -> dict[str, str]:
        """A digest of every file in the classroom except the new reports."""
        found = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and self.reports not in path.parents:
                found[str(path.relative_to(self.root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        return found


def classroom(root: Path, source: str | bytes) -> Classroom:
    """Lay out a classroom whose submission is ``source`` (``{reference}``, ``{root}`` filled in)."""
    (root / "class").mkdir(parents=True)
    root.chmod(0o755)
    (root / "reference").mkdir()
    (root / "old_reports").mkdir()
    (root / "class" / "bob.py").write_text("# Bob's submission\n")
    (root / "old_reports" / "report.json").write_text('{"score": 100.0}\n')
    reference = root / "reference" / "diff_attention.py"
    shutil.copy(REFERENCE, reference)
    submission = root / "class" / "alice.py"
    if isinstance(source, str):
        source = source.replace("{reference}", str(reference)).replace("{root}", str(root)).encode()
    submission.write_bytes(source)
    return Classroom(root, submission, reference, root / "new_reports")


def marked_processes() -> list[str]:
    """Command lines of live processes that carry the marker (in their arguments or their name)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if MARKER in cmdline or name == COMM:
                found.append(f"{name}: {cmdline}")
    return found


CASES: dict[str, str | bytes] = {
    "exit_at_import": "import sys\nsys.exit(0)\n",
    "os_exit_in_call": with_attention("import os\nos._exit(0)\n"),
    "system_exit_in_call": with_attention("raise SystemExit(1)\n"),
    "keyboard_interrupt_in_call": with_attention("raise KeyboardInterrupt\n"),
    "segfault": with_attention("import ctypes\nctypes.string_at(0)\n"),
    "infinite_loop": with_attention("while True:\n    pass\n"),
    "memory_hog": with_attention("hoard = []\nwhile True:\n    hoard.append(bytearray(64 * 1024 * 1024))\n"),
    "print_flood": "import sys\nfor _ in range(300):\n    sys.stdout.write('x' * (1 << 20))\n" + CORRECT,
    "patched_comparisons": CORRECT.replace("/ math.sqrt(q.shape[-1])", "")
    + textwrap.dedent('''
        import math, numpy, torch.testing
        torch.allclose = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
        numpy.allclose = lambda *a, **k: True
        math.isclose = lambda *a, **k: True
        torch.Tensor.__eq__ = lambda self, other: True
    '''),
    "tensor_subclass": CORRECT.replace("return (maps[0] - coefficient * maps[1]) @ value",
                                       "return ((maps[0] - coefficient * maps[1]) @ value).as_subclass(Sneaky)")
    + "\nclass Sneaky(torch.Tensor):\n    pass\n",
    "fake_tensor": with_attention(
        "class Fake:\n    shape = value.shape\n    dtype = value.dtype\n    device = value.device\n"
        "    requires_grad = True\n    grad_fn = object()\nreturn Fake()\n"
    ),
    "reads_reference": with_attention("exec(open('{reference}').read(), globals())\nreturn differential_attention(q1, k1, q2, k2, value, coefficient, causal)\n"),
    "imports_reference": "from reference.diff_attention import *\n",
    "vandal": CORRECT + textwrap.dedent('''
        import os, glob, sys
        for path in glob.glob("{root}/**/*", recursive=True) + ["{reference}"]:
            for attempt in (lambda p: open(p, "w").write("owned"), os.remove):
                try:
                    attempt(path)
                    print("CHANGED", path)
                except OSError:
                    pass
        for module in ("grader", "torch", "numpy"):
            try:
                open(sys.modules[module].__file__, "a").close()
                print("CHANGED", module)
            except (OSError, KeyError):
                pass
    '''),
    "detached_processes": CORRECT + textwrap.dedent(f'''
        import ctypes, os, subprocess, time
        try:
            subprocess.Popen(["/bin/sh", "-c", "sleep 600; : {MARKER}"], start_new_session=True)
        except PermissionError:
            pass  # the allow list grants no program the right to run
        if os.fork() == 0:  # a grandchild in a session of its own, orphaned
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(15, b"{COMM}", 0, 0, 0)
                time.sleep(600)
            os._exit(0)
    '''),
    "signals_parent": with_attention("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\n"),
    "oversized": "# padding\n" * 120_000 + CORRECT,
    "not_callable": CORRECT + "\ndifferential_attention = 3\n",
    "returns_none_and_tuple": CORRECT.replace("return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init", "return None")
    .replace("return (maps[0] - coefficient * maps[1]) @ value", "return (maps[0] - coefficient * maps[1]) @ value, maps"),
    "returns_list_and_numpy": CORRECT.replace("return torch.exp(q1 @ k1) - torch.exp(q2 @ k2) + lambda_init", "return [0.5]")
    .replace("return (maps[0] - coefficient * maps[1]) @ value", "return ((maps[0] - coefficient * maps[1]) @ value).detach().numpy()"),
    "nan_output": CORRECT.replace("return (maps[0] - coefficient * maps[1]) @ value", "return (maps[0] - coefficient * maps[1]) @ value * float('nan')"),
    "deep_exception": with_attention("return helper(value)\n") + "\n\ndef helper(v):\n    return v.unknown_method()\n",
    "binary": b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00",
    "sparse_output": CORRECT.replace("return (maps[0] - coefficient * maps[1]) @ value", "return ((maps[0] - coefficient * maps[1]) @ value).to_sparse()"),
    "forged_reply": with_attention(
        "import os, struct\n"
        "deep = ('[' * 200000 + ']' * 200000).encode()\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        flags = int(open(f'/proc/self/fdinfo/{fd}').read().split('flags:')[1].split()[0], 8)\n"
        "        if flags & 1:\n"
        "            os.write(fd, struct.pack('>I', len(deep)) + deep)\n"
        "    except (OSError, IndexError, ValueError):\n"
        "        pass\n"
        "while True:\n"
        "    pass\n"
    ),
    # Forged facts: the worker's own observer replaced (a tuple shown as its first item), and torch.Tensor's version
    # counter and dtype patched to hide an in-place write and float64 results for float32 inputs.
    "patched_worker": "import sys\n_main = sys.modules['__main__']\n_observe = _main.Run.observe\n"
                      "_main.Run.observe = lambda self, r, m=None: _observe(self, r[0] if isinstance(r, tuple) else r, m)\n"
                      + CORRECT.replace("return (maps[0] - coefficient * maps[1]) @ value", "return (maps[0] - coefficient * maps[1]) @ value, maps"),
    "patched_tensor_facts": "import torch\n_dtype = torch._C.TensorBase.dtype\ntorch.Tensor._version = property(lambda self: 0)\n"
                            "torch.Tensor.dtype = property(lambda self: torch.float32 if _dtype.__get__(self) == torch.float64 else _dtype.__get__(self))\n"
                            + CORRECT.replace("    t = q1.shape[-2]\n", "    t = q1.shape[-2]\n    if value.stride(0):\n        with torch.no_grad():\n"
                                                               "            value.mul_(1.0)\n")
                            .replace("- coefficient * maps[1]) @ value", "- coefficient * maps[1]).double() @ value.double()"),
    "unprintable_exception": with_attention("class Sly(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise Sly()\n"),
}


@pytest.fixture(scope="module")
def hostile_runs() -> dict[str, tuple[Classroom, dict[str, str], Graded, list[str]]]:
    """Grade every case (two at a time); keep the sentinels before and the processes after.

    The classrooms live in a world-readable folder (pytest's own are 0700), so
    that only the grader's protections stand between the worker and the files.
    """
    from concurrent.futures import ThreadPoolExecutor

    base = Path(tempfile.mkdtemp(prefix="diffgrade-hostile-"))
    base.chmod(0o755)
    rooms = {name: classroom(base / name, source) for name, source in CASES.items()}
    before = {name: room.sentinels() for name, room in rooms.items()}

    def grade(name: str) -> Graded:
        room = rooms[name]
        room.reports.mkdir()
        reports = ["--json", str(room.reports / "report.json"), "--html", str(room.reports / "report.html")]
        return run_warm([str(room.submission), "--seed", "7", "--reference", str(room.reference), *LIMITS, *reports], room.root)

    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(rooms, pool.map(grade, rooms)))
    yield {name: (rooms[name], before[name], runs[name], marked_processes()) for name in rooms}
    shutil.rmtree(base)


def messages(run: Graded, *check_ids: str) -> str:
    """The messages of the named checks, joined."""
    return "\n".join(run.check(check_id)["message"] for check_id in check_ids)


# Correct implementations that only misbehave around the calls: full marks, exit 0.
HARMLESS_TO_THE_SCORE = {"print_flood", "vandal", "detached_processes"}


@pytest.mark.parametrize("name", list(CASES))
def test_graded_to_the_end_and_nothing_outside_changed(name: str, hostile_runs) -> None:
    """Exit 1 (0 for the correct one that only floods its output) with a valid report; sentinels intact; no process left."""
    from grader.reports.schema import validate

    room, before, run, leftovers = hostile_runs[name]
    assert run.code == (0 if name in HARMLESS_TO_THE_SCORE else 1), (run.stderr, run.stdout[-2000:])
    assert run.report is not None and validate(run.report) == []
    assert run.html is not None and "<!doctype html>" in run.html.lower()
    assert "Traceback" not in run.stderr
    assert room.sentinels() == before
    assert "CHANGED" not in run.report["worker"]["stdout"]
    assert leftovers == []


EXPECTED = {
    "exit_at_import": ("lambda_values", "importing the submission raised SystemExit: 0"),
    "os_exit_in_call": ("causal_values", "the worker process ended during the call (exit status 0)"),
    "system_exit_in_call": ("causal_values", "differential_attention raised SystemExit: 1"),
    "keyboard_interrupt_in_call": ("causal_values", "differential_attention raised KeyboardInterrupt"),
    "segfault": ("causal_values", "the worker process ended during the call (killed by signal SIGSEGV)"),
    "infinite_loop": ("causal_values", "the call did not finish within 5 s; the worker was stopped"),
    "memory_hog": ("causal_values", "MemoryError"),
    "patched_comparisons": ("causal_values", "Mismatched elements"),
    "tensor_subclass": ("attention_returns_one_tensor", "differential_attention returned a submission.Sneaky, a subclass of torch.Tensor"),
    "fake_tensor": ("attention_returns_one_tensor", "returned submission.differential_attention.<locals>.Fake"),
    # Outside the allow list; where Landlock is missing, its folder is hidden under an empty mount.
    "reads_reference": ("causal_values", "raised PermissionError" if isolation.landlock_abi() else "raised FileNotFoundError"),
    "imports_reference": ("lambda_values", "No module named 'reference'"),
    # As PID 1 of its namespace the worker has no visible parent and cannot kill
    # itself by signal; kill(-1) then finds nobody to signal.
    "signals_parent": ("causal_values", "differential_attention raised ProcessLookupError"),
    "oversized": ("lambda_values", "over the limit of 1048576 bytes"),
    "not_callable": ("causal_values", "differential_attention must be a function (got a int)"),
    "returns_none_and_tuple": ("lambda_returns_0dim_tensor", "differential_lambda returned builtins.NoneType None; expected a torch.Tensor"),
    "returns_list_and_numpy": ("attention_returns_one_tensor", "differential_attention returned numpy.ndarray"),
    "nan_output": ("causal_values", "Non-finite values"),
    "deep_exception": ("causal_values", "raised AttributeError: 'Tensor' object has no attribute 'unknown_method'"),
    "binary": ("lambda_values", "not valid UTF-8 text"),
    "sparse_output": ("attention_returns_one_tensor", "expected a dense tensor (layout torch.strided), got layout torch.sparse_coo"),
    "forged_reply": ("causal_values", "produced an invalid reply from the worker (header is not valid JSON: RecursionError)"),
    "patched_worker": ("lambda_values", "the submission replaced part of the grader's worker (worker.Run.observe)"),
    "patched_tensor_facts": ("attention_keeps_dtype", "expected dtype float32 (the inputs' dtype), got float64"),
    "unprintable_exception": ("causal_values", "differential_attention raised differential_attention.<locals>.Sly: <the exception's message could not be read"),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_verdict_names_the_problem(name: str, hostile_runs) -> None:
    """The failing check's message says what the submission did."""
    _, _, run, _ = hostile_runs[name]
    check_id, fragment = EXPECTED[name]
    assert run.check(check_id)["status"] == "failed"
    assert fragment in run.check(check_id)["message"], run.check(check_id)["message"]


def test_tuple_is_named_as_a_tuple(hostile_runs) -> None:
    """A (output, maps) tuple is called a tuple of 2 items, and its root cause describes each item (maps: a list of two
    tensors) by dtype and shape."""
    run = hostile_runs["returns_none_and_tuple"][2]
    assert "returned a builtins.tuple of 2 item(s); expected one torch.Tensor" in messages(run, "attention_returns_one_tensor")
    cause = next(c for c in run.report["diagnosis"]["root_causes"] if c["function"] == "differential_attention")
    tensor = r"a float(32|64) tensor of shape \[\d+, \d+, \d+, \d+\]"
    assert re.search(rf"of 2 item\(s\), \({tensor}, \[{tensor}, {tensor}\]\), where", cause["evidence"]), cause["evidence"]


def test_working_functions_keep_their_points(hostile_runs) -> None:
    """Crashes, hangs and exits in differential_attention do not cost differential_lambda its checks."""
    for name in ("os_exit_in_call", "segfault", "infinite_loop", "signals_parent", "memory_hog"):
        run = hostile_runs[name][2]
        assert run.check("lambda_values")["status"] == "passed", name
        assert run.check("lambda_gradients")["status"] == "passed", name
        assert run.tier("T2")["score"] == run.check("lambda_values")["max_score"], name


def test_odd_results_do_not_crash_the_worker(hostile_runs) -> None:
    """A sparse result or an exception whose __str__ raises is reported without a worker restart."""
    for name in ("sparse_output", "unprintable_exception"):
        assert hostile_runs[name][2].report["worker"]["restarts"] == 0, name


def test_flooded_output_is_capped(hostile_runs) -> None:
    """300 MB printed at import: the report keeps 8 KiB and says how much was dropped; grading is unaffected."""
    run = hostile_runs["print_flood"][2]
    stdout = run.report["worker"]["stdout"]
    assert len(stdout) < 9000 and "more bytes dropped]" in stdout
    assert run.check("lambda_values")["status"] == "passed"


def test_patching_cannot_pass_wrong_values(hostile_runs) -> None:
    """Patched comparison functions leave the unscaled attention failing every value check."""
    run = hostile_runs["patched_comparisons"][2]
    for check in run.tier("T2")["checks"]:
        if check["id"] not in ("lambda_values", "row_sums", "identical_maps_cancel"):
            assert check["status"] == "failed", check["id"]


def test_patched_tensor_facts_hide_no_write_into_an_input(hostile_runs) -> None:
    """torch.Tensor._version patched to read 0 does not hide an in-place write that keeps value's values."""
    run = hostile_runs["patched_tensor_facts"][2]
    assert run.check("inputs_not_modified")["status"] == "failed" and "value" in run.check("inputs_not_modified")["message"]


def test_exception_shows_only_the_students_frames(hostile_runs) -> None:
    """The traceback lists alice.py's lines and none of the grader's."""
    message = hostile_runs["deep_exception"][2].check("causal_values")["message"]
    assert 'File "alice.py", line' in message and "in helper" in message
    assert "child.py" not in message and "grader" not in message


def test_reports_say_which_protections_applied(hostile_runs) -> None:
    """The report lists the protections; as root on a machine with Landlock, seccomp and cgroups, all of them."""
    worker = hostile_runs["vandal"][2].report["worker"]
    assert set(worker["protections"]) == {"network", "pid_namespace", "filesystem", "allow_list", "unprivileged_user", "seccomp", "cgroup"}
    everything = os.geteuid() == 0 and isolation.landlock_abi() >= 6 and isolation._controllers()[0] and isolation._seccomp_filter()[0]
    if everything:
        assert all(worker["protections"].values()) and worker["warnings"] == []
    else:
        assert len(worker["warnings"]) >= list(worker["protections"].values()).count(False)


def test_no_cgroup_is_left_behind(hostile_runs) -> None:
    """No cgroup of a fork server or worker of the runs above outlives its process."""
    for _, own in isolation._controllers()[0]:
        for entry in Path(own).iterdir():
            number = entry.name[len(isolation.CGROUP_PREFIX) :]
            if entry.name.startswith(isolation.CGROUP_PREFIX) and number.isdigit():
                assert isolation._alive(int(number)), f"left behind: {entry}"


@pytest.fixture(scope="module")
def answers_on_disk() -> dict[str, Path]:
    """World-readable answers where a deny list never looked: /tmp, a home folder, a build/lib/grader copy, the checkout."""
    base = Path(tempfile.mkdtemp(prefix="diffgrade-answers-"))
    copies = {"tmp_solution": base / "solution.py", "build_oracle": base / "checkout" / "build" / "lib" / "grader" / "exercises" / "diffattn" / "oracle.py",
              "checkout_reference": REFERENCE, "checkout_oracle": ROOT / "grader" / "exercises" / "diffattn" / "oracle.py"}  # fmt: skip
    shutil.copy(REFERENCE, copies["tmp_solution"])
    shutil.copytree(ROOT / "grader", base / "checkout" / "build" / "lib" / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    home = None
    if os.access("/home", os.W_OK):
        home = Path(tempfile.mkdtemp(prefix="diffgrade-student-", dir="/home"))
        copies["home_solution"] = home / "solution.py"
        shutil.copy(REFERENCE, copies["home_solution"])
    for top in (base, home) if home else (base,):
        for path in (top, *top.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
    yield copies
    shutil.rmtree(base)
    if home:
        shutil.rmtree(home)


READS_ANSWERS = '''
import json
PATHS = {paths}
seen, found = {}, None
for name, path in json.loads(PATHS).items():
    try:
        with open(path) as stream:
            text = stream.read()
        seen[name] = "read"
        found = found or (text if "def differential_attention" in text else None)
    except OSError as exc:
        seen[name] = type(exc).__name__
print("SEEN " + json.dumps(seen))
if found:
    exec(found)
'''


@LANDLOCK
def test_answers_anywhere_on_disk_are_unreadable(answers_on_disk: dict[str, Path], tmp_path: Path) -> None:
    """Copies of the solution in /tmp and a home folder, the checkout's grader and reference, a build/lib/grader copy: none readable."""
    paths = json.dumps({name: str(path) for name, path in answers_on_disk.items()})
    submission = tmp_path / "thief.py"
    submission.write_text(READS_ANSWERS.replace("{paths}", repr(paths)))
    run = run_cli([str(submission), "--seed", "7", "--no-preview", *LIMITS], tmp_path)
    assert run.report is not None, run.stderr
    seen = json.loads(run.report["worker"]["stdout"].split("SEEN ", 1)[1].splitlines()[0])
    assert seen == {name: "PermissionError" for name in answers_on_disk}
    assert run.report["score"] == 0.0


def batch(room: Path, out: Path, *extra: str) -> dict[str, dict[str, str]]:
    """Grade the class in ``room`` with ``diffgrade batch`` (no preview); the gradebook's rows by student."""
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(out), "--seed", "7", "--no-preview", *extra]
    done = subprocess.run(command, cwd=room.parent, capture_output=True, text=True, timeout=300)
    assert (out / "grades.csv").exists(), done.stderr
    with open(out / "grades.csv", newline="") as stream:
        return {row["student"]: row for row in csv.DictReader(stream)}


KEYS = '''
import ctypes, errno, platform
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
USER_KEYRING, USER_SESSION_KEYRING, KEYCTL_SEARCH, KEYCTL_READ = -4, -5, 10, 11
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    result = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return result if result >= 0 else errno.errorcode[ctypes.get_errno()]
'''
DONOR = KEYS + '''
ANSWER = {answer}
for keyring in (USER_KEYRING, USER_SESSION_KEYRING):
    print("STORED", call(ADD_KEY, b"user", b"diffgrade-answer", ANSWER.encode(), len(ANSWER), keyring))
'''
VICTIM = KEYS + '''
for keyring in (USER_KEYRING, USER_SESSION_KEYRING):
    key = call(KEYCTL, KEYCTL_SEARCH, keyring, b"user", b"diffgrade-answer", 0)
    print("SEARCHED", key)
    if isinstance(key, int):
        buffer = ctypes.create_string_buffer(1 << 16)
        size = call(KEYCTL, KEYCTL_READ, key, buffer, 1 << 16)
        exec(buffer.raw[:size].decode())
        break
'''


def test_a_classmate_cannot_pass_answers_through_a_keyring(tmp_path: Path) -> None:
    """A donor graded first stores its code in the kernel's keyrings; the victim graded after it finds nothing and scores 0."""
    room = tmp_path / "class"
    room.mkdir()
    answer = (CORRECT_DIR / "einsum.py").read_text()
    (room / "alice.py").write_text(answer + DONOR.replace("{answer}", repr(answer)))
    (room / "zed.py").write_text(VICTIM)
    rows = batch(room, tmp_path / "out", "--jobs", "1")
    assert rows["alice"]["score"] == "100.0" and rows["zed"]["score"] == "0.0"
    donor = json.loads((tmp_path / "out" / "alice" / "report.json").read_text())["worker"]["stdout"]
    victim = json.loads((tmp_path / "out" / "zed" / "report.json").read_text())["worker"]["stdout"]
    assert "SEARCHED" in victim and not any(line.split()[1].isdigit() for line in victim.splitlines() if line.startswith("SEARCHED"))
    if isolation._seccomp_filter()[0] is not None:
        assert donor.count("STORED EPERM") == 2, donor


HOARDER = '''
import os, time
for _ in range(62):
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)
time.sleep(8)  # alive while the classmate is graded beside it
'''


THREADED = '''
import threading
import time

time.sleep(2)  # a slow import: by now the classmate beside it has started its children
_attention = differential_attention


def differential_attention(*args, **kwargs):
    """The same function, computed in a thread of its own (a thread is a process to RLIMIT_NPROC)."""
    results = []
    helper = threading.Thread(target=lambda: results.append(_attention(*args, **kwargs)))
    helper.start()
    helper.join()
    return results[0]
'''


def test_sleeping_children_do_not_cost_a_classmate_points(tmp_path: Path) -> None:
    """A submission that leaves 62 sleeping children is graded beside a correct one that starts threads: it keeps 100/100."""
    room = tmp_path / "class"
    room.mkdir()
    (room / "hoarder.py").write_text((CORRECT_DIR / "einsum.py").read_text() + HOARDER)
    (room / "victim.py").write_text((CORRECT_DIR / "einsum.py").read_text() + THREADED)
    rows = batch(room, tmp_path / "out", "--jobs", "2", "--call-timeout", "20")
    assert rows["victim"]["score"] == "100.0", rows["victim"]


MEMORY_HOGS = {
    # Four children of 400 MB each: every one within RLIMIT_AS, together past the 1200 MiB limit.
    "children": '''
        global HELD
        if HELD is None:
            children = []
            for _ in range(4):
                child = os.fork()
                if child == 0:
                    hoard = b"x" * (400 << 20)
                    time.sleep(2)
                    os._exit(0)
                children.append(child)
            HELD = all(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0 for child in children)
    ''',
    # 24 memfds of 64 MiB: shared memory, which RLIMIT_AS does not count.
    "memfds": '''
        global HELD
        if HELD is None:
            chunk = b"x" * (64 << 20)
            files = [os.memfd_create("hoard") for _ in range(24)]
            for fd in files:
                os.write(fd, chunk)
            HELD = True
    ''',
}


@CGROUPS
@pytest.mark.parametrize("hog", list(MEMORY_HOGS))
def test_memory_past_the_limit_in_children_or_shared_memory_fails_cleanly(hog: str, tmp_path: Path) -> None:
    """Memory held by forked children or in memfds counts against the worker's limit: the call fails, the grader finishes."""
    attention = textwrap.dedent(CORRECT.split("causal=True):\n", 1)[1])
    body = textwrap.dedent(MEMORY_HOGS[hog]) + "if not HELD:\n    raise MemoryError('the hoard was stopped')\n" + attention
    source = with_attention(body).replace("import torch", "import os, time, torch\nHELD = None  # the first call hoards, once", 1)
    submission = tmp_path / "hog.py"
    submission.write_text(source)
    run = run_cli([str(submission), "--seed", "7", "--no-preview", *LIMITS], tmp_path)
    assert run.code == 1 and run.report is not None and "Traceback" not in run.stderr, run.stderr
    assert run.check("causal_values")["status"] == "failed", run.check("causal_values")["message"]
    assert run.check("lambda_values")["status"] == "passed"


@CGROUPS
@pytest.mark.parametrize("hog", list(MEMORY_HOGS))
def test_a_memory_hog_does_not_cost_a_classmate_points(hog: str, tmp_path: Path) -> None:
    """A hog graded beside a correct classmate in one batch loses its own check; the classmate keeps 100/100."""
    room = tmp_path / "class"
    room.mkdir()
    attention = textwrap.dedent(CORRECT.split("causal=True):\n", 1)[1])
    body = textwrap.dedent(MEMORY_HOGS[hog]) + "if not HELD:\n    raise MemoryError('the hoard was stopped')\n" + attention
    source = with_attention(body).replace("import torch", "import os, time, torch\nHELD = None  # the first call hoards, once", 1)
    (room / "hog.py").write_text(source)
    (room / "victim.py").write_text((CORRECT_DIR / "einsum.py").read_text())
    rows = batch(room, tmp_path / "out", "--jobs", "2", "--memory-limit", "1200")
    assert rows["victim"]["score"] == "100.0", rows["victim"]
    assert float(rows["hog"]["score"]) < 100.0, rows["hog"]


# ---- the grading process protects itself (issue 10, items 5 and 6) -------------------------
# Attacks on the grading process rather than on the files around it: a reply far larger than
# the call needs, and a megabytes-long exception name. Each run measures the grader's own peak RSS.

GRADER_ATTACKS: dict[str, str] = {
    "huge_replies": "import torch\n\ndef differential_lambda(q1, k1, q2, k2, lambda_init=0.2):\n    return torch.zeros(16_000_000)\n\n"
    "def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):\n    return torch.zeros(16_000_000)\n",
    "long_type_name": "name = 'E' * 7_900_000\n"
    "exec(f'class {name}(Exception):\\n    pass\\nraise {name}(\"\\\\x1b[2J\\\\rboom\\\\n::error file=x::forged\")')\n",
}
# Peak RSS from VmHWM, which starts afresh at exec: getrusage's ru_maxrss would also count the parent's
# peak from before the fork (the test process, torch loaded when the whole suite runs).
MEASURE = (
    "import re, sys\nfrom grader.commands import launch\ntry:\n    launch.entry_point()\nexcept SystemExit as done:\n    code = done.code\n"
    "status = open('/proc/self/status').read()\n"
    "print(int(re.search(r'VmHWM:\\s+(\\d+)', status).group(1)) // 1024, file=sys.stderr)\nsys.exit(code)\n"
)


@pytest.fixture(scope="module")
def grader_attacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Graded, int, Path]]:
    """Each attack graded by the CLI in a process that prints its own peak RSS (MiB) last; two at a time."""
    import json
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    def attack(name: str) -> tuple[Graded, int, Path]:
        folder = tmp_path_factory.mktemp(name)
        (folder / "alice.py").write_text(GRADER_ATTACKS[name])
        command = [sys.executable, "-c", MEASURE, "alice.py", "--seed", "7", "--no-preview", "--audience", "instructor", "--quiet",
                   "--json", "report.json", "--html", "report.html", *LIMITS]  # fmt: skip
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
        report = json.loads((folder / "report.json").read_text())
        graded = Graded(done.returncode, done.stdout, done.stderr, report, (folder / "report.html").read_text())
        return graded, int(done.stderr.strip().splitlines()[-1]), folder

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(GRADER_ATTACKS, pool.map(attack, GRADER_ATTACKS)))


def test_huge_replies_are_refused_and_the_grader_stays_small(grader_attacks) -> None:
    """64 MB results on every call: each check fails saying expected versus got, and the grader peaks under 400 MiB (was 2.5 GB;
    the truths of the calls past 2048 tokens took it from under 300 to 312 MiB in the other attack)."""
    run, peak_mib, _ = grader_attacks["huge_replies"]
    assert run.code == 1 and run.report["score"] == 0.0
    assert run.check("lambda_values")["message"].startswith(
        "differential_lambda returned 16,000,000 elements where 4 were expected; the reply was refused"
    )
    assert "differential_attention returned 16,000,000 elements where 160 were expected; the reply was refused" in run.check("causal_values")["message"]
    assert run.report["worker"]["restarts"] <= 2
    assert peak_mib < 400, peak_mib


def test_a_long_exception_name_gives_small_clean_reports(grader_attacks) -> None:
    """A 7.9-million-character class name: the name is cut to 200 characters, the reports stay under 200 kB (were 213 and 221 MB),
    the grader under 400 MiB (312 measured once the truths of the calls past 2048 tokens were added)."""
    run, peak_mib, folder = grader_attacks["long_type_name"]
    load_error = run.report["submission"]["load_error"]
    name = load_error.removeprefix("importing the submission raised ").split(": ")[0]
    assert len(name) == 200 and name.endswith("more characters cut]"), name[-60:]
    assert "boom\n::error" in load_error and "\x1b" not in load_error and "\r" not in load_error
    assert (folder / "report.json").stat().st_size < 200_000
    assert (folder / "report.html").stat().st_size < 200_000
    assert all(c["message"] == load_error for t in run.report["tiers"] for c in t["checks"])
    assert peak_mib < 400, peak_mib
