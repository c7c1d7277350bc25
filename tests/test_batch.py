"""diffgrade batch: a class graded with one seed; gradebook, summary, resume, archives, isolation of failures."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, STUB, run_cli
from corpus.mutants import CORRECT_DIR, WRONG_DIR

from grader.reports.schema import validate

SEED = 4242
COLUMNS = ["student", "score", "max_score", "T1", "T2", "T3", "status", "sha256", "seed", "duration_s"]
VOLATILE = {"started_at", "duration_s", "submission_cpu_s", "path"}


@dataclass
class Batch:
    """One ``diffgrade batch`` run: exit code, streams, and the files it wrote."""

    code: int
    stdout: str
    stderr: str
    out: Path

    def grades(self) -> dict[str, dict[str, str]]:
        """grades.csv as rows keyed by student."""
        with open(self.out / "grades.csv", newline="") as stream:
            return {row["student"]: row for row in csv.DictReader(stream)}

    def summary(self) -> dict:
        """summary.json."""
        return json.loads((self.out / "summary.json").read_text())

    def report(self, student: str) -> dict:
        """One student's report.json."""
        return json.loads((self.out / student / "report.json").read_text())


def batch(submissions: Path, out: Path, *extra: str, timeout: float = 300) -> Batch:
    """Run ``python -m grader batch`` with the test seed and no preview."""
    command = [sys.executable, "-m", "grader", "batch", str(submissions), "--out", str(out), "--seed", str(SEED), "--no-preview", *extra]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return Batch(done.returncode, done.stdout, done.stderr, out)


@pytest.fixture(scope="module")
def classroom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five students: two correct files, a wrong one in a folder, the stub, a folder with two files, one that hangs."""
    room = tmp_path_factory.mktemp("class")
    shutil.copy(CORRECT_DIR / "einsum.py", room / "alice.py")
    shutil.copy(CORRECT_DIR / "row_loop.py", room / "bob.py")
    (room / "carol").mkdir()
    shutil.copy(WRONG_DIR / "logit_difference.py", room / "carol" / "solution.py")
    shutil.copy(STUB, room / "dave.py")
    (room / "erin").mkdir()
    for name in ("a.py", "b.py"):
        shutil.copy(CORRECT_DIR / "einsum.py", room / "erin" / name)
    (room / "frank.py").write_text((CORRECT_DIR / "einsum.py").read_text() + "\nimport time\ntime.sleep(3600)\n")
    (room / "notes.txt").write_text("not a submission")
    return room


@pytest.fixture(scope="module")
def graded(classroom: Path, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """The classroom graded once, two at a time, with a short call timeout for the one that hangs."""
    return batch(classroom, tmp_path_factory.mktemp("out") / "grades", "--jobs", "2", "--call-timeout", "3")


def test_gradebook_has_the_columns_and_one_row_per_student(graded: Batch) -> None:
    """grades.csv: the issue's columns, one row per student, the seed and the file's hash in each."""
    assert graded.code == 1, graded.stderr
    header = (graded.out / "grades.csv").read_text().splitlines()[0]
    assert header.split(",") == COLUMNS
    rows = graded.grades()
    assert sorted(rows) == ["alice", "bob", "carol", "dave", "erin", "frank"]
    assert {name: rows[name]["status"] for name in rows} == {
        "alice": "passed", "bob": "passed", "carol": "failed", "dave": "failed", "erin": "no_submission", "frank": "failed",
    }  # fmt: skip
    assert rows["alice"]["score"] == "100.0" and rows["alice"]["T2"] == "40.0" and rows["dave"]["score"] == "0.0"
    assert all(rows[name]["seed"] == str(SEED) for name in rows)
    assert rows["carol"]["sha256"] == __import__("hashlib").sha256((WRONG_DIR / "logit_difference.py").read_bytes()).hexdigest()


def test_each_student_gets_valid_reports(graded: Batch) -> None:
    """Every graded student has report.json (valid, instructor audience) and report.html; the folder problem is named."""
    for student in ("alice", "bob", "carol", "dave", "frank"):
        document = graded.report(student)
        assert validate(document) == [], student
        assert document["seed"] == SEED and document["audience"] == "instructor"
        assert (graded.out / student / "report.html").is_file()
    assert not (graded.out / "erin").exists()
    assert "holds 2 candidate files (a.py, b.py): keep exactly one" in graded.summary()["table"][4]["message"]


def test_a_hanging_submission_does_not_stop_the_batch(graded: Batch) -> None:
    """frank's import hangs: he gets 0 with the timeout named, and everyone after him is graded."""
    frank = graded.report("frank")
    assert frank["score"] == 0.0
    assert "did not finish within 3 s" in frank["submission"]["load_error"]


