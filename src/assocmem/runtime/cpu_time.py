"""Where a job's time goes: how long its process ran before the stage began (Python, imports), and its CPU time
split between the main thread, the process's other threads (BLAS, OpenMP and I/O pools, which may spin on idle
cores) and the child processes it waited for (the report's figure writers). Snakemake's benchmark file gives the
total only: on the GPU machine (16 cores) the report job used 178 CPU-s in 18.8 s of wall (9.5 cores busy) where it
uses 15-19 CPU-s on a 2-core host (benchmarks/README.md), and the total cannot say which of the three it was.
:func:`cpu_split` writes the job's log line; :func:`parse_cpu_line` reads it back (benchmarks/gpu_check.py)."""

from __future__ import annotations

import os
import re
import resource
import time
from pathlib import Path
from typing import NamedTuple


def process_age() -> float | None:
    """Seconds since this process started (its start in /proc/self/stat against the boot clock, 10 ms steps);
    None where there is no /proc."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return None
    started = int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
    return max(time.clock_gettime(time.CLOCK_BOOTTIME) - started, 0.0)


class CpuSnapshot(NamedTuple):
    wall: float
    process: float  # every thread of this process, user + system
    main_thread: float | None  # the calling thread; None where the platform cannot tell (RUSAGE_THREAD is Linux's)
    children: float  # child processes that have ended and been waited for
    age: float | None = None  # seconds since the process started (:func:`process_age`)

    @classmethod
    def now(cls, *, with_age: bool = False) -> CpuSnapshot:
        """This moment's clocks; ``with_age``: also the process's age (the stage's start snapshot)."""

        def seconds(usage: resource.struct_rusage) -> float:
            return usage.ru_utime + usage.ru_stime

        thread = getattr(resource, "RUSAGE_THREAD", None)
        return cls(time.perf_counter(), seconds(resource.getrusage(resource.RUSAGE_SELF)),
                   None if thread is None else seconds(resource.getrusage(thread)),
                   seconds(resource.getrusage(resource.RUSAGE_CHILDREN)), process_age() if with_age else None)


def cpu_split(start: CpuSnapshot, end: CpuSnapshot) -> str:
    """One line: when the stage began (``start``'s age) and its CPU seconds between two snapshots taken by the same
    thread, split three ways."""
    process, children = end.process - start.process, end.children - start.children
    wall = end.wall - start.wall
    if start.main_thread is not None and end.main_thread is not None:
        main = end.main_thread - start.main_thread
        parts = [f"main thread {main:.1f} s", f"the process's other threads {max(process - main, 0.0):.1f} s"]
    else:
        parts = [f"this process {process:.1f} s"]
    parts.append(f"child processes waited for {children:.1f} s")
    load = (process + children) / wall if wall > 0 else 0.0
    began = "" if start.age is None else f"began {start.age:.1f} s after its process started; "
    return f"{began}CPU {process + children:.1f} s in {wall:.1f} s of wall ({load:.2f} cores): " + ", ".join(parts)


_SECONDS = r"\d+(?:\.\d+)?"
_NUMBER = rf"({_SECONDS})"
_LINE = re.compile(rf"(?:began {_NUMBER} s after its process started; )?CPU {_NUMBER} s in {_NUMBER} s of wall "
                   rf"\({_NUMBER} cores\): (?:main thread {_NUMBER} s, the process's other threads {_NUMBER} s"
                   rf"|this process {_SECONDS} s), child processes waited for {_NUMBER} s")


def parse_cpu_line(text: str) -> dict[str, float | None] | None:
    """The numbers of a :func:`cpu_split` line found in ``text`` (None: there is none); seconds, and ``load`` in
    cores. ``began``, ``main_thread`` and ``other_threads`` are None where the line has none."""
    found = _LINE.search(text)
    if found is None:
        return None
    began, cpu, wall, load, main, other, children = (None if v is None else float(v) for v in found.groups())
    return {"began": began, "cpu": cpu, "wall": wall, "load": load, "main_thread": main, "other_threads": other,
            "children": children}


class SetupClock:
    """Where a job's set-up goes before its work begins: named phases, each the wall time since the previous mark
    (the first since the clock was made). On the GPU machine the default's trainings logged their first line 8-10 s
    after Snakemake started them, against about 2 s on a 2-core host, and nothing said which part it was."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.phases: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.phases.append((name, now - self.last))
        self.last = now

    def line(self) -> str:
        """``3.1 s: imports 1.20 s, store 0.30 s, ...``"""
        total = sum(seconds for _, seconds in self.phases)
        return f"{total:.1f} s: " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.phases)

    def message(self, job: str, before: str = "its work") -> str:
        """The log line :func:`parse_setup_line` reads: ``<job> set-up: <line> before <before>``."""
        return f"{job} set-up: {self.line()} before {before}"


_SETUP = re.compile(rf"set-up: {_NUMBER} s: (.*?) before (?:the first step|its work)")


def parse_setup_line(text: str) -> dict[str, float] | None:
    """The phases of a :meth:`SetupClock.line` logged as ``set-up: <line> before the first step`` (a training) or
    ``before its work`` (another stage); None: there is none."""
    found = _SETUP.search(text)
    if found is None:
        return None
    phases = (part.rsplit(" ", 2) for part in found.group(2).split(", "))
    return {"total": float(found.group(1)), **{name: float(seconds) for name, seconds, _ in phases}}
