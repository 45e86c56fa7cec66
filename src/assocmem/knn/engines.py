"""The float32 candidate search of exact k-NN: which k rows of each shard are nearest by faiss's formula.

On CPU, ``faiss`` (faiss.knn, on faiss's bundled OpenBLAS) or ``onednn`` (the same float32 formula, the distance
GEMM through oneDNN, then the k smallest of each block: :func:`gemm_knn`), chosen by :func:`choose_cpu_engine`
(``auto``: timed at the search's shape on this host); on GPU, faiss's GpuIndexFlatL2 with the shards dealt
round-robin to the devices. Every engine returns float32 squared distances ascending and int64 database rows,
merged over shards with ties to the smaller row.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from assocmem.autotune import Choice, choose, host_key
from assocmem.autotune.measure import Clock
from assocmem.errors import AssocmemError
from assocmem.gemm import onednn_available, onednn_product
from assocmem.knn.select import DEFAULT_GROUP, smallest_k
from assocmem.knn.shards import Shards
from assocmem.knn.topk import merge_topk
from assocmem.progress import bar
from assocmem.runtime.blas import faiss_blas_core, import_faiss

faiss = import_faiss()

CPU_ENGINES = ("auto", "faiss", "onednn")
# Fraction of free GPU memory one database shard may take when db_batch is not given.
_GPU_SHARD_FRACTION = 0.25
_GPU_FALLBACK_SHARD_BYTES = 2 << 30
# cpu_engine auto: below this many multiply-adds (queries x rows x dim) a search takes milliseconds, less than timing
# the engines would, and faiss runs it untimed. The timing searches TIMING_QUERIES queries (gemm_knn's tiles are 256
# wide, faiss's query blocks 4096) against the database's rows, at most TIMING_DATABASE_BYTES of them.
TIMING_MIN_MACS = 1 << 30
TIMING_QUERIES = 1024
TIMING_DATABASE_BYTES = 256 << 20


@dataclass(frozen=True)
class GemmBlocks:
    """Blocks of float32 scores of :func:`gemm_knn`: ``query_tile`` queries x ``column_chunk`` database rows, each
    block's k smallest selected through the minima of ``group`` columns (:func:`assocmem.knn.select.smallest_k`;
    0: topk over the whole block).

    256 x 8,192 (8 MiB) keep the oneDNN product at its 4096-row rate and let the selection read the block from
    cache; one 256 x 80,000 block (80 MiB) ran 15-20 % slower (benchmarks/README.md)."""

    query_tile: int = 256
    column_chunk: int = 8192
    group: int = DEFAULT_GROUP


DEFAULT_GEMM_BLOCKS = GemmBlocks()


def choose_cpu_engine(choice: str, search: tuple[int, int, int, int] | None = None, *, onednn: bool | None = None,
                      key: str = "neighbours.cpu_engine", cache_file: Path | None = None,
                      clock: Clock = time.perf_counter, budget_s: float = 1.0) -> Choice:
    """The CPU search engine. An explicit ``faiss``/``onednn`` is used as given; ``auto`` times both engines at
    ``search`` = (queries, database rows, dim, k) on this host (:func:`assocmem.autotune.choose`: cached per host
    and shape) and takes the faster. It takes faiss untimed where torch lacks oneDNN, and for a search below
    ``TIMING_MIN_MACS`` (or none given). Both engines give the same answer after the verified refine
    (:mod:`.exact`), so the choice changes only the time.

    ``onednn``: whether torch has oneDNN (default: :func:`assocmem.gemm.onednn_available`); ``cache_file``: the
    choice cache (default: :func:`assocmem.autotune.default_cache_file`); ``clock``: the timer."""
    if choice not in CPU_ENGINES:
        raise AssocmemError(f"{key}: {choice!r} is not one of {', '.join(CPU_ENGINES)}")
    has_onednn = onednn_available() if onednn is None else onednn
    if choice == "onednn" and not has_onednn:
        raise AssocmemError(f"{key}: onednn needs a torch build with oneDNN; use auto or faiss")
    if choice != "auto":
        return Choice(choice, "explicit")
    if not has_onednn:
        return Choice("faiss", "unavailable")
    if search is None or math.prod(search[:3]) < TIMING_MIN_MACS:
        return Choice("faiss", "small", shape=None if search is None else dict(zip(SEARCH_FIELDS, search, strict=True)))
    queries, rows, dim, k = search
    rows = min(rows, max(1, TIMING_DATABASE_BYTES // (4 * dim)))
    blocks = list(astuple(DEFAULT_GEMM_BLOCKS))  # a cached choice times today's blocks and selection
    shape = {"queries": min(queries, TIMING_QUERIES, rows), "rows": rows, "dim": dim, "k": min(k, rows),
             "blocks": blocks}
    host = host_key(faiss=faiss.__version__, faiss_blas=faiss_blas_core(), faiss_threads=faiss.omp_get_max_threads())
    return choose("neighbours.cpu_engine", shape, engine_searches(shape), host=host, cache_file=cache_file,
                  clock=clock, rounds=3, warmup=1, budget_s=budget_s)  # one search can take a few hundred ms


SEARCH_FIELDS = ("queries", "rows", "dim", "k")


def resolve_cpu_engine(choice: str, search: tuple[int, int, int, int] | None = None, *, onednn: bool | None = None,
                       key: str = "neighbours.cpu_engine") -> str:
    """The engine :func:`choose_cpu_engine` picks."""
    return choose_cpu_engine(choice, search, onednn=onednn, key=key).value


def engine_searches(shape: dict) -> dict[str, Callable[[], object]]:
    """One search per engine at ``shape`` (queries, rows, dim, k), on fixed Gaussian data."""
    rng = np.random.default_rng(0)
    database = rng.standard_normal((shape["rows"], shape["dim"]), dtype=np.float32)
    queries = np.ascontiguousarray(database[: shape["queries"]])
    return {"faiss": lambda: faiss.knn(queries, database, shape["k"]),
            "onednn": lambda: gemm_knn(queries, database, shape["k"])}


def gemm_knn(queries: np.ndarray, database: np.ndarray, k: int, blocks: GemmBlocks = DEFAULT_GEMM_BLOCKS
             ) -> tuple[np.ndarray, np.ndarray]:
    """faiss.knn's contract (float32 squared L2 distances ascending, int64 ids) from the same float32 formula
    ||q||^2 + ||x||^2 - 2<q, x> (the onednn engine, where it is faster than faiss's OpenBLAS; see
    :func:`choose_cpu_engine`). Per query tile: ||q||^2, the same for a whole row, is added to
    the k selected values only. Read-only arrays (memory maps) are fine."""
    q_all, x = _as_tensor(queries), _as_tensor(database)
    x_norms = torch.einsum("ij,ij->i", x, x)
    sq_dist = np.empty((len(queries), k), dtype=np.float32)
    ids = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), blocks.query_tile):
        q = q_all[start : start + blocks.query_tile]
        values, found = _tile_topk(q * -2.0, x, x_norms, k, blocks)
        sq_dist[start : start + len(q)] = (values + torch.einsum("ij,ij->i", q, q)[:, None]).numpy()
        ids[start : start + len(q)] = found.numpy()
    return sq_dist, ids


def _tile_topk(
    scaled_queries: torch.Tensor, x: torch.Tensor, x_norms: torch.Tensor, k: int, blocks: GemmBlocks
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k smallest of (-2q) x^T + ||x||^2 per query, ascending, with their row ids: one oneDNN product per
    chunk of database rows (scaling by -2 is exact, ||x||^2 is the product's bias), the chunk's k smallest
    (:func:`smallest_k`) while its scores are in cache, then the k smallest of those."""
    values, found = [], []
    for first in range(0, x.shape[0], blocks.column_chunk):
        rows = slice(first, first + blocks.column_chunk)
        scores = onednn_product(scaled_queries, x[rows], x_norms[rows])
        chunk_values, chunk_ids = smallest_k(scores, min(k, scores.shape[1]), blocks.group)
        values.append(chunk_values)
        found.append(chunk_ids + first)
    best, pick = torch.topk(torch.cat(values, dim=1), k, dim=1, largest=False, sorted=True)
    return best, torch.gather(torch.cat(found, dim=1), 1, pick)


