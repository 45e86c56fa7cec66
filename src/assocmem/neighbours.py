"""Exact (and IVF approximate) L2 nearest-neighbour search over activation matrices with faiss.

Arrays in, arrays or DataFrames out; nothing here touches the file system. Distances returned by
every public function are Euclidean (not squared) and float32; ids are int64 row numbers.

Exact search is brute force (faiss.knn on CPU, GpuIndexFlatL2 on GPU). Queries are processed in
batches and the database may be split into shards whose top-k lists are merged, so memory stays
bounded. faiss ranks by ||q||^2 + ||x||^2 - 2<q, x> in float32, which loses digits when the norms
are large compared with the distances (GPT-2's "massive activation" dimensions): with two +3000
dimensions on 2000 x 1024 Gaussian rows, 62% of the returned neighbour ids were wrong and exact
duplicates came out at distance 3.5 instead of 0. So by default (``center`` and ``refine``) the
search runs on mean-centred data, a few extra candidates are fetched, their distances recomputed
exactly in float64, and queries whose candidate pool could still hide a closer row (judged from
the float32 error measured on that pool) are searched again with a larger pool; see
:func:`_verified_search`. Ties in exact distance go to the smaller row id.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from assocmem import runtime
from assocmem.errors import AssocmemError
from assocmem.gemm import onednn_available, onednn_product

log = logging.getLogger(__name__)
# OpenBLAS kernel families, weakest first; faiss-cpu wheels bundle an OpenBLAS (0.3.15 in faiss-cpu 1.15.1)
# that can mis-detect a newer CPU and fall back to slow SSE kernels (measured on one host: 37 against
# 175 GFLOP/s once OPENBLAS_CORETYPE=SkylakeX was set).
_AVX2_CORES = frozenset({"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
_AVX512_CORES = frozenset({"SkylakeX", "Cooperlake", "SapphireRapids"})
_AVX512_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"})


def cpu_openblas_core(cpuinfo: str | None = None) -> str | None:
    """The OpenBLAS core type this CPU supports (``SkylakeX``, ``Zen``, ``Haswell``), from /proc/cpuinfo;
    None when unknown (not Linux x86, or no AVX2)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                      if line.startswith("flags")), []))
    if _AVX512_FLAGS.issubset(flags):
        return "SkylakeX"
    if {"avx2", "fma"}.issubset(flags):
        return "Zen" if ("AuthenticAMD" in cpuinfo or "HygonGenuine" in cpuinfo) else "Haswell"
    return None


def _choose_openblas_core() -> str | None:
    """Set OPENBLAS_CORETYPE for faiss's bundled OpenBLAS, which reads it once when it is loaded: so this runs
    before ``import faiss``. A value the user set is kept; nothing is set when faiss is already loaded."""
    if "OPENBLAS_CORETYPE" in os.environ or "faiss" in sys.modules:
        return None
    core = cpu_openblas_core()
    if core is not None:
        os.environ["OPENBLAS_CORETYPE"] = core
    return core


_choose_openblas_core()
import faiss  # noqa: E402 - after OPENBLAS_CORETYPE is chosen


def faiss_blas_core() -> str | None:
    """Core type the OpenBLAS bundled with faiss-cpu runs with (None: faiss uses another BLAS)."""
    libs = glob.glob(str(Path(faiss.__file__).parent.parent / "faiss_cpu.libs" / "libopenblas*"))
    if not libs:
        return None
    try:
        corename = ctypes.CDLL(libs[0]).openblas_get_corename
    except (OSError, AttributeError):
        return None
    corename.restype = ctypes.c_char_p
    return corename().decode()


def _weaker_core(detected: str | None, supported: str | None) -> bool:
    """True when faiss's OpenBLAS (core ``detected``) runs a weaker kernel family than the CPU supports."""
    return detected is not None and (
        (supported == "SkylakeX" and detected not in _AVX512_CORES)
        or (supported in ("Zen", "Haswell") and detected not in _AVX2_CORES))


def check_blas_core() -> dict[str, str | None]:
    """Warn when faiss's OpenBLAS runs kernels weaker than the CPU supports; return what was found."""
    detected, supported = faiss_blas_core(), cpu_openblas_core()
    if _weaker_core(detected, supported):
        log.warning("faiss's OpenBLAS runs %s kernels but this CPU supports %s: the faiss engine of exact k-NN may "
                    "run several times slower (cpu_engine auto takes onednn instead where torch has it). Set "
                    "OPENBLAS_CORETYPE=%s in the environment before Python starts.", detected, supported, supported)
    return {"faiss_openblas_core": detected, "cpu_supports": supported,
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}


