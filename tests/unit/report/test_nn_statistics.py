"""The query bootstrap of the radius test: its resamples are drawn once per (seed, queries, replicates) and shared by
every trend that asks for them, and each statistic is the one an independent computation gets from the same draws."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.report import nn_statistics as ns


def _reference(groups: list[tuple[np.ndarray, np.ndarray]], n_queries: int, statistic: str, n_boot: int,
               seed: int) -> np.ndarray:
    """Replicate by replicate: the resample's indices (the same generator calls as the report's blocks), each
    query's weight its count, the weighted mean or the lower weighted median of each nested sample."""
    rng = np.random.default_rng(seed)
    block = max(1, ns._BLOCK_ELEMENTS // n_queries)
    draws = np.concatenate([rng.integers(0, n_queries, size=(min(block, n_boot - start), n_queries))
                            for start in range(0, n_boot, block)])
    out = np.empty((n_boot, len(groups)))
    for replicate, picks in enumerate(draws):
        counts = np.bincount(picks, minlength=n_queries).astype(np.float64)
        for column, (index, distances) in enumerate(groups):
            weights = counts[index]
            if statistic == "mean":  # a sample none of whose queries was drawn: 0, which the trend's fit drops
                out[replicate, column] = np.sum(weights * distances) / weights.sum() if weights.sum() else 0.0
            else:
                order = np.argsort(distances, kind="stable")
                cumulative = np.cumsum(weights[order])
                position = min(int(np.sum(cumulative < cumulative[-1] / 2)), distances.size - 1)
                out[replicate, column] = distances[order][position]
    return out


def _nested(n_queries: int, fractions: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Nested samples: each a sorted subset of the queries holding the last, the largest every query in order; none
    empty (the report's samples are the fractions that have rows: 2 queries in 4 fractions round the first to 0)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_queries)
    sizes = np.maximum(1, np.linspace(n_queries / fractions, n_queries, fractions).round().astype(int))
    return [(np.sort(order[:size]), rng.gamma(4.0, 0.5, size)) for size in sizes]


@settings(max_examples=25, deadline=None)
@given(n_queries=st.integers(2, 300), fractions=st.integers(1, 4), n_boot=st.integers(1, 60),
       seed=st.integers(0, 2**31 - 1), statistic=st.sampled_from(["mean", "median"]),
       block=st.sampled_from([1, 7, 4_000_000]))
def test_the_bootstrap_is_the_statistic_of_each_resample(n_queries: int, fractions: int, n_boot: int, seed: int,
                                                         statistic: str, block: int) -> None:
    groups = _nested(n_queries, fractions, seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ns, "_BLOCK_ELEMENTS", block)  # one replicate a block, a few, and all at once
        ns.resample_table.cache_clear()
        got = ns.bootstrap_statistics(groups, n_queries, statistic, n_boot, seed)
        want = _reference(groups, n_queries, statistic, n_boot, seed)
    if statistic == "median":  # a median picks one of the distances: no arithmetic to round
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12)
    ns.resample_table.cache_clear()


def test_one_table_serves_every_trend_with_its_seed_and_queries() -> None:
    ns.resample_table.cache_clear()
    table = ns.resample_table(7, 500, 40)
    assert ns.resample_table(7, 500, 40) is table  # the mean, the median and the other sets read it again
    assert table.shape == (40, 500) and table.dtype == np.uint8 and not table.flags.writeable
    assert (table.sum(axis=1) == 500).all()  # each row a resample of all 500 queries
    assert not np.array_equal(ns.resample_table(8, 500, 40), table)  # another seed, other draws
    groups = _nested(500, 3, 0)
    first = ns.bootstrap_statistics(groups, 500, "mean", 40, 7)
    np.testing.assert_array_equal(ns.bootstrap_statistics(groups, 500, "mean", 40, 7), first)
    ns.resample_table.cache_clear()
