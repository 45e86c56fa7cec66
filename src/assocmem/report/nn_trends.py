"""Nearest-neighbour trends computed once: the radius claim and its figure ask for some of the same bootstrapped
trends (:func:`assocmem.report.nn_statistics.nn_trend`), each up to a second at 80,000 queries.

Inside :func:`shared`, :func:`trend` remembers each trend by the content of its frame and its arguments, so a trend
of other data is never reused. Every trend restarts its generator from its seed: which caller computes it first
does not change a number. (Computing them side by side in forked workers was measured on the 2-core Zen 4 host,
2026-11-29: no faster than one after another, since the bootstrap's gathers are bound by memory; not kept.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pandas as pd

from assocmem.report.nn_statistics import N_BOOT, nn_trend

TREND_COLUMNS = ["fraction", "n_patterns", "query", "distance"]

_memo: dict[tuple, dict[str, Any]] | None = None


def _key(frame: pd.DataFrame, statistic: str, n_boot: int, seed: int) -> tuple:
    content = pd.util.hash_pandas_object(frame[TREND_COLUMNS], index=False).to_numpy().tobytes()
    return (content, statistic, n_boot, seed)


@contextlib.contextmanager
def shared() -> Iterator[None]:
    """Remember the trends computed inside the block (forgotten when it ends)."""
    global _memo
    _memo = {}
    try:
        yield
    finally:
        _memo = None


def trend(frame: pd.DataFrame, statistic: str, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """:func:`nn_trend` of ``frame`` (no extrapolation target), remembered inside :func:`shared`; a fresh dict each
    call, whose arrays the caller must not change."""
    if _memo is None:
        return nn_trend(frame, statistic, n_boot=n_boot, seed=seed)
    key = _key(frame, statistic, n_boot, seed)
    if key not in _memo:
        _memo[key] = nn_trend(frame, statistic, n_boot=n_boot, seed=seed)
    return dict(_memo[key])
