"""Exact L2 nearest-neighbour search with a guarantee against float32 rounding.

Exact search is brute force (faiss.knn or the oneDNN product on CPU, GpuIndexFlatL2 on GPU:
:mod:`assocmem.knn.engines`; fp32 GEMM + topk in torch on either: :mod:`assocmem.knn.torch_engine`). Queries are
processed in batches and the database may be split into shards whose top-k lists are merged, so memory stays
bounded. faiss ranks by ||q||^2 + ||x||^2 - 2<q, x> in float32, which loses digits when the norms
are large compared with the distances (GPT-2's "massive activation" dimensions): with two +3000
dimensions on 2000 x 1024 Gaussian rows, 62% of the returned neighbour ids were wrong and exact
duplicates came out at distance 3.5 instead of 0. So by default (``center`` and ``refine``) the
search runs on mean-centred data, a few extra candidates are fetched, their distances recomputed
exactly in float64, and queries whose candidate pool could still hide a closer row (judged from
the float32 error measured on that pool) are searched again with a larger pool; see
:func:`_verified_search`. Ties in exact distance go to the smaller row id.

Each candidate search is logged at DEBUG on this module's logger: queries, pool size and engine kind
(:data:`assocmem.knn.engine.KINDS`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from functools import partial

import numpy as np

from assocmem import runtime
from assocmem.errors import AssocmemError
from assocmem.knn.duplicates import duplicate_groups, expand_groups
from assocmem.knn.engine import Engine, resolve_engine
from assocmem.knn.engines import default_gpu_db_batch, search_cpu, search_gpu
from assocmem.knn.inputs import as_exclude_ids, as_matrix, check_positive
from assocmem.knn.shards import Shards, squared_norms
from assocmem.knn.topk import drop_excluded, sort_by_distance_then_id
from assocmem.knn.torch_engine import TorchDistances, TorchSearch, database_rows

log = logging.getLogger(__name__)

DEFAULT_QUERY_BATCH = 16384
DEFAULT_MAX_POOL = 4096
# Refine: candidates fetched beyond k, safety factor on the measured float32 error.
_EXTRA_CANDIDATES = 8
_SAFETY = 4.0
_F32_EPS = float(np.finfo(np.float32).eps)
# float64 working set of one refine chunk (bytes): small enough to stay in cache (2.6x faster than 64 MiB).
_REFINE_BYTES = 2 << 20

Search = Callable[[np.ndarray | None, int], tuple[np.ndarray, np.ndarray]]
# distances(queries, candidates): exact float64 squared distances of each query to its candidate rows.
Distances = Callable[[np.ndarray, np.ndarray], np.ndarray]


def knn(
    database: np.ndarray,
    queries: np.ndarray,
    k: int,
    *,
    engine: Engine | None = None,
    query_batch: int = DEFAULT_QUERY_BATCH,
    db_batch: int | None = None,
    exclude_ids: np.ndarray | None = None,
    refine: bool = True,
    center: bool = True,
    max_pool: int = DEFAULT_MAX_POOL,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours of each query row among the database rows (L2).

    Returns ``(distances, ids)``: float32 (Q, k) Euclidean distances, ascending, ties ordered by id,
    and int64 (Q, k) database row numbers.

    ``engine`` computes the float32 candidate search (:class:`assocmem.knn.engine.Engine`; None: resolved here,
    :func:`assocmem.knn.engine.resolve_engine` with device and CPU engine ``auto``, timed at this search's shape),
    and sets the threads (None keeps the job's). ``exclude_ids[q]`` is removed from query q's result by id
    (self-match removal): k+1 neighbours are searched and that id dropped, or the last column when it was not among
    them. ``db_batch`` splits the database into shards of that many rows whose results are merged (CPU default: no
    split; GPU default: sized from free GPU memory); faiss-gpu deals the shards round-robin to its GPUs.
    ``center`` subtracts the database mean from both sides before the float32 search and ``refine`` recomputes the
    candidates' distances exactly in float64 (see module docstring); both leave the exact answer unchanged and only
    remove rounding error. With ``center`` and a single shard, a centred copy of the database is held in memory;
    pass ``db_batch`` to bound that for databases near the RAM size. ``max_pool`` caps the candidates one query's
    verified refine searches (on faiss-gpu also ``GPU_MAX_K``): queries still unsettled at the cap are accepted
    with a RuntimeWarning.
    """
    same_array = queries is database
    database = as_matrix("database", database)
    queries = database if same_array else as_matrix("queries", queries)
    if database.shape[1] != queries.shape[1]:
        raise AssocmemError(
            f"dimension mismatch: database has {database.shape[1]} columns, queries {queries.shape[1]}"
        )
    for name, value in (("k", k), ("query_batch", query_batch), ("db_batch", db_batch), ("max_pool", max_pool)):
        check_positive(name, value)
    exclude = None if exclude_ids is None else as_exclude_ids(exclude_ids, queries.shape[0])
    k_search = int(k) + (exclude is not None)
    if k_search > database.shape[0]:
        available = database.shape[0] - (exclude is not None)
        raise AssocmemError(
            f"k={k} exceeds the neighbours available: database has {database.shape[0]} rows"
            + (" (one excluded per query)" if exclude is not None else "")
            + f", so k <= {available}"
        )
    if engine is None:
        engine = resolve_engine("auto", "auto", (queries.shape[0], database.shape[0], database.shape[1], k_search))
    runtime.set_threads(engine.threads)
    if engine.max_pool is not None and k_search > engine.max_pool:
        raise AssocmemError(f"k={k_search} (with the excluded self match) exceeds the {engine.kind} limit "
                            f"{engine.max_pool}")
    if refine:
        pool_cap = int(max_pool) if engine.max_pool is None else min(int(max_pool), engine.max_pool)
        sq_dist, cand = _exact_search(database, queries, same_array, k_search, engine, int(query_batch),
                                      db_batch, center, pool_cap)
    else:
        shards = Shards(database, _shard_rows(database, db_batch, engine), center)
        search = _searcher(shards, shards.centre(queries, same_array), engine, int(query_batch))
        sq_dist, cand = sort_by_distance_then_id(*search(None, k_search))
    dist = np.sqrt(np.maximum(sq_dist, 0.0)).astype(np.float32)
    if exclude is not None:
        dist, cand = drop_excluded(dist, cand, exclude)
    return dist, cand


