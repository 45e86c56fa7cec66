"""Approximate k-NN with a faiss IVF index, for sets too large for exact search, and its recall@k measured
against exact search on a seeded sample of queries (never assumed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from assocmem import runtime
from assocmem.errors import AssocmemError
from assocmem.knn.engine import Engine, resolve_engine
from assocmem.knn.exact import knn
from assocmem.knn.inputs import as_matrix, check_positive
from assocmem.knn.protocols import neighbour_frame, nested_subsample_rows
from assocmem.knn.topk import drop_excluded
from assocmem.runtime.blas import import_faiss

faiss = import_faiss()


class IvfResult(NamedTuple):
    distances: np.ndarray  # float32 (Q, k), Euclidean; inf where the IVF probe found fewer than k
    ids: np.ndarray  # int64 (Q, k); -1 where the IVF probe found fewer than k
    recall: float  # recall@k against exact search on the sampled queries
    sample_rows: np.ndarray  # int64 query rows the recall was measured on


def ivf_search(
    database: np.ndarray,
    queries: np.ndarray,
    k: int,
    *,
    nlist: int,
    nprobe: int,
    seed: int = 0,
    engine: Engine | None = None,
    train_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate k-NN with faiss.IndexIVFFlat trained on a seeded sample of ``train_size`` rows
    (default min(N, 256*nlist)), on the GPU where ``engine`` is faiss-gpu, else on the CPU (default engine:
    :func:`assocmem.knn.engine.resolve_engine`'s ``auto``). Returns (Euclidean float32 distances, int64 ids);
    a query whose probed lists hold fewer than k rows gets id -1 / distance inf in the missing slots."""
    database = as_matrix("database", database)
    queries = as_matrix("queries", queries)
    n_rows, dim = database.shape
    if queries.shape[1] != dim:
        raise AssocmemError(f"dimension mismatch: database has {dim} columns, queries {queries.shape[1]}")
    for name, value in (("k", k), ("nlist", nlist), ("nprobe", nprobe), ("train_size", train_size)):
        check_positive(name, value)
    if k > n_rows:
        raise AssocmemError(f"k={k} exceeds database rows {n_rows}")
    if nprobe > nlist:
        raise AssocmemError(f"nprobe={nprobe} exceeds nlist={nlist}")
    n_train = min(n_rows, 256 * nlist) if train_size is None else min(n_rows, int(train_size))
    if n_train < nlist:
        raise AssocmemError(f"IVF training needs at least nlist={nlist} rows, have {n_train}")
    engine = resolve_engine("auto") if engine is None else engine
    runtime.set_threads(engine.threads)

    quantizer = faiss.IndexFlatL2(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, int(nlist), faiss.METRIC_L2)
    index.cp.seed = int(seed)
    train_rows = np.sort(np.random.default_rng(seed).choice(n_rows, size=n_train, replace=False))
    index.train(database[train_rows])
    index.add(database)
    index.nprobe = int(nprobe)
    if engine.kind == "faiss-gpu":
        resources = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(resources, engine.gpu_ids[0], index)
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
    engine: Engine | None = None,
) -> IvfResult:
    """IVF search for all queries, plus recall@k against exact search on ``sample`` seeded query rows."""
    check_positive("sample", sample)
    dist, ids = ivf_search(database, queries, k, nlist=nlist, nprobe=nprobe, seed=seed, engine=engine)
    n_queries = ids.shape[0]
    sample_rows = np.sort(
        np.random.default_rng(seed).choice(n_queries, size=min(int(sample), n_queries), replace=False)
    ).astype(np.int64)
    _, exact_ids = knn(database, np.asarray(queries)[sample_rows], k, engine=engine)
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
    engine: Engine | None = None,
) -> tuple[pd.DataFrame, dict[float, float]]:
    """:func:`assocmem.knn.protocols.self_search` with an IVF index, for sets too large for exact search.

    Returns the neighbour frame and, per fraction, recall@k measured against exact search on ``sample``
    seeded query rows (the self match removed by id on both sides)."""
    x = as_matrix("x", x)
    frames, recalls = [], {}
    for fraction in fractions:
        rows = nested_subsample_rows(x.shape[0], float(fraction), seed)
        subset = x if rows.size == x.shape[0] else x[rows]
        local = np.arange(rows.size, dtype=np.int64)
        dist, ids = ivf_search(subset, subset, k + 1, nlist=min(nlist, rows.size), nprobe=nprobe, seed=seed,
                               engine=engine)
        dist, ids = drop_excluded(dist, ids, local)
        probe = np.sort(np.random.default_rng(seed).choice(rows.size, size=min(sample, rows.size), replace=False))
        _, exact = knn(subset, subset[probe], k, engine=engine, exclude_ids=probe)
        recalls[float(fraction)] = recall_at_k(exact, ids[probe])
        frame = neighbour_frame(rows, np.where(ids >= 0, rows[np.maximum(ids, 0)], -1), dist)
        frame.insert(0, "fraction", float(fraction))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True), recalls


def ivf_heldout_search(train_x: np.ndarray, query_x: np.ndarray, k: int, *, nlist: int, nprobe: int, sample: int,
                       seed: int = 0, engine: Engine | None = None) -> tuple[pd.DataFrame, float]:
    """:func:`assocmem.knn.protocols.heldout_search` with an IVF index; returns the frame and recall@k on
    ``sample`` queries."""
    result = ivf_with_recall(train_x, query_x, k, min(nlist, len(train_x)), nprobe, sample, seed, engine)
    return neighbour_frame(np.arange(result.ids.shape[0]), result.ids, result.distances), result.recall
