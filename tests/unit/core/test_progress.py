"""Progress lines on the terminal (assocmem.progress): the rate policy, the line, the status descriptor."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem import progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def ticker(total: int | None = 1000, **kwargs) -> tuple[progress.Ticker, FakeClock, list[str]]:
    clock, lines = FakeClock(), []
    return progress.Ticker("train L4/pct100", total, "step", clock=clock, emit=lines.append, **kwargs), clock, lines


def test_the_line_reads_like_nanogpt() -> None:
    tick, clock, lines = ticker(7000)
    clock.now = 60.0
    line = tick.update(3500, {"val": "1.021", "best": "1.019"})
    assert line == "train L4/pct100  step 3500/7000  val 1.021  best 1.019  ETA 1 m" and lines == [line]


def test_a_line_at_each_tenth_but_not_more_often_than_min_gap() -> None:
    tick, clock, lines = ticker(100)
    for step in range(1, 100):
        clock.now = step * 1.0  # one step a second: a tenth every 10 s
        tick.update(step)
    assert [line.split()[3] for line in lines] == [f"{n}/100" for n in range(10, 100, 10)]


def test_fast_work_prints_nothing_and_slow_work_every_max_gap() -> None:
    tick, clock, lines = ticker(100)
    for step in range(1, 100):
        clock.now = step * 0.04  # the whole loop in 4 s: below min_gap
        tick.update(step)
    assert lines == []
    tick, clock, lines = ticker(1_000_000)
    for step in range(1, 200):
        clock.now = step * 1.0  # a tenth would take days: a line every 20 s anyway
        tick.update(step)
    assert len(lines) == 9


def test_no_line_once_the_work_is_done_and_none_without_a_total() -> None:
    tick, clock, lines = ticker(10)
    clock.now = 100.0
    assert tick.update(10) is None and lines == []
    tick, clock, lines = ticker(None)
    clock.now = 31.0
    assert tick.update(5) == "train L4/pct100  step 5" and len(lines) == 1


@given(st.lists(st.floats(min_value=0.0, max_value=20.0), min_size=1, max_size=300),
       st.integers(min_value=1, max_value=10_000))
@settings(max_examples=200, deadline=None)
def test_lines_are_never_closer_than_min_gap_nor_silences_longer_than_max_gap(gaps, total) -> None:
    tick, clock, lines = ticker(total)
    times = []
    tick.emit = lambda line: times.append(clock.now)
    for step, gap in enumerate(gaps, start=1):
        clock.now += gap
        tick.update(min(step, total - 1))
    previous = 0.0
    for moment in times:
        assert moment - previous >= tick.min_gap
        previous = moment
    # a silence longer than max_gap + the longest gap between updates is impossible
    assert clock.now - previous <= tick.max_gap + max(gaps)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0 s"), (42.4, "42 s"), (150, "2 m"), (3900, "1 h 05 m")])
def test_eta_format(seconds, text) -> None:
    assert progress.format_eta(seconds) == text


def test_status_line_goes_to_the_descriptor_the_rule_opened(monkeypatch) -> None:
    read, write = os.pipe()
    monkeypatch.setenv(progress.STATUS_FD, str(write))
    assert progress.status_line("train tiny/pct100  step 1/2")
    os.close(write)
    assert os.read(read, 1000) == b"assocmem: train tiny/pct100  step 1/2\n"
    os.close(read)
    monkeypatch.delenv(progress.STATUS_FD)
    assert not progress.status_line("nowhere")


def test_the_bar_feeds_its_postfix_to_the_terminal_line(tmp_path) -> None:
    clock, lines = FakeClock(), []
    bar = progress.bar(total=10, desc="evaluate tiny/pct100", unit="sequence", file=(tmp_path / "log").open("w"))
    assert isinstance(bar._ticker, progress.Ticker)  # an enabled bar has one
    bar._ticker = progress.Ticker("evaluate tiny/pct100", 10, "sequence", clock=clock, emit=lines.append)
    bar.set_postfix(ce="2.85")
    clock.now = 40.0
    bar.update(5)
    bar.close()
    assert "sequence" in (tmp_path / "log").read_text()  # the tqdm bar still goes to the job's log
    assert lines == ["evaluate tiny/pct100  sequence 5/10  ce 2.85  ETA 40 s"]


def test_a_progress_line_names_the_job_it_belongs_to(tmp_path) -> None:
    log = (tmp_path / "log").open("w")
    progress.set_job("neighbours L4/pct100")
    try:
        assert progress.bar(total=4, desc="knn (cpu)", unit="block", file=log)._ticker.label == \
            "neighbours L4/pct100: knn (cpu)"
        progress.set_job("train L4/pct100")
        assert progress.bar(total=4, desc="train L4/pct100", unit="step", file=log)._ticker.label == "train L4/pct100"
    finally:
        progress.set_job("")


def test_a_stage_that_prints_nothing_gets_a_heartbeat_line() -> None:
    lines: list[str] = []
    with progress.Heartbeat("report", gap=0.05, emit=lines.append):
        time.sleep(0.4)
    assert lines and all(line.startswith("report  running  ") for line in lines)
    quiet: list[str] = []
    with progress.Heartbeat("report", gap=5.0, emit=quiet.append):
        time.sleep(0.1)
    assert quiet == []  # a stage shorter than the gap says nothing but its final line
