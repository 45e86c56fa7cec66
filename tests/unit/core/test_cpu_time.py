"""A job's CPU time split three ways (assocmem.runtime.cpu_time), and the report's BLAS kept to one thread
(assocmem.runtime.blas.one_blas_thread)."""

import multiprocessing
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assocmem.runtime.cpu_time import CpuSnapshot, cpu_split, parse_cpu_line, process_age


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_split_names_each_part_and_the_load():
    start = CpuSnapshot(wall=10.0, process=1.0, main_thread=0.5, children=2.0)
    end = CpuSnapshot(wall=14.0, process=6.0, main_thread=3.5, children=5.0)
    assert cpu_split(start, end) == ("CPU 8.0 s in 4.0 s of wall (2.00 cores): main thread 3.0 s, the process's "
                                     "other threads 2.0 s, child processes waited for 3.0 s")


def test_without_a_thread_clock_the_process_is_one_part():
    start, end = CpuSnapshot(0.0, 0.0, None, 0.0), CpuSnapshot(2.0, 1.0, None, 0.5)
    assert cpu_split(start, end) == ("CPU 1.5 s in 2.0 s of wall (0.75 cores): this process 1.0 s, child processes "
                                     "waited for 0.5 s")


def test_the_line_says_when_the_stage_began_and_reads_back():
    start = CpuSnapshot(wall=10.0, process=1.0, main_thread=0.5, children=2.0, age=1.25)
    end = CpuSnapshot(wall=14.0, process=6.0, main_thread=3.5, children=5.0, age=5.25)
    line = cpu_split(start, end)
    assert line.startswith("began 1.2 s after its process started; CPU 8.0 s in 4.0 s of wall")
    assert parse_cpu_line(f"2026-11-29 INFO assocmem: report: {line}") == {
        "began": 1.2, "cpu": 8.0, "wall": 4.0, "load": 2.0, "main_thread": 3.0, "other_threads": 2.0, "children": 3.0}
    assert parse_cpu_line("report: results/report/index.html: 4 reproduced in 11.5 s") is None


seconds = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)


@given(st.floats(min_value=0.01, max_value=1e4), seconds, seconds, seconds, st.one_of(st.none(), seconds),
       st.booleans())
def test_parse_reads_every_number_to_its_printed_rounding(wall, main, other, children, started, thread_clock):
    start = CpuSnapshot(0.0, 0.0, 0.0 if thread_clock else None, 0.0, started)
    end = CpuSnapshot(wall, main + other, main if thread_clock else None, children, None)
    got = parse_cpu_line(cpu_split(start, end))
    assert got["began"] == (None if started is None else round(started, 1))
    assert got["wall"] == round(wall, 1) and got["children"] == round(children, 1)
    assert got["cpu"] == round(main + other + children, 1)
    assert (got["main_thread"] is None) == (not thread_clock)
    if thread_clock:
        assert got["main_thread"] == round(main, 1)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc: process_age is None there")
def test_process_age_is_this_process_s_running_time():
    import psutil

    age = process_age()
    assert age is not None
    # psutil's start time is counted from the boot time in whole seconds: it agrees to about a second
    assert age > 0.0 and abs(age - (time.time() - psutil.Process().create_time())) < 2.0


@pytest.mark.skipif(not hasattr(__import__("resource"), "RUSAGE_THREAD"), reason="RUSAGE_THREAD is Linux's")
def test_a_busy_helper_thread_and_a_busy_child_land_in_their_own_parts():
    start = CpuSnapshot.now()
    helper = threading.Thread(target=_burn, args=(0.3,))
    helper.start()
    helper.join()
    child = multiprocessing.get_context("fork").Process(target=_burn, args=(0.3,))
    child.start()
    child.join()
    end = CpuSnapshot.now()
    main = end.main_thread - start.main_thread
    assert end.process - start.process - main >= 0.25  # the helper's 0.3 s, not the main thread's
    assert main < 0.25
    assert end.children - start.children >= 0.25


def _blas_threads() -> set[int]:
    from threadpoolctl import threadpool_info

    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_one_blas_thread_inside_the_block_and_the_limits_before_it_after():
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    from assocmem.runtime.blas import one_blas_thread

    with threadpool_limits(limits=2, user_api="blas"):
        assert _blas_threads() == {2}
        with one_blas_thread():
            assert _blas_threads() == {1}
        assert _blas_threads() == {2}


def test_the_report_stage_builds_with_one_blas_thread(monkeypatch, tmp_path):
    from threadpoolctl import threadpool_limits

    import assocmem.report.build
    from assocmem import stages
    from assocmem.io import write_json

    seen = []

    def fake_build(params, results_dir, out_dir):
        seen.append(_blas_threads())
        write_json(out_dir / "checks.json", {"checks": [{"verdict": "reproduced"}]})

    monkeypatch.setattr(assocmem.report.build, "build_report", fake_build)
    with threadpool_limits(limits=2, user_api="blas"):
        line = stages.report({}, tmp_path / "results", tmp_path)
    assert seen == [{1}]
    assert line.endswith("1 reproduced")


def test_every_stage_logs_its_cpu_split(monkeypatch, tmp_path, caplog):
    import json
    import logging

    import assocmem.report.build
    from assocmem import cli
    from assocmem.io import write_json

    def fake_build(params, results_dir, out_dir):
        _burn(0.05)
        write_json(out_dir / "checks.json", {"checks": []})

    monkeypatch.setattr(assocmem.report.build, "build_report", fake_build)
    with caplog.at_level(logging.INFO, logger="assocmem"):
        assert cli.main(["report", "--params", json.dumps({}), "--results-dir", str(tmp_path),
                         "--out-dir", str(tmp_path)]) == 0
    lines = [r.getMessage() for r in caplog.records if parse_cpu_line(r.getMessage())]
    assert len(lines) == 1 and lines[0].startswith("report: began ")
    assert parse_cpu_line(lines[0])["cpu"] >= 0.05


def test_the_set_up_clock_names_each_phase_and_its_line_reads_back(monkeypatch) -> None:
    from assocmem.runtime import cpu_time
    from assocmem.runtime.cpu_time import SetupClock, parse_setup_line

    ticks = iter([10.0, 11.25, 11.5, 13.0])
    monkeypatch.setattr(cpu_time.time, "perf_counter", lambda: next(ticks))
    clock = SetupClock()
    for name in ("imports", "data", "peak FLOP/s"):
        clock.mark(name)
    assert clock.phases == [("imports", 1.25), ("data", 0.25), ("peak FLOP/s", 1.5)]
    assert clock.line() == "3.0 s: imports 1.25 s, data 0.25 s, peak FLOP/s 1.50 s"
    logged = f"x INFO assocmem.train.loop: qf/L4/pct1 set-up: {clock.line()} before the first step\n"
    assert parse_setup_line(logged) == {"total": 3.0, "imports": 1.25, "data": 0.25, "peak FLOP/s": 1.5}
    assert parse_setup_line("a log without the line") is None