DEFAULT_QUERY_BATCH = 16384
# faiss GPU brute force supports k up to this (GPU_MAX_SELECTION_K in faiss 1.7.3+).
GPU_MAX_K = 2048
# Refine: candidates fetched beyond k, safety factor on the measured float32 error, largest pool.
_EXTRA_CANDIDATES = 8
_SAFETY = 4.0
_MAX_POOL = 4096
_F32_EPS = float(np.finfo(np.float32).eps)
# float64 working set of one refine chunk (bytes): small enough to stay in cache (2.6x faster than 64 MiB).
_REFINE_BYTES = 2 << 20
# Fraction of free GPU memory one database shard may take when db_batch is not given.
_GPU_SHARD_FRACTION = 0.25
_GPU_FALLBACK_SHARD_BYTES = 2 << 30
SUMMARY_COLUMNS = ("count", "mean", "median", "std", "min", "p05", "p95")


class IvfResult(NamedTuple):
    distances: np.ndarray  # float32 (Q, k), Euclidean; inf where the IVF probe found fewer than k
    ids: np.ndarray  # int64 (Q, k); -1 where the IVF probe found fewer than k
    recall: float  # recall@k against exact search on the sampled queries
    sample_rows: np.ndarray  # int64 query rows the recall was measured on


# --------------------------------------------------------------------------- devices and threads


def default_threads() -> int:
    """Threads faiss uses when none are given: $OMP_NUM_THREADS (set by :func:`assocmem.runtime.set_threads`)
    or all cores."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        try:
            value = int(env)
        except ValueError as err:
            raise AssocmemError(f"environment variable OMP_NUM_THREADS={env!r} is not an integer") from err
        if value >= 1:
            return value
    return os.cpu_count() or 1


def set_threads(threads: int | None = None) -> int:
    """Set the search's thread count, faiss's OpenMP and torch's (the onednn engine), ``None`` ->
    :func:`default_threads`; return the count used."""
    count = default_threads() if threads is None else int(threads)
    if count < 1:
        raise AssocmemError(f"threads must be >= 1, got {threads}")
    faiss.omp_set_num_threads(count)
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


def resolve_device(device: str = "auto") -> str:
    """"auto" | "cpu" | "gpu" | "cuda" -> "cpu" or "gpu" (faiss-GPU), via :func:`assocmem.runtime.resolve_device`."""
    resolved = runtime.resolve_device(device, faiss=True, key="neighbours.device")
    return "cpu" if resolved == "cpu" else "gpu"


def _resolve_gpu_ids(gpu_ids: Sequence[int] | None) -> list[int]:
    available = runtime.faiss_gpu_count()
    ids = list(range(available)) if gpu_ids is None else [int(g) for g in gpu_ids]
    if not ids:
        raise AssocmemError("gpu_ids is empty")
    bad = [g for g in ids if not 0 <= g < available]
    if bad:
        raise AssocmemError(f"gpu_ids {bad} out of range: faiss sees {available} GPU(s)")
    return ids


# --------------------------------------------------------------------------- validation


def _as_matrix(name: str, array: Any) -> np.ndarray:
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


def _check_positive(name: str, value: int | None) -> None:
    if value is not None and int(value) < 1:
        raise AssocmemError(f"{name} must be >= 1, got {value}")


def _as_exclude_ids(exclude_ids: Any, n_queries: int) -> np.ndarray:
    ids = np.asarray(exclude_ids)
    if ids.shape != (n_queries,):
        raise AssocmemError(f"exclude_ids must have shape ({n_queries},), got {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise AssocmemError(f"exclude_ids must be integers, got dtype {ids.dtype}")
    return ids.astype(np.int64, copy=False)


# --------------------------------------------------------------------------- exact search


def knn(
    database: np.ndarray,
    queries: np.ndarray,
    k: int,
    *,
    device: str = "auto",
    query_batch: int = DEFAULT_QUERY_BATCH,
    db_batch: int | None = None,
    exclude_ids: np.ndarray | None = None,
    gpu_ids: Sequence[int] | None = None,
    refine: bool = True,
    center: bool = True,
    threads: int | None = None,
    cpu_engine: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours of each query row among the database rows (L2).

    Returns ``(distances, ids)``: float32 (Q, k) Euclidean distances, ascending, ties ordered by id,
    and int64 (Q, k) database row numbers.

    ``exclude_ids[q]`` is removed from query q's result by id (self-match removal): k+1 neighbours
    are searched and that id dropped, or the last column when it was not among them.
    ``db_batch`` splits the database into shards of that many rows whose results are merged
    (CPU default: no split; GPU default: sized from free GPU memory); shards go round-robin to
    ``gpu_ids`` (default: every GPU). ``center`` subtracts the database mean from both sides before
    the float32 search and ``refine`` recomputes the candidates' distances exactly in float64
    (see module docstring); both leave the exact answer unchanged and only remove rounding error.
    With ``center`` and a single shard, a centred copy of the database is held in memory; pass
    ``db_batch`` to bound that for databases near the RAM size. ``cpu_engine`` computes the float32
    candidate search on CPU: ``faiss`` (faiss.knn, on faiss's bundled OpenBLAS), ``onednn`` (the distance
    GEMM through oneDNN, then torch.topk; see :func:`_gemm_knn`) or ``auto`` (faiss, unless its OpenBLAS
    runs weaker kernels than the CPU supports; see :func:`resolve_cpu_engine`).
    """
    same_array = queries is database
    database = _as_matrix("database", database)
    queries = database if same_array else _as_matrix("queries", queries)
    if database.shape[1] != queries.shape[1]:
        raise AssocmemError(
            f"dimension mismatch: database has {database.shape[1]} columns, queries {queries.shape[1]}"
        )
    for name, value in (("k", k), ("query_batch", query_batch), ("db_batch", db_batch)):
        _check_positive(name, value)
    exclude = None if exclude_ids is None else _as_exclude_ids(exclude_ids, queries.shape[0])
    k_search = int(k) + (exclude is not None)
    if k_search > database.shape[0]:
        available = database.shape[0] - (exclude is not None)
        raise AssocmemError(
            f"k={k} exceeds the neighbours available: database has {database.shape[0]} rows"
            + (" (one excluded per query)" if exclude is not None else "")
            + f", so k <= {available}"
        )
    resolved = resolve_device(device)
    set_threads(threads)
    devices = _resolve_gpu_ids(gpu_ids) if resolved == "gpu" else []
    engine = None if devices else resolve_cpu_engine(cpu_engine)
    if devices and k_search > GPU_MAX_K:
        raise AssocmemError(f"k={k_search} (with the excluded self match) exceeds the GPU limit {GPU_MAX_K}")
    if refine:
        sq_dist, cand = _exact_search(database, queries, same_array, k_search, devices, int(query_batch),
                                      db_batch, center, engine)
    else:
        shards = _Shards(database, _shard_rows(database, db_batch, devices), center)
        search = _searcher(shards, shards.centre(queries, same_array), devices, int(query_batch), engine)
        sq_dist, cand = _sort_by_distance_then_id(*search(None, k_search))
    dist = np.sqrt(np.maximum(sq_dist, 0.0)).astype(np.float32)
    if exclude is not None:
        dist, cand = _drop_excluded(dist, cand, exclude)
    return dist, cand


