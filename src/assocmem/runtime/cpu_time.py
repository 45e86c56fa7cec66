"""Where a job's CPU time goes: its main thread, the process's other threads (BLAS, OpenMP and I/O pools, which may
spin on idle cores) and the child processes it waited for (the report's figure writers). Snakemake's benchmark
file gives the total only: on the GPU machine (16 cores) the report job used 178 CPU-s in 18.8 s of wall (9.5
cores busy) where it uses 19-25 CPU-s on a 2-core host (benchmarks/README.md), and the total cannot say which of
the three it was."""

from __future__ import annotations

import resource
import time
from typing import NamedTuple


class CpuSnapshot(NamedTuple):
    wall: float
    process: float  # every thread of this process, user + system
    main_thread: float | None  # the calling thread; None where the platform cannot tell (RUSAGE_THREAD is Linux's)
    children: float  # child processes that have ended and been waited for

    @classmethod
    def now(cls) -> CpuSnapshot:
        def seconds(usage: resource.struct_rusage) -> float:
            return usage.ru_utime + usage.ru_stime

        thread = getattr(resource, "RUSAGE_THREAD", None)
        return cls(time.perf_counter(), seconds(resource.getrusage(resource.RUSAGE_SELF)),
                   None if thread is None else seconds(resource.getrusage(thread)),
                   seconds(resource.getrusage(resource.RUSAGE_CHILDREN)))


def cpu_split(start: CpuSnapshot, end: CpuSnapshot) -> str:
    """One line: the CPU seconds between two snapshots taken by the same thread, split three ways."""
    process, children = end.process - start.process, end.children - start.children
    wall = end.wall - start.wall
    if start.main_thread is not None and end.main_thread is not None:
        main = end.main_thread - start.main_thread
        parts = [f"main thread {main:.1f} s", f"the process's other threads {max(process - main, 0.0):.1f} s"]
    else:
        parts = [f"this process {process:.1f} s"]
    parts.append(f"child processes waited for {children:.1f} s")
    load = (process + children) / wall if wall > 0 else 0.0
    return f"CPU {process + children:.1f} s in {wall:.1f} s of wall ({load:.2f} cores): " + ", ".join(parts)
