"""The torch engine of exact k-NN's float32 candidate search: faiss's formula ||q||^2 + ||x||^2 - 2<q, x> as one fp32
GEMM per block of queries (TF32 off on CUDA), then ``topk``. It needs no faiss GPU build, so a pip install with any
CUDA torch searches on the GPU; on the CPU it runs in the tests, so CI covers its logic.

The database is uploaded once and kept on the device across query blocks and the verified refine's rounds
(:mod:`.exact`) when it is one shard (on CUDA: when it fits half the memory budget, :func:`database_rows`; else it
is searched shard by shard); a block of queries is as large as the budget allows
(free device memory on CUDA, :data:`assocmem.knn.engine.CPU_BLOCK_BYTES` on the CPU); the refine's exact float64
distances are computed there too (:class:`TorchDistances`). Like faiss, it returns float32
squared distances ascending and int64 rows merged over shards with ties to the smaller row; the exact answer and its
tie order come from the refine."""

from __future__ import annotations

import numpy as np
import torch

from assocmem.gemm import exact_fp32
from assocmem.knn.engine import Engine
from assocmem.knn.shards import Shards
from assocmem.knn.topk import merge_topk

# Bytes of temporaries per score of a block: the fp32 scores and topk's workspace.
_BYTES_PER_SCORE = 8
# The refine's chunks: the gathered fp32 rows, their float64 copy and the float64 differences per element; at least
# _MIN_REFINE_BYTES a chunk (a tiny search budget would mean one query a call).
_REFINE_BYTES_PER_ELEMENT = 4 + 8 + 8
_MIN_REFINE_BYTES = 16 << 20


def database_rows(engine: Engine, dim: int) -> int:
    """Rows of one database shard on CUDA: half the block budget, so a block of scores fits beside it."""
    return max(1, engine.block_budget() // (2 * 4 * dim))


class TorchSearch:
    """search(queries, k): the k nearest (float32 squared distance, row) of each query over the shards, on the
    engine's torch device, in blocks of at most ``query_batch`` queries whose scores fit the engine's budget; a
    database of one shard stays on the device between calls."""

    def __init__(self, shards: Shards, engine: Engine, query_batch: int) -> None:
        self.shards = shards
        self.engine = engine
        self.query_batch = query_batch
        self.device = torch.device(engine.torch_device)
        self._resident: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._uploaded_from: np.ndarray | None = None  # the host array of the resident shard
        # Several shards are made one at a time (a centred copy each): only a single one stays resident.
        self._keep = len(shards.starts) == 1

    def _block(self, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, their float32 squared norms) of the shard at ``start``, on the device."""
        if start in self._resident:
            return self._resident[start]
        host = self.shards.block(start)
        rows = torch.from_numpy(np.ascontiguousarray(host)).to(self.device)
        block = (rows, torch.einsum("ij,ij->i", rows, rows))
        if self._keep:
            self._resident[start] = block
            self._uploaded_from = host
        return block

    def __call__(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        best: tuple[np.ndarray, np.ndarray] | None = None
        with exact_fp32(), torch.no_grad():
            for start in self.shards.starts:
                rows, norms = self._block(start)
                found = self._search_shard(self._on_device(queries), rows, norms, min(k, rows.shape[0]))
                best = merge_topk(best, (found[0], found[1] + start), k)
        assert best is not None
        return best

    def _on_device(self, queries: np.ndarray) -> np.ndarray | torch.Tensor:
        """A self-search's queries are the resident database itself: no second upload."""
        if self._uploaded_from is not None and queries is self._uploaded_from:
            return self._resident[0][0]
        return queries

    def _search_shard(self, queries: np.ndarray | torch.Tensor, rows: torch.Tensor, norms: torch.Tensor, k: int
                      ) -> tuple[np.ndarray, np.ndarray]:
        sq_dist = np.empty((queries.shape[0], k), dtype=np.float32)
        ids = np.empty((queries.shape[0], k), dtype=np.int64)
        per_block = max(1, min(self.query_batch, self.engine.block_budget() // (_BYTES_PER_SCORE * rows.shape[0])))
        for first in range(0, queries.shape[0], per_block):
            q = queries[first : first + per_block]
            if isinstance(q, np.ndarray):
                q = torch.from_numpy(np.ascontiguousarray(q)).to(self.device)
            scores = torch.addmm(norms, q, rows.T, alpha=-2.0)  # ||x||^2 - 2<q, x>
            values, found = torch.topk(scores, k, dim=1, largest=False, sorted=True)
            del scores
            values += torch.einsum("ij,ij->i", q, q)[:, None]
            sq_dist[first : first + len(q)] = values.cpu().numpy()
            ids[first : first + len(q)] = found.cpu().numpy()
        return sq_dist, ids


class TorchDistances:
    """distances(queries, candidates): exact float64 squared distances ||q - x||^2 of each query to its candidate
    rows, on the engine's device (the verified refine of :mod:`.exact`, where the torch engine searched); the
    database, as given (not centred), is uploaded once."""

    def __init__(self, database: np.ndarray, engine: Engine) -> None:
        self.engine = engine
        self.device = torch.device(engine.torch_device)
        self.database = torch.from_numpy(database).to(self.device)

    def __call__(self, queries: np.ndarray, cand: np.ndarray) -> np.ndarray:
        out = np.empty(cand.shape, dtype=np.float64)
        budget = max(self.engine.block_budget(), _MIN_REFINE_BYTES)
        per_chunk = max(1, budget // (_REFINE_BYTES_PER_ELEMENT * cand.shape[1] * self.database.shape[1]))
        for start in range(0, cand.shape[0], per_chunk):
            stop = start + per_chunk
            q = torch.from_numpy(np.ascontiguousarray(queries[start:stop])).to(self.device, torch.float64)
            rows = torch.from_numpy(np.ascontiguousarray(cand[start:stop])).to(self.device)
            diff = self.database[rows].double() - q[:, None, :]
            out[start:stop] = torch.einsum("qkd,qkd->qk", diff, diff).cpu().numpy()
        return out
