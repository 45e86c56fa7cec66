"""The test suite's own machinery: what pytest-xdist workers share and what each keeps."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers import once_per_test_run


class SharedTemp:
    """A worker's tmp_path_factory: its base directory under one session directory, as pytest-xdist lays them out."""

    def __init__(self, session: Path, worker: str) -> None:
        self.base = session / f"popen-{worker}"
        self.base.mkdir(parents=True, exist_ok=True)

    def getbasetemp(self) -> Path:
        return self.base


def test_two_workers_share_one_making_and_its_text(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    made: list[Path] = []
    entered = threading.Barrier(2)

    def make(directory: Path) -> str:
        made.append(directory)
        (directory / "out.txt").write_text("done")
        return "terminal text"

    def worker(name: str, answers: dict) -> None:
        entered.wait()
        answers[name] = once_per_test_run(SharedTemp(tmp_path, name), "run", make)

    answers: dict = {}
    threads = [threading.Thread(target=worker, args=(name, answers)) for name in ("gw0", "gw1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [tmp_path / "run"]
    assert answers["gw0"] == answers["gw1"] == (tmp_path / "run", "terminal text")
    assert (tmp_path / "run" / "out.txt").read_text() == "done"


def test_a_failed_making_is_made_again_by_the_next_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    def fail(directory: Path) -> str:
        (directory / "half.txt").write_text("half")
        raise RuntimeError("snakemake failed")

    with pytest.raises(RuntimeError):
        once_per_test_run(SharedTemp(tmp_path, "gw0"), "run", fail)
    directory, text = once_per_test_run(SharedTemp(tmp_path, "gw1"), "run", lambda directory: "second")
    assert text == "second" and not (directory / "half.txt").exists()


def test_without_workers_each_session_makes_its_own(tmp_path, monkeypatch, tmp_path_factory):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    directory, text = once_per_test_run(tmp_path_factory, "alone", lambda directory: directory.name)
    assert directory.parent == tmp_path_factory.getbasetemp() and text == directory.name