def test_summary_counts_and_failure_rates(graded: Batch) -> None:
    """summary.json: students, statuses, histogram totals and the failure rate of a check the stub and carol fail."""
    summary = graded.summary()
    assert summary["students"] == 6 and summary["complete"] is True and summary["seed"] == SEED
    assert summary["statuses"] == {"passed": 2, "failed": 3, "no_submission": 1}
    assert sum(b["count"] for b in summary["histogram"]) == 5
    assert summary["histogram"][-1]["count"] == 2  # alice and bob: 100 falls in the last bin
    causal = next(c for c in summary["checks"] if c["id"] == "causal_values")
    assert (causal["failed"], causal["graded"]) == (3, 5)
    html = (graded.out / "summary.html").read_text()
    assert '<a href="alice/report.html">alice</a>' in html and "<svg" in html and "http" not in html.replace("http-equiv", "")


def test_progress_is_plain_lines_when_not_a_terminal(graded: Batch) -> None:
    """Without a terminal, each student gets one line: count, name, score, status."""
    lines = [line for line in graded.stderr.splitlines() if line.startswith("[")]
    assert len(lines) == 6
    assert any(line.startswith("[") and "alice: 100/100 passed" in line for line in lines)
    assert "6 students: 5 graded" in graded.stdout


def test_batch_and_alone_give_the_same_report(graded: Batch, tmp_path: Path) -> None:
    """carol graded alone with the batch's seed gets the same report, timings and paths aside."""
    alone = run_cli([str(WRONG_DIR / "logit_difference.py"), "--seed", str(SEED), "--no-preview"], tmp_path)

    def stable(value: object) -> object:
        if isinstance(value, dict):
            return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [stable(v) for v in value]
        return value

    assert alone.report is not None
    assert stable(alone.report) == stable(graded.report("carol"))


def test_resume_skips_unchanged_students_and_regrades_changed_ones(classroom: Path, tmp_path: Path) -> None:
    """A second run grades nothing; a changed file is graded again; --force grades everyone."""
    room = tmp_path / "room"
    shutil.copytree(classroom, room)
    shutil.rmtree(room / "erin")
    (room / "frank.py").unlink()
    first = batch(room, tmp_path / "out")
    assert "4 students: 4 graded" in first.stdout
    stamp = (tmp_path / "out" / "alice" / "report.json").stat().st_mtime_ns
    again = batch(room, tmp_path / "out")
    assert "4 students: 0 graded" in again.stdout and "4 unchanged" in again.stdout
    assert (tmp_path / "out" / "alice" / "report.json").stat().st_mtime_ns == stamp
    assert again.grades() == first.grades()
    shutil.copy(STUB, room / "bob.py")
    changed = batch(room, tmp_path / "out")
    assert "4 students: 1 graded" in changed.stdout
    assert changed.grades()["bob"]["score"] == "0.0"
    assert "4 students: 4 graded" in batch(room, tmp_path / "out", "--force").stdout


