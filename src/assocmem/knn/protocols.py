"""The search protocols of the neighbours stage, as DataFrames: self-search within nested random subsamples,
and held-out queries against the training rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.knn.exact import knn
from assocmem.knn.inputs import as_matrix


def neighbour_frame(query_rows: np.ndarray, neighbour_rows: np.ndarray, distances: np.ndarray) -> pd.DataFrame:
    """Long format: query_row, rank (1..k), neighbour_row, distance; one row per (query, rank)."""
    n_queries, k = neighbour_rows.shape
    return pd.DataFrame(
        {
            "query_row": np.repeat(query_rows.astype(np.int64), k),
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int64), n_queries),
            "neighbour_row": neighbour_rows.reshape(-1),
            "distance": distances.reshape(-1),
        }
    )


def nested_subsample_rows(n_rows: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted rows of the nested subsample: the first round(fraction*n_rows) of a seeded permutation."""
    if not 0.0 < fraction <= 1.0:
        raise AssocmemError(f"fraction must be in (0, 1], got {fraction}")
    permutation = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(permutation[: round(fraction * n_rows)])


def self_search(
    x: np.ndarray,
    k: int,
    fractions: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
    seed: int = 0,
    **knn_options: Any,
) -> pd.DataFrame:
    """k nearest other rows of every row of x, within nested random subsamples of x.

    Columns: fraction, query_row, rank (1..k), neighbour_row, distance; rows refer to x. A row's
    own id is excluded; exact duplicates of it are kept (at distance 0). ``knn_options`` (``engine`` among them)
    go to :func:`knn`.
    """
    x = as_matrix("x", x)
    frames = []
    for fraction in fractions:
        rows = nested_subsample_rows(x.shape[0], float(fraction), seed)
        if rows.size <= k:
            raise AssocmemError(
                f"fraction {fraction} of {x.shape[0]} rows keeps {rows.size} rows, too few for k={k} "
                "neighbours"
            )
        subset = x if rows.size == x.shape[0] else x[rows]
        local = np.arange(rows.size, dtype=np.int64)
        dist, ids = knn(subset, subset, k, exclude_ids=local, **knn_options)
        frame = neighbour_frame(rows, rows[ids], dist)
        frame.insert(0, "fraction", float(fraction))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def heldout_search(train_x: np.ndarray, query_x: np.ndarray, k: int, **knn_options: Any) -> pd.DataFrame:
    """k nearest training rows of every held-out row. Columns: query_row, rank, neighbour_row, distance."""
    dist, ids = knn(train_x, query_x, k, **knn_options)
    return neighbour_frame(np.arange(ids.shape[0]), ids, dist)
