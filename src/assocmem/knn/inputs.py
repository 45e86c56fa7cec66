"""Checks on the arrays and counts given to the searches: clear errors instead of faiss crashes."""

from __future__ import annotations

from typing import Any

import numpy as np

from assocmem.errors import AssocmemError


def as_matrix(name: str, array: Any) -> np.ndarray:
    """``array`` as a C-contiguous float32 (rows, dim) matrix with finite values."""
    matrix = np.ascontiguousarray(array, dtype=np.float32)
    if matrix.ndim != 2:
        raise AssocmemError(f"{name} must be a 2-D array (rows, dim), got shape {matrix.shape}")
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise AssocmemError(f"{name} is empty: shape {matrix.shape}")
    rows_per_chunk = max(1, (64 << 20) // matrix.shape[1])  # bounds the temporary boolean array
    for start in range(0, matrix.shape[0], rows_per_chunk):
        if not np.isfinite(matrix[start : start + rows_per_chunk]).all():
            raise AssocmemError(f"{name} contains NaN or inf values (first in rows from {start})")
    return matrix


def check_positive(name: str, value: int | None) -> None:
    if value is not None and int(value) < 1:
        raise AssocmemError(f"{name} must be >= 1, got {value}")


def as_exclude_ids(exclude_ids: Any, n_queries: int) -> np.ndarray:
    """One int64 database row per query, to leave out of that query's neighbours."""
    ids = np.asarray(exclude_ids)
    if ids.shape != (n_queries,):
        raise AssocmemError(f"exclude_ids must have shape ({n_queries},), got {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise AssocmemError(f"exclude_ids must be integers, got dtype {ids.dtype}")
    return ids.astype(np.int64, copy=False)
