"""Exact (bitwise) duplicate rows: grouped so the search sees each distinct row once, and put back after.

Activations of short shared prefixes repeat thousands of times (4586 copies of one row among 100,000
Question-Formation chunks); :func:`assocmem.knn.exact.knn` searches one row per group and
:func:`expand_groups` turns the nearest groups back into the nearest rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from assocmem.knn.topk import sort_by_distance_then_id

RowHash = Callable[[np.ndarray], np.ndarray]


class Groups(NamedTuple):
    """Rows grouped by exact (bitwise) equality; groups are numbered in the order of their first row."""

    first_row: np.ndarray  # int64 (G,): the smallest row of each group, ascending
    of_row: np.ndarray  # int64 (N,): the group of each row
    members: np.ndarray  # int64 (G, m): each group's m smallest rows, ascending, padded with -1


def row_hashes(x: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes: its 32-bit words times fixed random multipliers, summed mod 2^64."""
    words = x.view(np.uint32)
    multipliers = np.random.default_rng(0x5EED).integers(1, 2**63, size=words.shape[1], dtype=np.uint64)
    out = np.empty(x.shape[0], dtype=np.uint64)
    step = max(1, (8 << 20) // (8 * words.shape[1]))
    for start in range(0, x.shape[0], step):
        out[start:start + step] = (words[start:start + step].astype(np.uint64) * multipliers).sum(axis=1)
    return out


def duplicate_groups(x: np.ndarray, keep: int, *, row_hash: RowHash = row_hashes) -> Groups | None:
    """Groups of identical rows of float32 x with their ``keep`` smallest rows each; None when every row is
    distinct. ``row_hash`` maps x to one uint64 per row; rows are grouped by it and, where two different rows
    share a hash (a collision), by the rows themselves, so any hash gives the same groups."""
    _, first, inverse, counts = np.unique(row_hash(x), return_index=True, return_inverse=True, return_counts=True)
    if len(first) == x.shape[0]:
        return None
    if not _rows_equal(x, first[inverse]):  # a hash collision: group by the rows themselves
        _, first, inverse, counts = np.unique(x, axis=0, return_index=True, return_inverse=True,
                                              return_counts=True)
        if len(first) == x.shape[0]:
            return None
    order = np.argsort(first)  # renumber groups by first row, so group order is row order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    of_row = rank[inverse.reshape(-1)]
    counts = counts[order]
    width = int(min(keep, counts.max()))
    by_group = np.argsort(of_row, kind="stable")  # rows ascending within each group
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slots = np.arange(width)
    members = np.where(slots < counts[:, None], by_group[np.minimum(starts[:, None] + slots, len(of_row) - 1)], -1)
    return Groups(first[order].astype(np.int64), of_row.astype(np.int64), members.astype(np.int64))


def _rows_equal(x: np.ndarray, other_rows: np.ndarray) -> bool:
    step = max(1, (8 << 20) // x.shape[1])
    return all(np.array_equal(x[start:start + step].view(np.uint32), x[other_rows[start:start + step]].view(np.uint32))
               for start in range(0, x.shape[0], step))


def expand_groups(sq_dist: np.ndarray, groups_found: np.ndarray, groups: Groups, k: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """From each query's k nearest groups (ordered by distance, then first row) to its k nearest rows
    (ordered by distance, then row). Exact: every row among the k nearest lies in one of those groups, and
    is one of its group's k smallest rows."""
    out_dist = np.empty((sq_dist.shape[0], k), dtype=np.float64)
    out_ids = np.empty((sq_dist.shape[0], k), dtype=np.int64)
    step = max(1, (16 << 20) // (8 * groups_found.shape[1] * groups.members.shape[1]))
    for start in range(0, sq_dist.shape[0], step):
        rows = groups.members[groups_found[start:start + step]]  # (q, k_groups, m)
        dist = np.broadcast_to(sq_dist[start:start + step, :, None], rows.shape)
        dist = np.where(rows >= 0, dist, np.inf).reshape(rows.shape[0], -1)
        rows = np.where(rows >= 0, rows, np.iinfo(np.int64).max).reshape(rows.shape[0], -1)
        out_dist[start:start + step], out_ids[start:start + step] = sort_by_distance_then_id(dist, rows, keep=k)
    return out_dist, out_ids