def test_a_killed_batch_leaves_whole_files_and_resumes(classroom: Path, tmp_path: Path) -> None:
    """SIGKILL mid-batch: no half-written file, no process left; the rerun grades only the rest."""
    room = tmp_path / "room"
    room.mkdir()
    for i in range(6):
        shutil.copy(CORRECT_DIR / "einsum.py", room / f"s{i}.py")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(out), "--seed", str(SEED), "--no-preview", "--jobs", "1"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "s1" / "report.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(1)
    leftovers = [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    for report in out.glob("*/report.json"):
        assert validate(json.loads(report.read_text())) == []
    done_before = len(list(out.glob("*/report.json")))
    assert 2 <= done_before < 6
    rerun = batch(room, out, "--jobs", "1")
    assert f"6 students: {6 - done_before} graded" in rerun.stdout, rerun.stdout
    assert all(row["score"] == "100.0" for row in rerun.grades().values())


def test_a_zip_of_the_class_is_graded_like_the_folder(tmp_path: Path) -> None:
    """A zip with one top folder holding a file and a student folder: both students graded."""
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.write(CORRECT_DIR / "einsum.py", "submissions/alice.py")
        bundle.write(STUB, "submissions/bob/diff_attention.py")
    done = batch(archive, tmp_path / "out")
    assert done.code == 1, done.stderr
    assert {k: v["score"] for k, v in done.grades().items()} == {"alice": "100.0", "bob": "0.0"}


@pytest.mark.parametrize(
    ("setup", "fragment"),
    [
        ("missing", "submissions not found"),
        ("escaping_zip", "has a member outside the archive's folder: '../evil.py'"),
        ("not_a_zip", "is not a readable zip archive"),
        ("out_is_a_file", "argument --out: must be a folder"),
        ("foreign_out", "holds files but no earlier batch"),
        ("empty_class", "no submissions in"),
    ],
)
def test_unusable_input_is_a_one_line_usage_error(setup: str, fragment: str, tmp_path: Path) -> None:
    """Each bad class or output folder exits 2 with one specific line and no traceback."""
    source, out = tmp_path / "class", tmp_path / "out"
    source.mkdir()
    shutil.copy(CORRECT_DIR / "einsum.py", source / "alice.py")
    if setup == "missing":
        source = tmp_path / "nowhere"
    elif setup == "escaping_zip":
        source = tmp_path / "evil.zip"
        with zipfile.ZipFile(source, "w") as bundle:
            bundle.writestr("../evil.py", "x = 1\n")
    elif setup == "not_a_zip":
        source = tmp_path / "class.zip"
        source.write_text("not a zip")
    elif setup == "out_is_a_file":
        out.write_text("")
    elif setup == "foreign_out":
        out.mkdir()
        (out / "thesis.tex").write_text("keep me")
    elif setup == "empty_class":
        (source / "alice.py").unlink()
    done = batch(source, out)
    assert done.code == 2, done.stderr
    assert fragment in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_resuming_with_another_seed_is_refused(tmp_path: Path) -> None:
    """An output folder graded with one seed refuses another unless --force."""
    room = tmp_path / "room"
    room.mkdir()
    shutil.copy(STUB, room / "dave.py")
    assert batch(room, tmp_path / "out").code == 1
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(tmp_path / "out"), "--seed", "7", "--no-preview"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"was graded with seed {SEED}" in done.stderr
    assert os.path.exists(tmp_path / "out" / "dave" / "report.json")


def test_progress_bar_shows_count_rate_and_time_left() -> None:
    """On a terminal the bar is redrawn in place with done/total, a rate and the time left; the last draw ends the line."""
    from grader.commands.batch import bar_progress

    stream = io.StringIO()
    show = bar_progress(stream, width=10)
    record = {"student": "alice", "score": 100.0, "max_score": 100.0, "status": "passed", "duration_s": 0.5}
    time.sleep(0.05)
    show(record, 1, 4)
    first = stream.getvalue()
    assert first.startswith("\r[##........] 1/4") and "/s" in first and "s left" in first and not first.endswith("\n")
    show(record, 4, 4)
    assert stream.getvalue().split("\r")[-1].startswith("[##########] 4/4") and stream.getvalue().endswith("\n")


def test_symbolic_links_in_the_class_are_not_followed(tmp_path: Path) -> None:
    """A linked file, or a link inside a student's folder, is never read: the student gets a problem instead."""
    from grader.core.submissions import discover

    secret = tmp_path / "secret.py"
    secret.write_text("x = 'outside the class'\n")
    room = tmp_path / "room"
    (room / "bob").mkdir(parents=True)
    shutil.copy(CORRECT_DIR / "einsum.py", room / "alice.py")
    (room / "eve.py").symlink_to(secret)
    (room / "bob" / "solution.py").symlink_to(secret)
    entries = {e.student: e for e in discover(room)}
    assert entries["alice"].path == room / "alice.py"
    assert entries["eve"].path is None and "is a symbolic link, which is not followed" in entries["eve"].problem
    assert entries["bob"].path is None and entries["bob"].problem == "the folder bob/ holds no .py or .ipynb file"


def test_a_student_cannot_read_classmates_or_the_reports(tmp_path: Path) -> None:
    """A submission that runs a classmate's file, or looks into --out, finds neither: it scores what it wrote."""
    room = tmp_path / "room"
    room.mkdir()
    shutil.copy(CORRECT_DIR / "einsum.py", room / "alice.py")
    out = tmp_path / "out"
    (room / "zed.py").write_text(textwrap.dedent(f"""
        import glob, os
        seen = [p for p in glob.glob({str(room)!r} + "/*.py") + glob.glob({str(out)!r} + "/*/report.json") if "zed" not in p]
        readable = []
        for path in seen:
            try:
                readable.append(open(path).read())
            except OSError:
                pass
        for text in readable:
            if "def differential_attention" in text:
                exec(text)
    """))
    done = batch(room, out, "--jobs", "1")
    rows = done.grades()
    assert rows["alice"]["score"] == "100.0"
    assert rows["zed"]["score"] == "0.0", done.report("zed")["submission"]


def test_settings_must_match_to_resume_and_out_must_not_be_inside_the_class(tmp_path: Path) -> None:
    """Resuming with another audience is refused (reports would keep the old one); --out inside the class is refused."""
    room = tmp_path / "room"
    room.mkdir()
    shutil.copy(STUB, room / "dave.py")
    assert batch(room, tmp_path / "out").code == 1
    changed = batch(room, tmp_path / "out", "--audience", "student")
    assert changed.code == 2 and "was graded with audience 'instructor'" in changed.stderr
    inside = batch(room, room / "grades")
    assert inside.code == 2 and "must not be inside the class folder" in inside.stderr


def test_students_with_the_same_name_keep_their_own_rows(tmp_path: Path) -> None:
    """alice.py beside alice/ are two students, each with a distinct name and folder."""
    from grader.core.submissions import discover

    room = tmp_path / "room"
    (room / "alice").mkdir(parents=True)
    shutil.copy(CORRECT_DIR / "einsum.py", room / "alice.py")
    shutil.copy(STUB, room / "alice" / "mine.py")
    entries = discover(room)
    assert [(e.student, e.path.name) for e in entries] == [("alice (alice/)", "mine.py"), ("alice (alice.py)", "alice.py")]
    assert len({e.folder for e in entries}) == 2


def test_gradebook_names_cannot_run_as_spreadsheet_formulas() -> None:
    """A student name starting with = is written with a leading quote."""
    from grader.commands.batch import gradebook

    record = {"student": "=HYPERLINK(1)", "score": 0.0, "max_score": 100.0, "tiers": {}, "status": "failed",
              "sha256": None, "seed": 1, "duration_s": 0.1}  # fmt: skip
    assert gradebook([record], ["T1"]).splitlines()[1].startswith("'=HYPERLINK(1),0.0,100.0,")


class _LiveForks:
    """Stands in for the fork server in the scheduling tests: always alive, never asked for a worker."""

    def alive(self) -> bool:
        """The server is up."""
        return True


def _schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behave: dict[str, str], jobs: int = 2) -> tuple[dict[str, dict], list[int]]:
    """Run the batch's scheduler over students named in ``behave`` ("ok", "die" or "hang"); their records and grader pids."""
    from grader.commands import batch as batch_module
    from grader.core.session import Preview, RunOptions
    from grader.core.submissions import Entry
    from grader.exercises.diffattn import exercise
    from grader.worker.client import WorkerLimits

    for name in behave:
        (tmp_path / f"{name}.py").write_text("pass\n")
    entries = [Entry(name, name, tmp_path / f"{name}.py") for name in behave]

    def grade_student(exercise_, entry, batch, forks, preview, run_checks):  # type: ignore[no-untyped-def]
        if behave[entry.student] == "die":
            os._exit(9)
        if behave[entry.student] == "hang":
            time.sleep(60)
        return {"student": entry.student, "folder": entry.folder, "status": "passed", "pid": os.getpid()}

    monkeypatch.setattr(batch_module, "grade_student", grade_student)
    monkeypatch.setattr(batch_module, "run_session", lambda exercise_, tiers, body: body(lambda context: []))
    monkeypatch.setattr(batch_module, "GRACE_S", 1.0)
    limits = WorkerLimits(budget_s=0.5, startup_timeout_s=0.1, call_timeout_s=0.1)
    options = RunOptions(submission=tmp_path, seed=1, tiers=("T1",), limits=limits)
    batch = batch_module.BatchOptions(tmp_path / "out", jobs, False, options)
    records: dict[str, dict] = {}
    pending = batch_module.deque(entries)
    batch_module._grade_all(exercise(), pending, batch, _LiveForks(), Preview(None, "none"), records, len(entries), lambda *_: None)  # type: ignore[arg-type]
    return records, [r["pid"] for r in records.values() if "pid" in r]


