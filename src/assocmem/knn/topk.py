"""Per-query top-k lists of (distance, row id): sorting with ties to the smaller id, merging, exclusion."""

from __future__ import annotations

import numpy as np


def sort_by_distance_then_id(
    dist: np.ndarray, ids: np.ndarray, keep: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's (distance, id) pairs ascending by distance, then id; the first ``keep`` of them."""
    order = np.lexsort((ids, dist), axis=1)[:, :keep]
    return np.take_along_axis(dist, order, axis=1), np.take_along_axis(ids, order, axis=1)


def merge_topk(
    best: tuple[np.ndarray, np.ndarray] | None, new: tuple[np.ndarray, np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two (squared distance, global id) lists into the k best per row, ties broken by smaller id."""
    if best is None:
        return new
    sq_dist = np.concatenate([best[0], new[0]], axis=1)
    ids = np.concatenate([best[1], new[1]], axis=1)
    return sort_by_distance_then_id(sq_dist, ids, keep=k)


def drop_excluded(dist: np.ndarray, ids: np.ndarray, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop exclude[q] from row q (first occurrence), or the last column when it is absent."""
    matches = ids == exclude[:, None]
    drop_col = np.where(matches.any(axis=1), matches.argmax(axis=1), ids.shape[1] - 1)
    keep = np.ones(ids.shape, dtype=bool)
    keep[np.arange(ids.shape[0]), drop_col] = False
    new_shape = (ids.shape[0], ids.shape[1] - 1)
    return dist[keep].reshape(new_shape), ids[keep].reshape(new_shape)
