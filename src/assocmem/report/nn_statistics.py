"""Statistics of nearest-neighbour distances for the radius test: a statistic's power-law trend over nested
samples and its level at the largest sample, each with a percentile bootstrap interval over the queries."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from assocmem.errors import AssocmemError
from assocmem.report.claims.base import require_columns

CONFIDENCE = 0.95
N_BOOT = 1000
_BLOCK_ELEMENTS = 4_000_000  # bootstrap weights held at once (replicates x queries)


def loglog_fit(sizes: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of log(values) = a + b log(sizes), by scipy's least squares."""
    fit = stats.linregress(np.log(np.asarray(sizes, dtype=np.float64)), np.log(np.asarray(values, dtype=np.float64)))
    return float(fit.intercept), float(fit.slope)


def _weighted_medians(sorted_values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Lower weighted median per row of ``weights`` (replicates x values), values sorted ascending."""
    cumulative = np.cumsum(weights, axis=1)
    index = (cumulative < cumulative[:, -1:] / 2.0).sum(axis=1)
    return sorted_values[np.minimum(index, sorted_values.size - 1)]


def statistic_of(distances: np.ndarray, statistic: str) -> float:
    return float(np.mean(distances) if statistic == "mean" else np.median(distances))


def resample_counts(rng: np.random.Generator, n: int, replicates: int) -> np.ndarray:
    """(replicates, n) integer counts of each of n items in a resample of n with replacement: Multinomial(n, 1/n)
    rows, made as the counts of n uniform draws (one bincount for all rows; rng.multinomial's n sequential binomials
    per row took most of the report job's time at 80,000 queries)."""
    draws = rng.integers(0, n, size=(replicates, n))
    draws += n * np.arange(replicates)[:, None]
    return np.bincount(draws.ravel(), minlength=replicates * n).reshape(replicates, n)


def _block_rows(n_queries: int) -> int:
    """Replicates drawn (and weighted) at once: about _BLOCK_ELEMENTS counts."""
    return max(1, _BLOCK_ELEMENTS // max(1, n_queries))


@functools.lru_cache(maxsize=2)
def resample_table(seed: int, n_queries: int, n_boot: int) -> np.ndarray:
    """(n_boot, n_queries) read-only counts of every bootstrap resample of ``seed``, drawn block by block as
    :func:`resample_counts` draws them, kept in the smallest unsigned type that holds them (one byte a count in
    practice: 80 MB at 1,000 x 80,000). Every trend restarts its generator from the seed, so the mean and the
    median of a run, its sets and the runs with as many queries all read one table: the report draws it once
    where it drew it per trend (the draws were about 40% of the bootstrap's time)."""
    rng = np.random.default_rng(seed)
    block = _block_rows(n_queries)
    parts = []
    for start in range(0, n_boot, block):
        counts = resample_counts(rng, n_queries, min(block, n_boot - start))
        parts.append(counts.astype(np.min_scalar_type(int(counts.max(initial=0)))))
    table = np.concatenate(parts, dtype=np.result_type(*parts)) if parts else np.zeros((0, n_queries), np.uint8)
    table.setflags(write=False)
    return table


def bootstrap_statistics(groups: list[tuple[np.ndarray, np.ndarray]], n_queries: int, statistic: str,
                          n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_fractions) statistic per fraction under multinomial query weights shared across fractions (the
    resamples of :func:`resample_table`)."""
    table = resample_table(seed, n_queries, n_boot)
    out = np.empty((n_boot, len(groups)))
    block = _block_rows(n_queries)
    orders = [np.argsort(distances, kind="stable") for _, distances in groups] if statistic == "median" else []
    every = [np.array_equal(index, np.arange(n_queries)) for index, _ in groups]  # the largest sample, in order
    for start in range(0, n_boot, block):
        rows = table[start:start + block]
        for column, (query_index, distances) in enumerate(groups):
            if statistic == "mean":  # column-major, as a gather along axis 1 lays it out: the product rounds alike
                w = (rows if every[column] else rows[:, query_index]).astype(np.float64, order="F")
                out[start:start + len(rows), column] = (w @ distances) / np.maximum(w.sum(axis=1), 1e-300)
            else:
                order = orders[column]
                w = rows[:, query_index[order]].astype(np.float64)
                out[start:start + len(rows), column] = _weighted_medians(distances[order], w)
    return out


def _groups(frame: pd.DataFrame) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]], int]:
    """(sizes, per size (query index, distances), number of distinct queries) of one set's frame."""
    by_fraction = sorted(frame.groupby("fraction"), key=lambda item: item[0])
    queries = np.unique(frame["query"].to_numpy())
    lookup = pd.Series(np.arange(queries.size), index=queries)
    groups = [(lookup[g["query"].to_numpy()].to_numpy(), g["distance"].to_numpy(dtype=np.float64))
              for _, g in by_fraction]
    return np.array([float(g["n_patterns"].iloc[0]) for _, g in by_fraction]), groups, queries.size


def level_at_largest(frame: pd.DataFrame, statistic: str = "mean") -> tuple[float, float]:
    """(largest sample size, the statistic there): :func:`nn_trend`'s ``largest`` and ``level`` without its
    bootstrap, for a set whose interval is not reported."""
    require_columns(frame, ["fraction", "n_patterns", "distance"], "nn level frame")
    last = frame[frame["fraction"] == frame["fraction"].max()]
    return float(last["n_patterns"].iloc[0]), statistic_of(last["distance"].to_numpy(np.float64), statistic)


def nn_trend(frame: pd.DataFrame, statistic: str = "mean", target: float | None = None, n_boot: int = N_BOOT,
             seed: int = 0) -> dict[str, Any]:
    """Power-law trend of one set's NN-distance statistic against the sample size, and its level at the largest
    sample, with bootstrap CIs (queries resampled jointly across the nested samples, the stored sets fixed).

    ``frame``: fraction, n_patterns, query (id shared across fractions), distance. Returns the statistic per sample
    size (key ``at_<n_patterns>``); ``largest``, the largest size, with ``level`` and its CI (``level_lo``,
    ``level_hi``) and the bootstrap ``level_replicates`` (an array); ``sample_spread``, max / min of the statistic
    over the sizes, with its CI; slope, and the fitted value at ``target``
    (default: the largest size, so nothing is extrapolated), with CI bounds (``_lo``, ``_hi``). Trend keys are NaN
    where a statistic is 0 (a log-log fit is then undefined)."""
    require_columns(frame, ["fraction", "n_patterns", "query", "distance"], "nn trend frame")
    if statistic not in ("mean", "median"):
        raise AssocmemError(f"statistic must be 'mean' or 'median', got {statistic!r}")
    sizes, groups, n_queries = _groups(frame)
    points = np.array([statistic_of(d, statistic) for _, d in groups])
    boot = bootstrap_statistics(groups, n_queries, statistic, n_boot, seed)
    tail = 100 * (1 - CONFIDENCE) / 2
    level_lo, level_hi = np.percentile(boot[:, -1], [tail, 100 - tail])
    out: dict[str, Any] = {f"at_{int(m)}": v for m, v in zip(sizes, points, strict=True)}
    out.update(largest=float(sizes[-1]), level=float(points[-1]), level_lo=float(level_lo), level_hi=float(level_hi),
               level_replicates=boot[:, -1])
    if np.all(points > 0):
        spread_lo, spread_hi = np.percentile(boot.max(axis=1) / np.maximum(boot.min(axis=1), 1e-300),
                                             [tail, 100 - tail])
        out.update(sample_spread=float(points.max() / points.min()), sample_spread_lo=float(spread_lo),
                   sample_spread_hi=float(spread_hi))
    nan_keys = ("slope", "slope_lo", "slope_hi", "at_target", "at_target_lo", "at_target_hi")
    if len(sizes) < 2 or np.any(points <= 0):
        return {**out, **dict.fromkeys(nan_keys, float("nan"))}
    target = sizes[-1] if target is None else target
    intercept, slope = loglog_fit(sizes, points)
    positive = boot[np.all(boot > 0, axis=1)]
    coefficients = np.polyfit(np.log(sizes), np.log(positive).T, 1)  # (2, replicates): slope, intercept
    slope_lo, slope_hi = np.percentile(coefficients[0], [tail, 100 - tail])
    at_lo, at_hi = np.percentile(np.exp(coefficients[1] + coefficients[0] * np.log(target)), [tail, 100 - tail])
    return {**out, "slope": slope, "slope_lo": float(slope_lo), "slope_hi": float(slope_hi),
            "intercept": intercept, "at_target": float(np.exp(intercept + slope * np.log(target))),
            "at_target_lo": float(at_lo), "at_target_hi": float(at_hi), "replicates": float(len(positive))}


# ---------------------------------------------------------------- run-to-run variation (issue 38)


def replicate_interval(levels: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high): the t-interval of the mean of R >= 2 levels, each measured on an independent sample of
    chunks (or seed). Their spread holds the query, the chunk-sample and (for trained runs) the seed's variation."""
    levels = np.asarray(levels, dtype=np.float64)
    if levels.size < 2:
        raise AssocmemError(f"a run-to-run interval needs at least two replicates, got {levels.size}")
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, levels.size - 1) * levels.std(ddof=1) / np.sqrt(levels.size)
    return float(levels.mean()), float(levels.mean() - half), float(levels.mean() + half)


def width_growth(widths: np.ndarray, levels: np.ndarray) -> dict[str, float]:
    """Least squares of log(level) on log(width) over every replicate: the exponent of level ~ width^slope (the
    paper's r* ~ sqrt(n) predicts 1/2) with its t-interval; NaN with fewer than two widths or three points."""
    widths, levels = np.asarray(widths, dtype=np.float64), np.asarray(levels, dtype=np.float64)
    if np.unique(widths).size < 2 or widths.size < 3 or np.any(levels <= 0):
        return dict.fromkeys(("slope", "slope_lo", "slope_hi", "points"), float("nan"))
    fit = stats.linregress(np.log(widths), np.log(levels))
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, widths.size - 2) * fit.stderr
    return {"slope": float(fit.slope), "slope_lo": float(fit.slope - half), "slope_hi": float(fit.slope + half),
            "points": float(widths.size)}
