"""numpy's BLAS on one thread against many, in one process (threadpoolctl switches between arms): what the report
job gains and loses by :func:`assocmem.runtime.blas.one_blas_thread`.

- spin: a loop of small products (2,000 x 64 by 64 x 2,000) and Python work between them for ``--seconds``; prints
  wall, the process's CPU and the CPU of its threads other than the main one (OpenBLAS's workers: they spin on their
  cores after each call before they sleep).
- bootstrap: the report's radius bootstrap at the default run's shapes (``bench_report_bootstrap.arm_remembered``,
  its largest BLAS user: a weighted mean is a product); prints its time and that its numbers are equal bit for bit.

Arms interleaved over rounds; ratios are of medians, against the one-thread arm.

    python benchmarks/bench_blas_threads.py --rounds 3 --threads 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg  # noqa: F401 - scipy's own BLAS loaded, so that the limits reach it too
from threadpoolctl import threadpool_info, threadpool_limits

from assocmem.runtime.cpu_time import CpuSnapshot

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_report_bootstrap  # noqa: E402 - after the benchmarks directory is importable


def spin(seconds: float) -> None:
    a, b = np.ones((2000, 64)), np.ones((64, 2000))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ b
        sum(range(100_000))


def measure(work) -> tuple[float, float, float, object]:
    """(wall, process CPU, CPU of the threads other than this one, result) of ``work()``."""
    start = CpuSnapshot.now()
    result = work()
    end = CpuSnapshot.now()
    process = end.process - start.process
    return end.wall - start.wall, process, process - (end.main_thread - start.main_thread), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the many-thread arm's BLAS threads")
    parser.add_argument("--seconds", type=float, default=3.0, help="the spin loop's length")
    args = parser.parse_args()
    libs = [f"{lib['internal_api']} {lib['version']} ({lib['threading_layer']})" for lib in threadpool_info()
            if lib["user_api"] == "blas"]
    print(f"BLAS: {', '.join(libs)}; {os.cpu_count()} logical CPUs")
    items = bench_report_bootstrap.frames()
    arms = (1, args.threads)
    rows: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    results: dict[int, list[np.ndarray]] = {}
    for _ in range(args.rounds):
        for threads in arms:
            with threadpool_limits(limits=threads, user_api="blas"):
                rows.setdefault(("spin", threads), []).append(measure(lambda: spin(args.seconds))[:3])
                *times, results[threads] = measure(lambda: bench_report_bootstrap.arm_remembered(items))
                rows.setdefault(("bootstrap", threads), []).append(tuple(times))
    for (part, threads), runs in rows.items():
        wall, cpu, helpers = (np.array(column) for column in zip(*runs, strict=True))
        base = np.median([run[0] for run in rows[(part, 1)]])
        print(f"{part:9s} BLAS threads {threads:2d}: wall {wall.min():5.2f}-{wall.max():5.2f} s "
              f"(x{np.median(wall) / base:.2f}), process CPU {cpu.min():5.2f}-{cpu.max():5.2f} s, "
              f"other threads {helpers.min():5.2f}-{helpers.max():5.2f} s")
    pairs = list(zip(results[1], results[args.threads], strict=True))
    equal = all(np.array_equal(x, y) for x, y in pairs)
    worst = max(float(np.max(np.abs(x - y) / np.abs(x))) for x, y in pairs)
    print(f"bootstrap numbers equal at 1 and {args.threads} BLAS threads: {equal} (largest relative difference "
          f"{worst:.1e})")


if __name__ == "__main__":
    main()