def _shard_rows(database: np.ndarray, db_batch: int | None, devices: list[int]) -> int | None:
    if devices and db_batch is None:  # at least one shard per GPU
        per_device = -(-database.shape[0] // len(devices))
        return min(per_device, _default_gpu_db_batch(database.shape[1], devices))
    return db_batch


def _searcher(shards: _Shards, search_queries: np.ndarray, devices: list[int], query_batch: int,
              engine: str | None):
    """search(rows, pool): the pool nearest (float32 squared distance, shard row) of the given query rows."""

    def search(rows: np.ndarray | None, pool: int) -> tuple[np.ndarray, np.ndarray]:
        subset = search_queries if rows is None else search_queries[rows]
        if devices:
            return _search_gpu(shards, subset, pool, query_batch, devices)
        return _search_cpu(shards, subset, pool, query_batch, engine or "faiss")

    return search


def _exact_search(database: np.ndarray, queries: np.ndarray, same_array: bool, k: int, devices: list[int],
                  query_batch: int, db_batch: int | None, center: bool, engine: str | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """k best (exact float64 squared distance, row) per query, ties to the smaller row.

    Exact duplicate rows are searched once: activations of short shared prefixes repeat thousands of times
    (4586 copies of one row among 100,000 Question-Formation chunks), and a group of equal rows larger than
    the candidate pool can never be settled by :func:`_verified_search`, which then searched ever larger
    pools on every layer. Each distinct row stands for its group; the groups' rows are put back afterwards
    (:func:`_expand_groups`), which returns exactly the answer of the search over all rows."""
    db_groups = _duplicate_groups(database, k)
    unique_db = database if db_groups is None else database[db_groups.first_row]
    if same_array:
        q_groups, unique_queries = db_groups, unique_db
    else:
        q_groups = _duplicate_groups(queries, 1)
        unique_queries = queries if q_groups is None else queries[q_groups.first_row]
    shards = _Shards(unique_db, _shard_rows(unique_db, db_batch, devices), center)
    search_queries = shards.centre(unique_queries, unique_queries is unique_db)
    search = _searcher(shards, search_queries, devices, query_batch, engine)
    max_pool = max(k, min(unique_db.shape[0], GPU_MAX_K if devices else _MAX_POOL))
    k_unique = min(k, unique_db.shape[0])
    sq_dist, cand = _verified_search(search, shards, unique_queries, search_queries, k_unique, max_pool)
    if db_groups is not None:
        sq_dist, cand = _expand_groups(sq_dist, cand, db_groups, k)
    if q_groups is not None:
        sq_dist, cand = sq_dist[q_groups.of_row], cand[q_groups.of_row]
    return sq_dist, cand


class _Groups(NamedTuple):
    """Rows grouped by exact (bitwise) equality; groups are numbered in the order of their first row."""

    first_row: np.ndarray  # int64 (G,): the smallest row of each group, ascending
    of_row: np.ndarray  # int64 (N,): the group of each row
    members: np.ndarray  # int64 (G, m): each group's m smallest rows, ascending, padded with -1


def _duplicate_groups(x: np.ndarray, keep: int) -> _Groups | None:
    """Groups of identical rows of x with their ``keep`` smallest rows each; None when every row is distinct."""
    _, first, inverse, counts = np.unique(_row_hashes(x), return_index=True, return_inverse=True,
                                          return_counts=True)
    if len(first) == x.shape[0]:
        return None
    if not _rows_equal(x, first[inverse]):  # a 64-bit hash collision: group by the rows themselves
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
    return _Groups(first[order].astype(np.int64), of_row.astype(np.int64), members.astype(np.int64))


def _row_hashes(x: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes: its 32-bit words times fixed random multipliers, summed mod 2^64."""
    words = x.view(np.uint32)
    multipliers = np.random.default_rng(0x5EED).integers(1, 2**63, size=words.shape[1], dtype=np.uint64)
    out = np.empty(x.shape[0], dtype=np.uint64)
    step = max(1, (8 << 20) // (8 * words.shape[1]))
    for start in range(0, x.shape[0], step):
        out[start:start + step] = (words[start:start + step].astype(np.uint64) * multipliers).sum(axis=1)
    return out


def _rows_equal(x: np.ndarray, other_rows: np.ndarray) -> bool:
    step = max(1, (8 << 20) // x.shape[1])
    return all(np.array_equal(x[start:start + step].view(np.uint32), x[other_rows[start:start + step]].view(np.uint32))
               for start in range(0, x.shape[0], step))


def _expand_groups(sq_dist: np.ndarray, groups_found: np.ndarray, groups: _Groups, k: int
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
        out_dist[start:start + step], out_ids[start:start + step] = _sort_by_distance_then_id(dist, rows, keep=k)
    return out_dist, out_ids


class _Shards:
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
        return np.concatenate([_squared_norms(self.block(start)) for start in self.starts])


def _squared_norms(rows: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", rows, rows, dtype=np.float64)


def _verified_search(
    search, shards: _Shards, queries: np.ndarray, search_queries: np.ndarray, k: int, max_pool: int
) -> tuple[np.ndarray, np.ndarray]:
    """k best (exact float64 squared distance, id) per query, with a guarantee against float32 error.

    faiss ranks candidates by float32 ||q||^2 + ||x||^2 - 2<q, x>, whose error grows with the norms.
    We fetch a larger pool, recompute exactly the distances of the candidates that can be among the
    k nearest (:func:`_refine_pool`), and estimate the float32 error per unit of norm from them. A
    query is settled when its last (pool-th) float32 distance exceeds its k-th exact distance by more
    than the error margin: then no row outside the pool can beat the k-th. Unsettled queries are
    searched again with a 4x larger pool, up to ``max_pool`` (then accepted with a warning). Ties in
    exact distance go to the smaller id.
    """
    n_rows = shards.database.shape[0]
    x_norms = shards.squared_norms()
    q_norms = _squared_norms(search_queries)
    out_dist = np.empty((queries.shape[0], k), dtype=np.float64)
    out_ids = np.empty((queries.shape[0], k), dtype=np.int64)
    # Floor: the float32 formula's rounding is of order eps * (|q|^2 + |x|^2) whatever the pool shows. A pool
    # whose candidates happen to round exactly (small-integer rows) measured 0 and let a tie at the k-th
    # distance rounded just past the pool go unseen (tests: the exact tie order, on the onednn engine).
    error_per_norm = _F32_EPS
    rows: np.ndarray | None = None  # None: all queries (avoids copying them)
    pool = min(max_pool, k + max(_EXTRA_CANDIDATES, k // 4))
    while True:
        todo = np.arange(queries.shape[0]) if rows is None else rows
        approx, cand = search(rows, pool)
        scale = q_norms[todo, None] + x_norms[cand]
        exact, error_per_norm = _refine_pool(shards.database, queries if rows is None else queries[rows], approx,
                                             cand, scale, k, error_per_norm)
        best_dist, best_ids = _sort_by_distance_then_id(exact, cand, keep=k)
        # A row x can only beat the k-th exact distance d_k if |x| <= |q| + d_k (triangle inequality),
        # which bounds the norm, and so the float32 error, of the rows that matter.
        q_norm = q_norms[todo]
        reach = np.minimum(x_norms.max(), (np.sqrt(q_norm) + np.sqrt(np.maximum(best_dist[:, -1], 0))) ** 2)
        margin = _SAFETY * error_per_norm * (q_norm + reach)
        settled = (approx[:, -1] > best_dist[:, -1] + margin) | (pool >= n_rows)
        if pool >= max_pool:
            _warn_unsettled(int((~settled).sum()), pool)
            settled[:] = True
        out_dist[todo[settled]], out_ids[todo[settled]] = best_dist[settled], best_ids[settled]
        if settled.all():
            return out_dist, out_ids
        rows = todo[~settled]
        pool = min(max_pool, 4 * pool)


def _refine_pool(database: np.ndarray, batch: np.ndarray, approx: np.ndarray, cand: np.ndarray, scale: np.ndarray,
                 k: int, error_per_norm: float) -> tuple[np.ndarray, float]:
    """Exact float64 squared distances of the pool's candidates that can be among the k nearest (inf for the
    others), and the largest float32 error per unit of squared norm seen so far.

    The first k candidates (in float32 order) are recomputed: their largest exact distance bounds the k-th
    from above. A later candidate is recomputed only when its float32 distance lies within the error margin
    of that bound; the others are farther than k rows already found, so they cannot be among the k nearest.
    On 20,000 Gaussian rows of dimension 1024 that skips 8 of 19 candidates per query."""
    exact = np.full(cand.shape, np.inf)
    exact[:, :k] = _exact_squared_distances(database, batch, cand[:, :k])
    seen = np.abs(approx[:, :k] - exact[:, :k]) / np.maximum(scale[:, :k], 1e-30)
    error_per_norm = max(error_per_norm, float(seen.max(initial=0.0)))
    bound = exact[:, :k].max(axis=1, initial=-np.inf)
    query, column = np.nonzero(approx[:, k:] <= bound[:, None] + _SAFETY * error_per_norm * scale[:, k:])
    if query.size:
        column += k
        exact[query, column] = _exact_squared_distances(database, batch[query], cand[query, column, None])[:, 0]
    return exact, error_per_norm


def _warn_unsettled(count: int, pool: int) -> None:
    if count:
        warnings.warn(
            f"knn: {count} queries still had candidates within float32 error of their k-th neighbour "
            f"after searching {pool} candidates (many near-equal or duplicate rows); their neighbours are exact "
            "only up to that error: a row closer by less than it may be missed, and ties may not be broken by "
            "smallest id",
            RuntimeWarning,
            stacklevel=3,
        )


def _progress(total: int, desc: str) -> tqdm:
    return tqdm(total=total, desc=desc, disable=total < 2, leave=False)


CPU_ENGINES = ("auto", "faiss", "onednn")
# _gemm_knn's blocks of float32 scores: 256 queries x 8,192 database rows (8 MiB) keep the oneDNN product at its
# 4096-row rate and let topk read the block from cache; one 256 x 80,000 block (80 MiB) ran 15-20 % slower
# (benchmarks/README.md)
_QUERY_TILE = 256
_COLUMN_CHUNK = 8192


def resolve_cpu_engine(choice: str, *, key: str = "neighbours.cpu_engine") -> str:
    """The CPU search engine. ``auto`` takes faiss, unless faiss's OpenBLAS runs weaker kernels than the CPU
    supports (an OPENBLAS_CORETYPE set before Python started, or a mis-detection) and torch has oneDNN: on the
    project's AMD EPYC, 4096 x 1024 x 4096 products ran at 510 GFLOP/s in OpenBLAS's SkylakeX kernels, 400 in
    oneDNN and 270 in OpenBLAS's Haswell kernels (benchmarks/README.md)."""
    if choice not in CPU_ENGINES:
        raise AssocmemError(f"{key}: {choice!r} is not one of {', '.join(CPU_ENGINES)}")
    if choice == "onednn" and not onednn_available():
        raise AssocmemError(f"{key}: onednn needs a torch build with oneDNN; use auto or faiss")
    if choice == "auto":
        weaker = _weaker_core(faiss_blas_core(), cpu_openblas_core())
        return "onednn" if weaker and onednn_available() else "faiss"
    return choice


def _gemm_knn(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """faiss.knn's contract (float32 squared L2 distances ascending, int64 ids) from the same float32 formula
    ||q||^2 + ||x||^2 - 2<q, x> (the onednn engine, for machines where faiss's OpenBLAS is held to weaker
    kernels; see :func:`resolve_cpu_engine`). Per query tile: ||q||^2, the same for a whole row, is added to
    the k selected values only."""
    q_all, x = _as_tensor(queries), _as_tensor(database)
    x_norms = torch.einsum("ij,ij->i", x, x)
    sq_dist = np.empty((len(queries), k), dtype=np.float32)
    ids = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), _QUERY_TILE):
        q = q_all[start : start + _QUERY_TILE]
        values, found = _tile_topk(q * -2.0, x, x_norms, k)
        sq_dist[start : start + len(q)] = (values + torch.einsum("ij,ij->i", q, q)[:, None]).numpy()
        ids[start : start + len(q)] = found.numpy()
    return sq_dist, ids


def _tile_topk(
    scaled_queries: torch.Tensor, x: torch.Tensor, x_norms: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k smallest of (-2q) x^T + ||x||^2 per query, ascending, with their row ids: one oneDNN product per
    chunk of database rows (scaling by -2 is exact, ||x||^2 is the product's bias), the chunk's k smallest by
    topk while its scores are in cache, then the k smallest of those."""
    values, found = [], []
    for first in range(0, x.shape[0], _COLUMN_CHUNK):
        rows = slice(first, first + _COLUMN_CHUNK)
        scores = onednn_product(scaled_queries, x[rows], x_norms[rows])
        chunk_values, chunk_ids = torch.topk(scores, min(k, scores.shape[1]), dim=1, largest=False, sorted=False)
        values.append(chunk_values)
        found.append(chunk_ids + first)
    best, pick = torch.topk(torch.cat(values, dim=1), k, dim=1, largest=False, sorted=True)
    return best, torch.gather(torch.cat(found, dim=1), 1, pick)


def _as_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing the array's memory; read-only arrays (memory maps) are fine, as nothing writes to it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def _search_cpu(
    shards: _Shards, queries: np.ndarray, k: int, query_batch: int, engine: str
) -> tuple[np.ndarray, np.ndarray]:
    search = faiss.knn if engine == "faiss" else _gemm_knn
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
            best = _merge_topk(best, (sq_dist, ids + start), k)
    assert best is not None
    return best


def _search_gpu(
    shards: _Shards, queries: np.ndarray, k: int, query_batch: int, devices: list[int]
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
            best = _merge_topk(best, (sq_dist, ids + start), k)
        return best

    # faiss releases the GIL during search, so the devices run concurrently.
    with ThreadPoolExecutor(max_workers=len(devices)) as pool:
        per_device = list(pool.map(run_device, range(len(devices))))
    best = None
    for result in per_device:
        if result is not None:
            best = _merge_topk(best, result, k)
    assert best is not None
    return best


def _default_gpu_db_batch(dim: int, devices: list[int]) -> int:
    try:
        import torch

        free = min(int(torch.cuda.mem_get_info(g)[0]) for g in devices)
    except (ImportError, RuntimeError, AssertionError):
        free = _GPU_FALLBACK_SHARD_BYTES / _GPU_SHARD_FRACTION
    return max(1, int(free * _GPU_SHARD_FRACTION) // (4 * dim))


def _merge_topk(
    best: tuple[np.ndarray, np.ndarray] | None, new: tuple[np.ndarray, np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two (squared distance, global id) lists into the k best per row, ties broken by smaller id."""
    if best is None:
        return new
    sq_dist = np.concatenate([best[0], new[0]], axis=1)
    ids = np.concatenate([best[1], new[1]], axis=1)
    return _sort_by_distance_then_id(sq_dist, ids, keep=k)


def _sort_by_distance_then_id(
    dist: np.ndarray, ids: np.ndarray, keep: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((ids, dist), axis=1)[:, :keep]
    return np.take_along_axis(dist, order, axis=1), np.take_along_axis(ids, order, axis=1)


def _exact_squared_distances(database: np.ndarray, batch: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """||q - x||^2 in float64 for each query and its candidate ids, in cache-sized chunks."""
    out = np.empty(cand.shape, dtype=np.float64)
    rows_per_chunk = max(1, _REFINE_BYTES // (8 * cand.shape[1] * database.shape[1]))
    for start in range(0, cand.shape[0], rows_per_chunk):
        stop = start + rows_per_chunk
        diff = np.subtract(database[cand[start:stop]], batch[start:stop, None, :], dtype=np.float64)
        out[start:stop] = np.einsum("qkd,qkd->qk", diff, diff)
    return out


def _drop_excluded(dist: np.ndarray, ids: np.ndarray, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop exclude[q] from row q (first occurrence), or the last column when it is absent."""
    matches = ids == exclude[:, None]
    drop_col = np.where(matches.any(axis=1), matches.argmax(axis=1), ids.shape[1] - 1)
    keep = np.ones(ids.shape, dtype=bool)
    keep[np.arange(ids.shape[0]), drop_col] = False
    new_shape = (ids.shape[0], ids.shape[1] - 1)
    return dist[keep].reshape(new_shape), ids[keep].reshape(new_shape)


# --------------------------------------------------------------------------- DataFrame front ends


def _neighbour_frame(
    query_rows: np.ndarray, neighbour_rows: np.ndarray, distances: np.ndarray
) -> pd.DataFrame:
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
    device: str = "auto",
    **knn_options: Any,
) -> pd.DataFrame:
    """k nearest other rows of every row of x, within nested random subsamples of x.

    Columns: fraction, query_row, rank (1..k), neighbour_row, distance; rows refer to x. A row's
    own id is excluded; exact duplicates of it are kept (at distance 0). ``knn_options`` go to :func:`knn`.
    """
    x = _as_matrix("x", x)
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
        dist, ids = knn(subset, subset, k, device=device, exclude_ids=local, **knn_options)
        frame = _neighbour_frame(rows, rows[ids], dist)
        frame.insert(0, "fraction", float(fraction))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def heldout_search(
    train_x: np.ndarray, query_x: np.ndarray, k: int, device: str = "auto", **knn_options: Any
) -> pd.DataFrame:
    """k nearest training rows of every held-out row. Columns: query_row, rank, neighbour_row, distance."""
    dist, ids = knn(train_x, query_x, k, device=device, **knn_options)
    return _neighbour_frame(np.arange(ids.shape[0]), ids, dist)


# --------------------------------------------------------------------------- approximate search


def ivf_search(
    database: np.ndarray,
    queries: np.ndarray,
    k: int,
    *,
    nlist: int,
    nprobe: int,
    seed: int = 0,
    device: str = "auto",
    train_size: int | None = None,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate k-NN with faiss.IndexIVFFlat trained on a seeded sample of ``train_size`` rows
    (default min(N, 256*nlist)). Returns (Euclidean float32 distances, int64 ids); a query whose
    probed lists hold fewer than k rows gets id -1 / distance inf in the missing slots."""
    database = _as_matrix("database", database)
    queries = _as_matrix("queries", queries)
    n_rows, dim = database.shape
    if queries.shape[1] != dim:
        raise AssocmemError(f"dimension mismatch: database has {dim} columns, queries {queries.shape[1]}")
    for name, value in (("k", k), ("nlist", nlist), ("nprobe", nprobe), ("train_size", train_size)):
        _check_positive(name, value)
    if k > n_rows:
        raise AssocmemError(f"k={k} exceeds database rows {n_rows}")
    if nprobe > nlist:
        raise AssocmemError(f"nprobe={nprobe} exceeds nlist={nlist}")
    n_train = min(n_rows, 256 * nlist) if train_size is None else min(n_rows, int(train_size))
    if n_train < nlist:
        raise AssocmemError(f"IVF training needs at least nlist={nlist} rows, have {n_train}")
    resolved = resolve_device(device)
    set_threads(threads)

    quantizer = faiss.IndexFlatL2(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, int(nlist), faiss.METRIC_L2)
    index.cp.seed = int(seed)
    train_rows = np.sort(np.random.default_rng(seed).choice(n_rows, size=n_train, replace=False))
    index.train(database[train_rows])
    index.add(database)
    index.nprobe = int(nprobe)
    if resolved == "gpu":
        resources = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(resources, _resolve_gpu_ids(None)[0], index)
    sq_dist, ids = index.search(queries, int(k))
    dist = np.sqrt(np.maximum(sq_dist, 0.0)).astype(np.float32)
    dist[ids < 0] = np.inf
    return dist, ids.astype(np.int64, copy=False)


def recall_at_k(exact_ids: np.ndarray, approx_ids: np.ndarray) -> float:
    """Mean over queries of |exact ∩ approx| / k for (Q, k) id arrays (-1 in approx counts as a miss)."""
    exact_ids, approx_ids = np.asarray(exact_ids), np.asarray(approx_ids)
    if exact_ids.ndim != 2 or exact_ids.shape != approx_ids.shape or exact_ids.size == 0:
        raise AssocmemError(
            f"exact_ids and approx_ids must be non-empty (Q, k) arrays of one shape, "
            f"got {exact_ids.shape} and {approx_ids.shape}"
        )
    hits = 0
    rows_per_chunk = max(1, (16 << 20) // exact_ids.shape[1] ** 2)
    for start in range(0, exact_ids.shape[0], rows_per_chunk):
        exact, approx = exact_ids[start : start + rows_per_chunk], approx_ids[start : start + rows_per_chunk]
        found = (approx[:, :, None] == exact[:, None, :]) & (approx[:, :, None] >= 0)
        hits += int(found.any(axis=2).sum())
    return hits / exact_ids.size


def ivf_with_recall(
    database: np.ndarray,
    queries: np.ndarray,
    k: int,
    nlist: int,
    nprobe: int,
    sample: int,
    seed: int = 0,
    device: str = "auto",
) -> IvfResult:
    """IVF search for all queries, plus recall@k against exact search on ``sample`` seeded query rows."""
    _check_positive("sample", sample)
    dist, ids = ivf_search(database, queries, k, nlist=nlist, nprobe=nprobe, seed=seed, device=device)
    n_queries = ids.shape[0]
    sample_rows = np.sort(
        np.random.default_rng(seed).choice(n_queries, size=min(int(sample), n_queries), replace=False)
    ).astype(np.int64)
    _, exact_ids = knn(database, np.asarray(queries)[sample_rows], k, device=device)
    return IvfResult(dist, ids, recall_at_k(exact_ids, ids[sample_rows]), sample_rows)


def ivf_self_search(
    x: np.ndarray,
    k: int,
    fractions: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
    *,
    nlist: int,
    nprobe: int,
    sample: int,
    seed: int = 0,
    device: str = "auto",
) -> tuple[pd.DataFrame, dict[float, float]]:
    """:func:`self_search` with an IVF index, for sets too large for exact search.

    Returns the neighbour frame and, per fraction, recall@k measured against exact search on ``sample``
    seeded query rows (the self match removed by id on both sides)."""
    x = _as_matrix("x", x)
    frames, recalls = [], {}
    for fraction in fractions:
        rows = nested_subsample_rows(x.shape[0], float(fraction), seed)
        subset = x if rows.size == x.shape[0] else x[rows]
        local = np.arange(rows.size, dtype=np.int64)
        dist, ids = ivf_search(subset, subset, k + 1, nlist=min(nlist, rows.size), nprobe=nprobe, seed=seed,
                               device=device)
        dist, ids = _drop_excluded(dist, ids, local)
        probe = np.sort(np.random.default_rng(seed).choice(rows.size, size=min(sample, rows.size), replace=False))
        _, exact = knn(subset, subset[probe], k, device=device, exclude_ids=probe)
        recalls[float(fraction)] = recall_at_k(exact, ids[probe])
        frame = _neighbour_frame(rows, np.where(ids >= 0, rows[np.maximum(ids, 0)], -1), dist)
        frame.insert(0, "fraction", float(fraction))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True), recalls


def ivf_heldout_search(train_x: np.ndarray, query_x: np.ndarray, k: int, *, nlist: int, nprobe: int, sample: int,
                       seed: int = 0, device: str = "auto") -> tuple[pd.DataFrame, float]:
    """:func:`heldout_search` with an IVF index; returns the frame and recall@k on ``sample`` queries."""
    result = ivf_with_recall(train_x, query_x, k, min(nlist, len(train_x)), nprobe, sample, seed, device)
    return _neighbour_frame(np.arange(result.ids.shape[0]), result.ids, result.distances), result.recall


# --------------------------------------------------------------------------- summaries


def summarise(df: pd.DataFrame, group_cols: Sequence[str]) -> pd.DataFrame:
    """Nearest-neighbour (rank 1) distance statistics per group.

    Columns: ``group_cols`` then count, mean, median, std (ddof=1), min, p05, p95 (linear-interpolated
    percentiles). An empty ``group_cols`` gives one row over everything.
    """
    group_cols = list(group_cols)
    missing = [c for c in [*group_cols, "rank", "distance"] if c not in df.columns]
    if missing:
        raise AssocmemError(f"summarise: DataFrame lacks column(s) {missing}; has {list(df.columns)}")
    nearest = df.loc[df["rank"] == 1, [*group_cols, "distance"]]
    nearest = nearest.assign(distance=nearest["distance"].astype(np.float64))
    keys = group_cols or np.zeros(len(nearest), dtype=np.int64)
    stats = nearest.groupby(keys, sort=True)["distance"].agg(
        count="count",
        mean="mean",
        median="median",
        std="std",
        min="min",
        p05=lambda s: s.quantile(0.05),
        p95=lambda s: s.quantile(0.95),
    )
    if group_cols:
        return stats.reset_index()[[*group_cols, *SUMMARY_COLUMNS]]
    return stats.reset_index(drop=True)[list(SUMMARY_COLUMNS)]


# --------------------------------------------------------------------------- the neighbours stage


def search_layer(x: np.ndarray, q: np.ndarray, cfg: dict[str, Any], seed: int
                 ) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]]]:
    """Self-search of one layer's training activations at every subsample fraction, and held-out queries
    against them: exact (default) or IVF, which also returns its measured recall@k."""
    k, fractions, device = cfg["k"], tuple(cfg["fractions"]), cfg["device"]
    if cfg["method"] == "exact":
        engine = cfg.get("cpu_engine", "auto")
        return (self_search(x, k, fractions=fractions, seed=seed, device=device, cpu_engine=engine),
                heldout_search(x, q, k, device=device, cpu_engine=engine), [])
    ivf = {"nlist": cfg["nlist"], "nprobe": cfg["nprobe"], "sample": cfg["recall_sample"], "seed": seed,
           "device": device}
    self_df, self_recall = ivf_self_search(x, k, fractions, **ivf)
    held_df, held_recall = ivf_heldout_search(x, q, k, **ivf)
    recall = [{"fraction": f, "protocol": "self", "recall_at_k": r} for f, r in self_recall.items()]
    return self_df, held_df, recall + [{"fraction": 1.0, "protocol": "heldout", "recall_at_k": held_recall}]


def search_activations(train: np.ndarray, heldout: np.ndarray, layers: Sequence[str], cfg: dict[str, Any],
                       seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every layer of (n_layers, n_chunks, d) activation arrays: (self frame, held-out frame, summary)."""
    log.info("BLAS for exact search: %s; CPU engine: %s", check_blas_core(),
             resolve_cpu_engine(cfg.get("cpu_engine", "auto")))
    self_frames, held_frames, recalls = [], [], []
    for slot, layer in enumerate(layers):
        x = np.ascontiguousarray(train[slot], dtype=np.float32)
        q = np.ascontiguousarray(heldout[slot], dtype=np.float32)
        self_df, held_df, recall = search_layer(x, q, cfg, seed)
        self_frames.append(self_df.assign(layer=layer))
        held_frames.append(held_df.assign(layer=layer))
        recalls += [{"layer": layer, **row} for row in recall]
    self_df = pd.concat(self_frames, ignore_index=True)
    held_df = pd.concat(held_frames, ignore_index=True)
    summary = pd.concat([
        summarise(self_df, ["layer", "fraction"]).assign(protocol="self"),
        summarise(held_df.assign(fraction=1.0), ["layer", "fraction"]).assign(protocol="heldout"),
    ], ignore_index=True)
    summary["n_dim"] = int(train.shape[2])
    summary["method"] = cfg["method"]
    if recalls:
        summary = summary.merge(pd.DataFrame(recalls), on=["layer", "fraction", "protocol"], how="left")
    return self_df, held_df, summary
