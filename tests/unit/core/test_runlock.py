"""assocmem.runlock: a killed run's lock is stale, a live run's is not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assocmem import runlock
from assocmem.errors import AssocmemError


def test_the_work_directory_is_snakemakes(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert runlock.work_directory(["--cores", "2"]) == tmp_path.resolve()
    assert runlock.work_directory(["--directory", "sub"]) == (tmp_path / "sub").resolve()
    assert runlock.work_directory(["-d", "/x/y"]) == Path("/x/y")
    assert runlock.work_directory(["--directory=/x/z", "--cores", "1"]) == Path("/x/z")


@pytest.mark.skipif(not runlock.PROC.is_dir(), reason="needs /proc (Linux)")
def test_a_lock_is_stale_only_when_no_snakemake_works_in_the_directory(tmp_path) -> None:
    assert not runlock.stale_lock(tmp_path)  # no lock at all
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    assert runlock.stale_lock(tmp_path)
    # a stand-in for a live run: its argv names snakemake and its working directory is the locked one
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "snakemake"], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10  # until the child has exec'ed (its argv and cwd are visible)
        while runlock.live_runs(tmp_path.resolve(), exclude=set()) != [live.pid] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runlock.live_runs(tmp_path.resolve(), exclude=set()) == [live.pid]
        assert not runlock.stale_lock(tmp_path, looks=2, interval=0.01)
    finally:
        live.kill()
        live.wait()
    assert runlock.stale_lock(tmp_path)


@pytest.fixture
def holder():
    """A live process to stand in for another checkout's Snakemake main process."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def write_claim(results: Path, pid: int, checkout: str = "/elsewhere/A", workdir: str = "/elsewhere/wd",
                host: str | None = None) -> None:
    results.mkdir(parents=True, exist_ok=True)
    record = {"checkout": checkout, "workdir": workdir, "host": host or socket.gethostname(), "pid": pid,
              "since": "2026-01-01T00:00:00+00:00"}
    (results / runlock.CLAIM).write_text(json.dumps(record))


def test_a_live_run_of_another_checkout_is_refused(tmp_path, monkeypatch, holder) -> None:
    monkeypatch.chdir(tmp_path)
    write_claim(tmp_path / "results", holder.pid)
    for check in (runlock.check_claim, runlock.claim):
        with pytest.raises(runlock.ResultsDirBusy) as refused:
            check("results", tmp_path / "B")
        message = str(refused.value)
        assert str((tmp_path / "results").resolve()) in message and "/elsewhere/A" in message
        assert f"process {holder.pid}" in message and "another results_dir" in message
    assert runlock.read_claim("results")["checkout"] == "/elsewhere/A"  # not overwritten


def test_another_working_directory_of_the_same_checkout_is_refused(tmp_path, monkeypatch, holder) -> None:
    (tmp_path / "wd").mkdir()
    monkeypatch.chdir(tmp_path / "wd")
    write_claim(tmp_path / "results", holder.pid, checkout=str(tmp_path / "A"), workdir=str(tmp_path))
    with pytest.raises(runlock.ResultsDirBusy):
        runlock.check_claim(tmp_path / "results", tmp_path / "A")


def test_the_same_checkout_and_working_directory_pass(tmp_path, monkeypatch, holder) -> None:
    """The run's own jobs parse the workflow again while it holds the claim."""
    monkeypatch.chdir(tmp_path)
    write_claim(tmp_path / "results", holder.pid, checkout=str(tmp_path / "A"), workdir=str(tmp_path))
    runlock.check_claim(tmp_path / "results", tmp_path / "A")


