"""assocmem.runlock: a killed run's lock is stale, a live run's is not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from assocmem import runlock


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