def _shard_rows(database: np.ndarray, db_batch: int | None, engine: Engine) -> int | None:
    if db_batch is not None:
        return db_batch
    if engine.kind == "faiss-gpu":  # at least one shard per GPU
        per_device = -(-database.shape[0] // len(engine.gpu_ids))
        return min(per_device, default_gpu_db_batch(database.shape[1], list(engine.gpu_ids)))
    if engine.kind == "torch" and engine.on_gpu:  # the whole database on the device when it fits
        rows = database_rows(engine, database.shape[1])
        return None if rows >= database.shape[0] else rows
    return None


def _searcher(shards: Shards, search_queries: np.ndarray, engine: Engine, query_batch: int) -> Search:
    """search(rows, pool): the pool nearest (float32 squared distance, shard row) of the given query rows. The torch
    engine keeps the database on its device from one call to the next."""
    on_torch = TorchSearch(shards, engine, query_batch) if engine.kind == "torch" else None

    def search(rows: np.ndarray | None, pool: int) -> tuple[np.ndarray, np.ndarray]:
        subset = search_queries if rows is None else search_queries[rows]
        log.debug("knn search: %d queries, pool %d, engine %s", subset.shape[0], pool, engine.kind)
        if on_torch is not None:
            return on_torch(subset, pool)
        if engine.kind == "faiss-gpu":
            return search_gpu(shards, subset, pool, query_batch, list(engine.gpu_ids))
        return search_cpu(shards, subset, pool, query_batch, engine.kind)

    return search


def _exact_search(database: np.ndarray, queries: np.ndarray, same_array: bool, k: int, engine: Engine,
                  query_batch: int, db_batch: int | None, center: bool, pool_cap: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """k best (exact float64 squared distance, row) per query, ties to the smaller row.

    Exact duplicate rows are searched once: activations of short shared prefixes repeat thousands of times
    (4586 copies of one row among 100,000 Question-Formation chunks), and a group of equal rows larger than
    the candidate pool can never be settled by :func:`_verified_search`, which then searched ever larger
    pools on every layer. Each distinct row stands for its group; the groups' rows are put back afterwards
    (:func:`assocmem.knn.duplicates.expand_groups`), which returns exactly the answer of the search over all
    rows."""
    db_groups = duplicate_groups(database, k)
    unique_db = database if db_groups is None else database[db_groups.first_row]
    if same_array:
        q_groups, unique_queries = db_groups, unique_db
    else:
        q_groups = duplicate_groups(queries, 1)
        unique_queries = queries if q_groups is None else queries[q_groups.first_row]
    shards = Shards(unique_db, _shard_rows(unique_db, db_batch, engine), center)
    search_queries = shards.centre(unique_queries, unique_queries is unique_db)
    search = _searcher(shards, search_queries, engine, query_batch)
    max_pool = max(k, min(unique_db.shape[0], pool_cap))
    k_unique = min(k, unique_db.shape[0])
    # On a GPU the refine's distances run beside the resident database; on the CPU numpy's cache-sized chunks are
    # faster (2x the torch engine's whole search at 10,000 x 1024).
    on_device = engine.kind == "torch" and engine.on_gpu and len(shards.starts) == 1
    distances = TorchDistances(unique_db, engine) if on_device else partial(_exact_squared_distances, unique_db)
    sq_dist, cand = _verified_search(search, shards, unique_queries, search_queries, k_unique, max_pool, distances)
    if db_groups is not None:
        sq_dist, cand = expand_groups(sq_dist, cand, db_groups, k)
    if q_groups is not None:
        sq_dist, cand = sq_dist[q_groups.of_row], cand[q_groups.of_row]
    return sq_dist, cand


def _verified_search(
    search: Search, shards: Shards, queries: np.ndarray, search_queries: np.ndarray, k: int, max_pool: int,
    distances: Distances,
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
    self_search = len(shards.starts) == 1 and search_queries is shards.block(0)
    q_norms = x_norms if self_search else squared_norms(search_queries)
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
        exact, error_per_norm = _refine_pool(distances, queries if rows is None else queries[rows], approx,
                                             cand, scale, k, error_per_norm)
        best_dist, best_ids = sort_by_distance_then_id(exact, cand, keep=k)
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


def _refine_pool(distances: Distances, batch: np.ndarray, approx: np.ndarray, cand: np.ndarray, scale: np.ndarray,
                 k: int, error_per_norm: float) -> tuple[np.ndarray, float]:
    """Exact float64 squared distances of the pool's candidates that can be among the k nearest (inf for the
    others), and the largest float32 error per unit of squared norm seen so far.

    The first k candidates (in float32 order) are recomputed: their largest exact distance bounds the k-th
    from above. A later candidate is recomputed only when its float32 distance lies within the error margin
    of that bound; the others are farther than k rows already found, so they cannot be among the k nearest.
    On 20,000 Gaussian rows of dimension 1024 that skips 8 of 19 candidates per query."""
    exact = np.full(cand.shape, np.inf)
    exact[:, :k] = distances(batch, cand[:, :k])
    seen = np.abs(approx[:, :k] - exact[:, :k]) / np.maximum(scale[:, :k], 1e-30)
    error_per_norm = max(error_per_norm, float(seen.max(initial=0.0)))
    bound = exact[:, :k].max(axis=1, initial=-np.inf)
    query, column = np.nonzero(approx[:, k:] <= bound[:, None] + _SAFETY * error_per_norm * scale[:, k:])
    if query.size:
        column += k
        exact[query, column] = distances(batch[query], cand[query, column, None])[:, 0]
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


def _exact_squared_distances(database: np.ndarray, batch: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """||q - x||^2 in float64 for each query and its candidate ids, in cache-sized chunks."""
    out = np.empty(cand.shape, dtype=np.float64)
    rows_per_chunk = max(1, _REFINE_BYTES // (8 * cand.shape[1] * database.shape[1]))
    for start in range(0, cand.shape[0], rows_per_chunk):
        stop = start + rows_per_chunk
        diff = np.subtract(database[cand[start:stop]], batch[start:stop, None, :], dtype=np.float64)
        out[start:stop] = np.einsum("qkd,qkd->qk", diff, diff)
    return out