def test_a_claim_whose_process_is_gone_is_stale(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    write_claim(tmp_path / "results", gone.pid)
    runlock.claim(tmp_path / "results", tmp_path / "B")  # overwritten
    record = runlock.read_claim(tmp_path / "results")
    assert record["checkout"] == str((tmp_path / "B").resolve()) and record["pid"] == os.getpid()


@pytest.mark.skipif(not runlock.PROC.is_dir(), reason="needs /proc (Linux)")
def test_a_reused_pid_is_no_holder(tmp_path, monkeypatch, holder) -> None:
    monkeypatch.chdir(tmp_path)
    write_claim(tmp_path / "results", holder.pid)
    record = json.loads((tmp_path / "results" / runlock.CLAIM).read_text())
    (tmp_path / "results" / runlock.CLAIM).write_text(json.dumps({**record, "process_start": 1}))
    runlock.check_claim(tmp_path / "results", tmp_path / "B")


def test_another_hosts_claim_cannot_be_checked_and_is_overwritten(tmp_path, monkeypatch, holder) -> None:
    monkeypatch.chdir(tmp_path)
    write_claim(tmp_path / "results", holder.pid, host="another-host.invalid")
    runlock.claim(tmp_path / "results", tmp_path / "B")
    assert runlock.read_claim(tmp_path / "results")["host"] == socket.gethostname()


@pytest.mark.parametrize("content", ["{not json", "[]", '{"checkout": "/a"}',
                                     '{"checkout": "/a", "workdir": "/w", "host": "h", "pid": 0}'])
def test_an_unreadable_claim_is_ignored(tmp_path, monkeypatch, content) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / runlock.CLAIM).write_text(content)
    assert runlock.read_claim(tmp_path / "results") is None
    runlock.check_claim(tmp_path / "results", tmp_path / "B")


def test_a_claim_is_released_only_by_its_run(tmp_path, monkeypatch, holder) -> None:
    monkeypatch.chdir(tmp_path)
    runlock.claim("results", tmp_path / "A")
    record = runlock.read_claim("results")
    assert record == {**record, "checkout": str((tmp_path / "A").resolve()), "workdir": str(tmp_path.resolve()),
                      "host": socket.gethostname(), "pid": os.getpid()}
    assert [p.name for p in (tmp_path / "results").iterdir()] == [runlock.CLAIM]  # no temporary file left
    runlock.release("results")
    assert not (tmp_path / "results" / runlock.CLAIM).exists()
    runlock.release("results")  # nothing to release
    write_claim(tmp_path / "results", holder.pid)
    runlock.release("results")  # another run's claim stays
    assert runlock.read_claim("results")["pid"] == holder.pid


@pytest.mark.parametrize(("results_dir", "expected"), [
    ("", "results_dir is empty: give a directory (default: results)"),
    ("  ", "results_dir is empty"),
    ("/", "results_dir: '/' is the file system's root"),
    ("CHECKOUT", "is the checkout itself, where the results would mix with the code"),
    ("FILE/results", "results_dir: FILE is a file, not a directory"),
    ("/proc/x", "results_dir: cannot create /proc/x (creating a directory in /proc fails: "),
], ids=["empty", "blank", "root", "the checkout", "under a file", "/proc/x"])
def test_a_results_dir_the_run_must_not_or_cannot_write_is_refused(tmp_path, results_dir, expected) -> None:
    """Issue 39: `results_dir: ''` wrote into the checkout, `/` wrote /qf, /report, /logs, and `/proc/x` failed in a
    traceback from the start-up hook; each is now one line before anything runs, and nothing is created."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (tmp_path / "file").write_text("x")
    value = results_dir.replace("CHECKOUT", str(checkout)).replace("FILE", str(tmp_path / "file"))
    if results_dir == "/proc/x" and not Path("/proc").is_dir():
        pytest.skip("needs /proc")
    with pytest.raises(AssocmemError) as err:
        runlock.check_results_dir(value, checkout)
    assert expected.replace("FILE", str(tmp_path / "file")) in str(err.value) and "\n" not in str(err.value)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkout", "file"]


def test_a_writable_results_dir_passes_and_is_not_created(tmp_path) -> None:
    runlock.check_results_dir(str(tmp_path / "new" / "results"), tmp_path / "checkout")
    runlock.check_results_dir(".", tmp_path)  # the checkout, written explicitly
    assert list(tmp_path.iterdir()) == []


def test_a_claim_that_cannot_be_written_is_one_line(tmp_path, monkeypatch) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(AssocmemError, match=r"results_dir .*file/results: cannot write there \(Not a "
                                                    r"directory\); give results_dir a directory this user can write"):
        runlock.claim(tmp_path / "file" / "results", tmp_path)
