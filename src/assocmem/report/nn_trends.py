"""Nearest-neighbour trends computed once and side by side: the radius claim and its figure ask for the same
bootstrapped trends (:func:`assocmem.report.nn_statistics.nn_trend`), each a second or so at 80,000 queries.

Inside :func:`shared`, :func:`trend` remembers each trend by the content of its frame and its arguments (so a
trend of other data is never reused), and :func:`prefetch` computes the ones a caller names in forked processes,
as many at once as the report has workers. Every trend restarts its generator from its seed, so the order and
the process that computes it do not change a number."""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pandas as pd

from assocmem.report.nn_statistics import N_BOOT, nn_trend

TREND_COLUMNS = ["fraction", "n_patterns", "query", "distance"]
Request = tuple[pd.DataFrame, str]  # (one set's frame, statistic)

_memo: dict[tuple, dict[str, Any]] | None = None
_pending: list[tuple[pd.DataFrame, str, int, int]] = []  # read by the forked workers


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


def _compute(index: int) -> dict[str, Any]:
    frame, statistic, n_boot, seed = _pending[index]
    return nn_trend(frame, statistic, n_boot=n_boot, seed=seed)


def prefetch(requests: Sequence[Request], workers: int, n_boot: int = N_BOOT, seed: int = 0) -> int:
    """Compute the requested trends not yet remembered, in up to ``workers`` forked processes (in place with one
    worker or where the platform cannot fork), largest first. Returns how many were computed. Outside
    :func:`shared` there is nothing to remember them in: it computes nothing."""
    global _pending
    if _memo is None:
        return 0
    keys: dict[tuple, tuple[pd.DataFrame, str, int, int]] = {}
    for frame, statistic in requests:
        key = _key(frame, statistic, n_boot, seed)
        if key not in _memo:
            keys.setdefault(key, (frame, statistic, n_boot, seed))
    order = sorted(keys, key=lambda k: -len(keys[k][0]))
    if workers <= 1 or len(order) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for key in order:
            _memo[key] = nn_trend(keys[key][0], keys[key][1], n_boot=n_boot, seed=seed)
        return len(order)
    _pending = [keys[key] for key in order]
    try:
        with ProcessPoolExecutor(min(workers, len(order)), mp_context=multiprocessing.get_context("fork")) as pool:
            for key, result in zip(order, pool.map(_compute, range(len(order))), strict=True):
                _memo[key] = result
    finally:
        _pending = []
    return len(order)