def test_a_grading_process_that_dies_costs_only_its_student(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dying student gets an error record naming the exit code; a new process grades the others."""
    behave = {"ann": "ok", "bob": "die", "cid": "ok", "dan": "ok", "eve": "ok"}
    records, pids = _schedule(tmp_path, monkeypatch, behave, jobs=1)
    assert records["bob"]["status"] == "error"
    assert records["bob"]["message"] == "the grading process ended without a result (exit code 9)"
    assert [records[n]["status"] for n in ("ann", "cid", "dan", "eve")] == ["passed"] * 4
    assert len(set(pids)) == 2, "one process before bob, one after: students share a grading process"


def test_a_grading_process_past_its_deadline_is_killed_and_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadline = budget + start + two calls + grace: the hanging student's process is killed, the rest are graded."""
    behave = {"ann": "hang", "bob": "ok", "cid": "ok"}
    started = time.monotonic()
    records, _ = _schedule(tmp_path, monkeypatch, behave)
    assert time.monotonic() - started < 10
    assert records["ann"]["status"] == "error" and records["ann"]["message"].startswith("grading took longer than")
    assert records["bob"]["status"] == records["cid"]["status"] == "passed"


def test_a_student_sent_to_a_vanished_grading_process_stays_unassigned() -> None:
    """Writing to a grading process that is gone is no error of the batch: the student waits for another process."""
    from grader.commands.batch import _Grader
    from grader.core.submissions import Entry

    orders_read, orders_write = os.pipe()
    results_read, results_write = os.pipe()
    os.close(orders_read)
    grader = _Grader(os.getpid(), orders_write, results_read)
    try:
        assert grader.assign(0, Entry("ann", "ann", Path("ann.py")), 60.0) is False
        assert grader.entry is None
    finally:
        for fd in (orders_write, results_read, results_write):
            os.close(fd)


# ---- student names cannot inject log lines (issue 10, item 6) ---------------------------------

FORGED = "mallory\n::error file=grades.csv::all students failed\x1b[2K\r"


def test_a_file_name_cannot_write_its_own_log_line(tmp_path: Path) -> None:
    """A name holding a newline, ::error, an escape and a carriage return stays on its progress line, CSV cell and summary row, escaped."""
    room = tmp_path / "room"
    room.mkdir()
    shutil.copy(STUB, room / f"{FORGED}.py")
    shutil.copy(STUB, room / "zoe.py")
    done = batch(room, tmp_path / "out", "--jobs", "1", "--tiers", "T1")
    shown = "mallory\\n::error file=grades.csv::all students failed\\x1b[2K\\r"
    assert not any(line.startswith("::") for line in done.stderr.splitlines() + done.stdout.splitlines())
    assert "\x1b" not in done.stderr and "\r" not in done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 2 and progress[0].startswith(f"[1/2] {shown}: 0/")
    assert set(done.grades()) == {shown, "zoe"}
    assert [row["student"] for row in done.summary()["table"]] == [shown, "zoe"]
    folder = next(p for p in done.out.iterdir() if p.name.startswith("mallory"))
    assert "\n" not in done.report(folder.name)["submission"]["path"]


def test_names_in_problems_and_records_are_one_line(tmp_path: Path) -> None:
    """discover() escapes names in students and problems; the gradebook and progress escape whatever record reaches them."""
    from grader.commands.batch import gradebook, plain_progress
    from grader.core.submissions import discover

    room = tmp_path / "room"
    (room / "eve\u202e").mkdir(parents=True)
    entries = discover(room)
    assert [(e.student, e.problem) for e in entries] == [("eve\\u202e", "the folder eve\\u202e/ holds no .py or .ipynb file")]
    record = {"student": "a\nb", "score": 0.0, "max_score": 1.0, "tiers": {}, "status": "failed", "sha256": None, "seed": 1, "duration_s": 0.1}
    assert gradebook([record], []).splitlines()[1].startswith("a\\nb,0.0,1.0,")
    stream = io.StringIO()
    plain_progress(stream)(record, 1, 1)
    assert stream.getvalue() == "[1/1] a\\nb: 0/1 failed (0.1 s)\n"