def _as_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing the array's memory; read-only arrays (memory maps) are fine, as nothing writes to it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def _progress(total: int, desc: str) -> tqdm:
    return bar(total=total, desc=desc, unit="block", disable=total < 2, leave=False)


def search_cpu(
    shards: Shards, queries: np.ndarray, k: int, query_batch: int, engine: str
) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest (float32 squared distance, database row) of each query over all shards, on CPU."""
    search = faiss.knn if engine == "faiss" else gemm_knn
    best: tuple[np.ndarray, np.ndarray] | None = None
    n_batches = -(-queries.shape[0] // query_batch)
    with _progress(len(shards.starts) * n_batches, "knn (cpu)") as bar:
        for start in shards.starts:
            block = shards.block(start)
            k_block = min(k, block.shape[0])
            sq_dist = np.empty((queries.shape[0], k_block), dtype=np.float32)
            ids = np.empty((queries.shape[0], k_block), dtype=np.int64)
            for q0 in range(0, queries.shape[0], query_batch):
                q1 = q0 + query_batch
                sq_dist[q0:q1], ids[q0:q1] = search(queries[q0:q1], block, k_block)
                bar.update()
            best = merge_topk(best, (sq_dist, ids + start), k)
    assert best is not None
    return best


def search_gpu(
    shards: Shards, queries: np.ndarray, k: int, query_batch: int, devices: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Each GPU gets every len(devices)-th shard and merges its own results; then the GPUs' results merge."""

    def run_device(slot: int) -> tuple[np.ndarray, np.ndarray] | None:
        device = devices[slot]
        resources = faiss.StandardGpuResources()  # not thread-safe: one per worker thread
        config = faiss.GpuIndexFlatConfig()
        config.device = device
        best = None
        for start in shards.starts[slot :: len(devices)]:
            block = shards.block(start)
            index = faiss.GpuIndexFlatL2(resources, block.shape[1], config)
            index.add(block)
            k_block = min(k, block.shape[0])
            sq_dist = np.empty((queries.shape[0], k_block), dtype=np.float32)
            ids = np.empty((queries.shape[0], k_block), dtype=np.int64)
            for q0 in range(0, queries.shape[0], query_batch):
                sq_dist[q0 : q0 + query_batch], ids[q0 : q0 + query_batch] = index.search(
                    queries[q0 : q0 + query_batch], k_block
                )
            del index
            best = merge_topk(best, (sq_dist, ids + start), k)
        return best

    # faiss releases the GIL during search, so the devices run concurrently.
    with ThreadPoolExecutor(max_workers=len(devices)) as pool:
        per_device = list(pool.map(run_device, range(len(devices))))
    best = None
    for result in per_device:
        if result is not None:
            best = merge_topk(best, result, k)
    assert best is not None
    return best


def default_gpu_db_batch(dim: int, devices: list[int]) -> int:
    """Rows of one database shard on GPU: a quarter of the smallest free memory among ``devices``."""
    try:
        free = min(int(torch.cuda.mem_get_info(g)[0]) for g in devices)
    except (RuntimeError, AssertionError):
        free = _GPU_FALLBACK_SHARD_BYTES / _GPU_SHARD_FRACTION
    return max(1, int(free * _GPU_SHARD_FRACTION) // (4 * dim))
