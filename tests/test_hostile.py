"""Hostile and broken submissions: graded to the end, nothing credited, nothing outside changed.

Every submission here is graded by the real CLI in its own classroom folder
holding sentinels: a classmate's file, an earlier report, and a copy of the
reference passed with --reference (so the worker must not read it). After the
run no sentinel may have changed and no process the submission started may
still exist. Limits are kept small so that the suite is safe on a 2-core CI
machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REFERENCE, Graded, run_cli

MARKER = "diffgrade-hostile-marker"
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
    """Command lines of live processes that carry the marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if MARKER in cmdline:
                found.append(cmdline)
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
        import os, subprocess
        subprocess.Popen(["/bin/sh", "-c", "sleep 600; : {MARKER}"], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 600; : {MARKER}"])
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
        args = [str(room.submission), "--seed", "7", "--reference", str(room.reference), *LIMITS]
        return run_cli(args, room.root, reports=room.reports)

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
    from grader.schema import validate

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
    "reads_reference": ("causal_values", "raised FileNotFoundError"),  # its folder is hidden
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
    """A (output, maps) tuple is called a tuple of 2 items."""
    run = hostile_runs["returns_none_and_tuple"][2]
    assert "returned a builtins.tuple of 2 item(s); expected one torch.Tensor" in messages(run, "attention_returns_one_tensor")


def test_working_functions_keep_their_points(hostile_runs) -> None:
    """Crashes, hangs and exits in differential_attention do not cost differential_lambda its checks."""
    for name in ("os_exit_in_call", "segfault", "infinite_loop", "signals_parent", "memory_hog"):
        run = hostile_runs[name][2]
        assert run.check("lambda_values")["status"] == "passed", name
        assert run.check("lambda_gradients")["status"] == "passed", name
        assert run.tier("T2")["score"] == 6.0, name


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


def test_exception_shows_only_the_students_frames(hostile_runs) -> None:
    """The traceback lists alice.py's lines and none of the grader's."""
    message = hostile_runs["deep_exception"][2].check("causal_values")["message"]
    assert 'File "alice.py", line' in message and "in helper" in message
    assert "child.py" not in message and "grader" not in message


def test_reports_say_which_protections_applied(hostile_runs) -> None:
    """The report lists the protections; as root here, all of them."""
    worker = hostile_runs["vandal"][2].report["worker"]
    if os.geteuid() == 0:
        assert worker["protections"] == {"network": True, "pid_namespace": True, "filesystem": True, "unprivileged_user": True}
        assert worker["warnings"] == []
    else:
        assert worker["warnings"]
