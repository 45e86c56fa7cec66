"""The radius claim's query bootstrap at the default run's shapes, as the report asks for it (the claim: mean and
median of two runs of 19,520 queries; its figure: the mean of those two and of two runs of 80,000): per-trend draws
(the baseline, as the report drew them before 2026-11-29), one resample table per (seed, queries, replicates), and
the tables with each trend remembered (:mod:`assocmem.report.nn_trends`: the figure's two repeats not recomputed).
Arms interleaved over rounds; prints min-max seconds and the ratio of medians to the baseline; every arm's numbers
are checked equal to the baseline's, bit for bit. The last arm times whole trends (the bootstrap plus its
percentiles and fits, and the memory's content hashes), the others the bootstrap alone.

    python benchmarks/bench_report_bootstrap.py --rounds 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from assocmem.report import nn_statistics as ns
from assocmem.report import nn_trends

SEED, N_BOOT = 7, ns.N_BOOT
# the default run's radius sets (2026-11-29): runs of 19,520 and 80,000 distinct prefixes, nested samples of
# 25/50/75/100%; the claim asks for (run, statistic) in order, then the figure
RUNS = {"L2/pct1": 19_520, "L4/pct1": 19_520, "L2/pct100": 80_000, "L4/pct100": 80_000}
ASKED = [("L2/pct1", "mean"), ("L2/pct1", "median"), ("L4/pct1", "mean"), ("L4/pct1", "median"),
         ("L2/pct100", "mean"), ("L4/pct100", "mean"), ("L2/pct1", "mean"), ("L4/pct1", "mean")]


def frames() -> list[tuple[pd.DataFrame, str]]:
    rng = np.random.default_rng(0)
    sets = {}
    for run, n in RUNS.items():
        order = rng.permutation(n)
        parts = [pd.DataFrame({"fraction": f, "n_patterns": int(n * f), "query": np.sort(order[:int(n * f)]),
                               "distance": rng.gamma(4.0, 0.3, int(n * f))}) for f in (0.25, 0.5, 0.75, 1.0)]
        sets[run] = pd.concat(parts, ignore_index=True).assign(run=run)
    return [(sets[run], statistic) for run, statistic in ASKED]


def per_trend_draws(groups, n_queries: int, statistic: str) -> np.ndarray:
    """The baseline: every trend draws its own resamples, as float64 weights, block by block."""
    rng = np.random.default_rng(SEED)
    out = np.empty((N_BOOT, len(groups)))
    block = max(1, ns._BLOCK_ELEMENTS // n_queries)
    for start in range(0, N_BOOT, block):
        size = min(block, N_BOOT - start)
        weights = ns.resample_counts(rng, n_queries, size).astype(np.float64)
        for column, (index, distances) in enumerate(groups):
            w = weights[:, index]
            if statistic == "mean":
                out[start:start + size, column] = (w @ distances) / np.maximum(w.sum(axis=1), 1e-300)
            else:
                order = np.argsort(distances, kind="stable")
                out[start:start + size, column] = ns._weighted_medians(distances[order], w[:, order])
    return out


def arm_baseline(items) -> list[np.ndarray]:
    out = []
    for frame, statistic in items:
        _, groups, n = ns._groups(frame)
        out.append(per_trend_draws(groups, n, statistic))
    return out


def arm_tables(items) -> list[np.ndarray]:
    ns.resample_table.cache_clear()
    out = []
    for frame, statistic in items:
        _, groups, n = ns._groups(frame)
        out.append(ns.bootstrap_statistics(groups, n, statistic, N_BOOT, SEED))
    return out


def arm_remembered(items) -> list[np.ndarray]:
    ns.resample_table.cache_clear()
    with nn_trends.shared():
        return [nn_trends.trend(frame, statistic, seed=SEED)["level_replicates"] for frame, statistic in items]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    items = frames()
    arms = {"per-trend draws (baseline)": arm_baseline, "one table per queries": arm_tables,
            "tables, each trend remembered": arm_remembered}
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    results: dict[str, list[np.ndarray]] = {}
    for _ in range(args.rounds):
        for name, arm in arms.items():
            start = time.perf_counter()
            results[name] = arm(items)
            seconds[name].append(time.perf_counter() - start)
    baseline = results["per-trend draws (baseline)"]
    for name in arms:  # a trend's level replicates are the bootstrap's last column (the largest sample)
        equal = all(np.array_equal(got, want if got.ndim == 2 else want[:, -1])
                    for got, want in zip(results[name], baseline, strict=True))
        ratio = np.median(seconds[name]) / np.median(seconds["per-trend draws (baseline)"])
        print(f"{name:32s} {min(seconds[name]):6.2f}-{max(seconds[name]):6.2f} s  x{ratio:.2f} of the baseline "
              f"(medians)  equal to the baseline: {equal}")


if __name__ == "__main__":
    main()
