"""The database as the float32 search sees it: row blocks (shards), optionally shifted by the database mean."""

from __future__ import annotations

import numpy as np


class Shards:
    """Row blocks of the database, optionally shifted by the database mean (made one block at a time)."""

    def __init__(self, database: np.ndarray, rows: int | None, center: bool) -> None:
        self.database = database
        self.rows = database.shape[0] if rows is None else int(rows)
        self.starts = list(range(0, database.shape[0], self.rows))
        # The mean is accumulated in float64; subtracting it in float32 costs ~eps*|x| per coordinate.
        self.offset = database.mean(axis=0, dtype=np.float64).astype(np.float32) if center else None
        self._whole: np.ndarray | None = None

    def block(self, start: int) -> np.ndarray:
        if self._whole is not None:
            return self._whole
        rows = self.database[start : start + self.rows]
        block = rows if self.offset is None else rows - self.offset
        if len(self.starts) == 1:  # one shard: shift once, reuse on later searches
            self._whole = block
        return block

    def centre(self, queries: np.ndarray, same_array: bool) -> np.ndarray:
        if self.offset is None:
            return queries
        if same_array and len(self.starts) == 1:  # self-search on one shard: share one shifted copy
            return self.block(0)
        return queries - self.offset

    def squared_norms(self) -> np.ndarray:
        """float64 squared norms of the (shifted) database rows, as the float32 search sees them."""
        return np.concatenate([squared_norms(self.block(start)) for start in self.starts])


def squared_norms(rows: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
