"""Tests for assocmem.knn (exact faiss k-NN against a float64 numpy brute force, on CPU) and assocmem.runtime's
threads, devices and BLAS detection."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.gemm import onednn_available
from assocmem.knn import (
    SUMMARY_COLUMNS,
    Engine,
    GemmBlocks,
    duplicate_groups,
    gemm_knn,
    heldout_search,
    ivf_search,
    ivf_with_recall,
    knn,
    nested_subsample_rows,
    recall_at_k,
    resolve_cpu_engine,
    resolve_engine,
    search_layer,
    self_search,
    summarise,
)
from assocmem.knn.select import DEFAULT_GROUP, groups_pay
from assocmem.runtime import default_threads, faiss_gpu_count, resolve_device, set_threads
from assocmem.runtime.blas import BlasCores, check_blas_core, cpu_openblas_core, import_faiss

faiss = import_faiss()
RTOL = 1e-4
ATOL = 1e-6
HAS_GPU = faiss_gpu_count() > 0
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="faiss sees no CUDA GPU")
CPU = Engine("faiss")


@pytest.fixture(autouse=True)
def single_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny searches on a shared 2-core box: OpenMP spin-waiting makes 2 threads up to 100x slower. No SLURM
    grant widens the explicit counts of a test."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def gaussian(rows: int, dim: int, seed: int = 0, offset: float = 0.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((rows, dim)) + offset).astype(np.float32)


def reference_distances(database: np.ndarray, queries: np.ndarray, exclude=None) -> np.ndarray:
    """Full (Q, N) float64 Euclidean distance matrix; the excluded id of each query set to inf."""
    database64 = database.astype(np.float64)
    full = np.stack([np.sqrt(((database64 - q) ** 2).sum(axis=1)) for q in queries.astype(np.float64)])
    if exclude is not None:
        full[np.arange(len(queries)), exclude] = np.inf
    return full


def reference_knn(full: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.broadcast_to(np.arange(full.shape[1]), full.shape)
    order = np.lexsort((ids, full), axis=1)[:, :k]
    return np.take_along_axis(full, order, axis=1), order


def assert_valid_knn(dist, ids, database, queries, k, exclude=None) -> None:
    """Distances equal the reference k smallest; each id really is at its reported distance (ties free)."""
    full = reference_distances(database, queries, exclude)
    ref_dist, _ = reference_knn(full, k)
    assert dist.shape == ids.shape == (len(queries), k)
    assert dist.dtype == np.float32 and ids.dtype == np.int64
    np.testing.assert_allclose(dist, ref_dist, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.take_along_axis(full, ids, axis=1), ref_dist, rtol=RTOL, atol=ATOL)
    assert all(len(set(row)) == k for row in ids.tolist()), "an id repeats within a row"
    if exclude is not None:
        assert not (ids == np.asarray(exclude)[:, None]).any(), "the excluded id came back"


# --------------------------------------------------------------------------- exact search vs reference


@pytest.fixture(params=["faiss", "torch"])
def exact_engine(request: pytest.FixtureRequest) -> Engine:
    """faiss and the torch engine on the CPU, the torch engine in blocks of 64 KiB of scores (several query blocks)."""
    return CPU if request.param == "faiss" else Engine("torch", block_bytes=64 << 10)


@pytest.mark.parametrize("refine", [True, False])
def test_knn_matches_numpy_reference(refine: bool, exact_engine: Engine) -> None:
    database, queries = gaussian(400, 32, seed=1), gaussian(60, 32, seed=2)
    dist, ids = knn(database, queries, 7, engine=exact_engine, refine=refine)
    assert_valid_knn(dist, ids, database, queries, 7)
    _, ref_ids = reference_knn(reference_distances(database, queries), 7)
    np.testing.assert_array_equal(ids, ref_ids)  # continuous random data: no ties


def test_self_exclusion_matches_reference(exact_engine: Engine) -> None:
    x = gaussian(300, 16, seed=3)
    rows = np.arange(300)
    dist, ids = knn(x, x, 5, engine=exact_engine, exclude_ids=rows, query_batch=37)
    assert_valid_knn(dist, ids, x, x, 5, exclude=rows)
    _, ref_ids = reference_knn(reference_distances(x, x, rows), 5)
    np.testing.assert_array_equal(ids, ref_ids)


def test_duplicates_self_removed_by_id_and_duplicate_kept_at_zero(exact_engine: Engine) -> None:
    # Large offset: norms ~ 1e3, where float32 ||q||^2+||x||^2-2<q,x> leaves ~1e-2 noise on a zero distance.
    x = gaussian(200, 64, seed=4, offset=100.0)
    x[[17, 150]] = x[5]  # rows 5, 17 and 150 are identical
    rows = np.arange(200)
    dist, ids = knn(x, x, 3, engine=exact_engine, exclude_ids=rows)
    for query, others in ((5, {17, 150}), (17, {5, 150}), (150, {5, 17})):
        assert set(ids[query, :2].tolist()) == others
        assert dist[query, 0] == 0.0 and dist[query, 1] == 0.0
        assert dist[query, 2] > 0.0
        assert query not in ids[query].tolist()
    assert_valid_knn(dist, ids, x, x, 3, exclude=rows)


def test_verified_refine_is_exact_when_float32_cancellation_misranks(exact_engine: Engine) -> None:
    # Two huge +-1e4 "massive activation" dims: centring cannot remove them, and faiss's float32
    # ||q||^2 + ||x||^2 - 2<q, x> misranks ~90% of the neighbours (measured: 1079 of 1200 ids wrong).
    rng = np.random.default_rng(30)
    x = rng.standard_normal((300, 512)).astype(np.float32)
    x[:, [3, 7]] += 1e4 * rng.choice([-1, 1], size=(300, 1)).astype(np.float32)
    rows = np.arange(300)
    dist, ids = knn(x, x, 4, engine=exact_engine, exclude_ids=rows)
    full = reference_distances(x, x, rows)
    ref_dist, ref_ids = reference_knn(full, 4)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)


@pytest.mark.parametrize("engine", ["faiss", "onednn", "torch"])
def test_pool_cap_warns_and_stays_within_the_float32_error(engine: str) -> None:
    """40 distinct rows closer together than the float32 noise, and a pool capped below 40: which of them are
    the nearest is decided by rounding, so only the exact answer to within that noise is guaranteed (and
    warned about). The rows outside the cluster are settled and exact."""
    x = gaussian(100, 8, seed=31, offset=50.0)
    x[:40] = x[0]
    x[:40, 0] += np.arange(40, dtype=np.float32) * 1e-5
    rows = np.arange(100)
    with pytest.warns(RuntimeWarning, match="queries still had candidates"):
        dist, ids = knn(x, x, 3, engine=Engine(engine), exclude_ids=rows, max_pool=16)
    assert (dist[:40] < 1e-3).all() and (ids[:40] < 40).all()
    full = reference_distances(x, x, rows)
    ref_dist, ref_ids = reference_knn(full, 3)
    np.testing.assert_allclose(np.take_along_axis(full, ids, axis=1), dist, rtol=RTOL, atol=ATOL)  # true distances
    cluster_error = dist[:40].astype(np.float64) ** 2 - ref_dist[:40] ** 2  # centred norms ~10: noise ~1e-6
    assert (cluster_error > -1e-12).all() and cluster_error.max() < 1e-6
    assert_valid_knn(dist[40:], ids[40:], x, x[40:], 3, exclude=rows[40:])


def candidate_searches(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int, str]]:
    """(queries, pool, engine) of each float32 candidate search knn logged (DEBUG, assocmem.knn.exact)."""
    return [record.args for record in caplog.records
            if record.name == "assocmem.knn.exact" and record.msg.startswith("knn search:")]


def test_duplicate_group_larger_than_the_pool_is_searched_once(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 10: equal rows (shared short prefixes) once forced ever larger candidate pools on every query."""
    x = gaussian(300, 8, seed=32, offset=50.0)
    x[:200] = x[7]  # one group of 200 equal rows, far more than the pool cap
    rows = np.arange(300)
    with caplog.at_level(logging.DEBUG, logger="assocmem.knn.exact"):
        dist, ids = knn(x, x, 3, engine=CPU, exclude_ids=rows, max_pool=16)
    pools = [(queries, pool) for queries, pool, _ in candidate_searches(caplog)]
    assert pools == [(101, 3 + 1 + 8)]  # the 101 distinct rows, one round, no pool growth
    _, ref_ids = reference_knn(reference_distances(x, x, rows), 3)
    np.testing.assert_array_equal(ids, ref_ids)
    expected = [[j for j in range(4) if j != i][:3] for i in range(200)]  # the group's smallest other rows
    np.testing.assert_array_equal(ids[:200], expected)
    assert (dist[:200] == 0).all()


def test_self_id_absent_from_candidates_drops_last_column() -> None:
    database, queries = gaussian(100, 8, seed=5), gaussian(20, 8, seed=6)
    plain_dist, plain_ids = knn(database, queries, 4, engine=CPU)
    # -1 never matches, and row 99 is (almost surely) not within every query's 5 nearest.
    for exclude in (np.full(20, -1), np.full(20, 99)):
        dist, ids = knn(database, queries, 4, engine=CPU, exclude_ids=exclude)
        keep = ~(plain_ids == 99).any(axis=1)
        np.testing.assert_array_equal(ids[keep], plain_ids[keep])
        np.testing.assert_array_equal(dist[keep], plain_dist[keep])


def test_many_duplicates_with_self_beyond_k_plus_one() -> None:
    x = np.zeros((6, 3), dtype=np.float32)
    x[5] = 1.0
    # Query row 4 has four exact duplicates (rows 0-3) with smaller ids; k=2 keeps two of them at 0.
    dist, ids = knn(x, x[[4]], 2, engine=CPU, exclude_ids=np.array([4]))
    np.testing.assert_array_equal(ids, [[0, 1]])
    np.testing.assert_array_equal(dist, [[0.0, 0.0]])


def test_k_larger_than_available_raises() -> None:
    x = gaussian(10, 4)
    dist, _ = knn(x, x, 10, engine=CPU)  # k == N is fine without exclusion
    assert dist.shape == (10, 10)
    with pytest.raises(AssocmemError, match="k=10 exceeds.*k <= 9"):
        knn(x, x, 10, engine=CPU, exclude_ids=np.arange(10))
    with pytest.raises(AssocmemError, match="k=11 exceeds"):
        knn(x, x, 11, engine=CPU)
    with pytest.raises(AssocmemError, match="too few for k=5"):
        self_search(x, 5, fractions=(0.5,), engine=CPU)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"database": np.full((5, 3), np.nan, dtype=np.float32)}, "database contains NaN"),
        ({"queries": np.zeros((2, 4), dtype=np.float32)}, "dimension mismatch"),
        ({"queries": np.zeros(3, dtype=np.float32)}, "queries must be a 2-D"),
        ({"exclude_ids": np.arange(3)}, r"exclude_ids must have shape \(5,\)"),
        ({"exclude_ids": np.zeros(5)}, "exclude_ids must be integers"),
        ({"k": 0}, "k must be >= 1"),
        ({"db_batch": 0}, "db_batch must be >= 1"),
        ({"max_pool": 0}, "max_pool must be >= 1"),
    ],
)
def test_knn_input_errors(kwargs: dict, match: str) -> None:
    args = {"database": gaussian(5, 3), "queries": gaussian(5, 3, seed=9), "k": 2, "engine": CPU} | kwargs
    with pytest.raises(AssocmemError, match=match):
        knn(**args)


def test_thread_count_does_not_change_results(exact_engine: Engine) -> None:
    """The neighbours job's threads scale with the host's cores (assocmem.runtime.share_of_cores): its results may
    not."""
    database, queries = gaussian(3000, 32, seed=27), gaussian(500, 32, seed=28)
    one = knn(database, queries, 6, engine=dataclasses.replace(exact_engine, threads=1))
    two = knn(database, queries, 6, engine=dataclasses.replace(exact_engine, threads=2))
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


def test_knn_is_deterministic_and_accepts_float64() -> None:
    database, queries = gaussian(500, 24, seed=7), gaussian(50, 24, seed=8)
    first = knn(database, queries, 6, engine=CPU)
    second = knn(database.astype(np.float64), queries, 6, engine=CPU)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])


# --------------------------------------------------------------------------- sharded merge


@pytest.mark.parametrize("db_batch", [1, 3, 7, 64, 399])
@pytest.mark.parametrize("refine", [True, False])
def test_sharded_merge_equals_unsharded(db_batch: int, refine: bool, exact_engine: Engine) -> None:
    database, queries = gaussian(400, 16, seed=10), gaussian(45, 16, seed=11)
    whole = knn(database, queries, 5, engine=exact_engine, refine=refine)
    sharded = knn(database, queries, 5, engine=exact_engine, db_batch=db_batch, query_batch=13, refine=refine)
    np.testing.assert_array_equal(sharded[1], whole[1])
    np.testing.assert_allclose(sharded[0], whole[0], rtol=RTOL, atol=ATOL)
    if refine:  # same ids -> the same exactly recomputed distances
        np.testing.assert_array_equal(sharded[0], whole[0])


def test_sharded_merge_breaks_ties_like_unsharded(exact_engine: Engine) -> None:
    # Small-integer data: every distance is exact in float32, so ties are real and must go to the smaller id.
    x = np.random.default_rng(12).integers(-1, 2, size=(120, 3)).astype(np.float32)
    rows = np.arange(120)
    whole = knn(x, x, 8, engine=exact_engine, exclude_ids=rows)
    sharded = knn(x, x, 8, engine=exact_engine, exclude_ids=rows, db_batch=11, query_batch=17)
    np.testing.assert_array_equal(sharded[0], whole[0])
    np.testing.assert_array_equal(sharded[1], whole[1])
    assert_valid_knn(*whole, x, x, 8, exclude=rows)


# --------------------------------------------------------------------------- self_search / heldout_search


def test_nested_subsample_rows_are_nested_and_sized_by_round() -> None:
    previous: set[int] = set()
    for fraction in (0.1, 0.25, 0.5, 0.75, 1.0):
        rows = nested_subsample_rows(1001, fraction, seed=3)
        assert rows.size == round(fraction * 1001)
        assert np.all(np.diff(rows) > 0)
        assert previous <= set(rows.tolist())
        previous = set(rows.tolist())
    assert previous == set(range(1001))
    assert not np.array_equal(nested_subsample_rows(1001, 0.5, 3), nested_subsample_rows(1001, 0.5, 4))
    with pytest.raises(AssocmemError, match="fraction must be in"):
        nested_subsample_rows(10, 0.0, 0)


def test_self_search_subsamples_nested_and_match_direct_knn() -> None:
    x = gaussian(240, 12, seed=13)
    frame = self_search(x, 3, fractions=(0.25, 0.5, 1.0), seed=5, engine=CPU)
    assert list(frame.columns) == ["fraction", "query_row", "rank", "neighbour_row", "distance"]
    previous: set[int] = set()
    for fraction, part in frame.groupby("fraction"):
        rows = nested_subsample_rows(240, fraction, seed=5)
        queries = set(part["query_row"].tolist())
        assert queries == set(rows.tolist()) and previous <= queries
        assert set(part["neighbour_row"].tolist()) <= queries
        assert (part["query_row"] != part["neighbour_row"]).all()
        assert part["rank"].tolist() == [1, 2, 3] * rows.size
        full = reference_distances(x[rows], x[rows], np.arange(rows.size))
        ref_dist, ref_ids = reference_knn(full, 3)
        np.testing.assert_allclose(part["distance"].to_numpy().reshape(-1, 3), ref_dist, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(part["neighbour_row"].to_numpy().reshape(-1, 3), rows[ref_ids])
        previous = queries
    pd.testing.assert_frame_equal(frame, self_search(x, 3, fractions=(0.25, 0.5, 1.0), seed=5, engine=CPU))


def test_self_search_nn_distance_shrinks_with_more_data() -> None:
    # A query present at every fraction can only gain candidates as the subsample grows.
    x = gaussian(400, 6, seed=14)
    frame = self_search(x, 1, fractions=(0.25, 0.5, 1.0), seed=0, engine=CPU)
    wide = frame.pivot(index="query_row", columns="fraction", values="distance").dropna()
    assert len(wide) == 100
    assert (wide[0.5] <= wide[0.25]).all() and (wide[1.0] <= wide[0.5]).all()


def test_heldout_search_matches_reference() -> None:
    train, held = gaussian(300, 10, seed=15), gaussian(40, 10, seed=16)
    frame = heldout_search(train, held, 4, engine=CPU)
    assert list(frame.columns) == ["query_row", "rank", "neighbour_row", "distance"]
    assert frame["query_row"].tolist() == np.repeat(np.arange(40), 4).tolist()
    ref_dist, ref_ids = reference_knn(reference_distances(train, held), 4)
    np.testing.assert_array_equal(frame["neighbour_row"].to_numpy().reshape(40, 4), ref_ids)
    np.testing.assert_allclose(frame["distance"].to_numpy().reshape(40, 4), ref_dist, rtol=RTOL)


# --------------------------------------------------------------------------- IVF and recall


def test_recall_at_k_hand_example() -> None:
    exact = np.array([[1, 2, 3], [4, 5, 6]])
    approx = np.array([[3, 2, 9], [-1, 4, 7]])
    assert recall_at_k(exact, approx) == pytest.approx(3 / 6)
    assert recall_at_k(exact, exact) == 1.0
    with pytest.raises(AssocmemError, match="one shape"):
        recall_at_k(exact, approx[:, :2])


def test_ivf_full_probe_equals_exact() -> None:
    database, queries = gaussian(1000, 16, seed=17), gaussian(80, 16, seed=18)
    dist, ids = ivf_search(database, queries, 5, nlist=8, nprobe=8, seed=0, engine=CPU)
    exact_dist, exact_ids = knn(database, queries, 5, engine=CPU)
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_allclose(dist, exact_dist, rtol=RTOL, atol=ATOL)
    result = ivf_with_recall(database, queries, 5, nlist=8, nprobe=8, sample=30, seed=0, engine=CPU)
    assert result.recall == 1.0
    assert result.sample_rows.shape == (30,) and len(set(result.sample_rows.tolist())) == 30


def test_ivf_partial_probe_recall_is_measured_not_assumed() -> None:
    database, queries = gaussian(2000, 16, seed=19), gaussian(100, 16, seed=20)
    result = ivf_with_recall(database, queries, 10, nlist=32, nprobe=1, sample=100, seed=1, engine=CPU)
    _, exact_ids = knn(database, queries, 10, engine=CPU)
    assert result.recall == pytest.approx(recall_at_k(exact_ids, result.ids))
    assert 0.0 < result.recall < 1.0
    again = ivf_with_recall(database, queries, 10, nlist=32, nprobe=1, sample=100, seed=1, engine=CPU)
    np.testing.assert_array_equal(again.ids, result.ids)
    missing = result.ids < 0
    assert np.isinf(result.distances[missing]).all() and np.isfinite(result.distances[~missing]).all()


def test_ivf_argument_errors() -> None:
    x = gaussian(50, 4)
    with pytest.raises(AssocmemError, match="nprobe=9 exceeds nlist=8"):
        ivf_search(x, x, 2, nlist=8, nprobe=9, engine=CPU)
    with pytest.raises(AssocmemError, match="at least nlist=64"):
        ivf_search(x, x, 2, nlist=64, nprobe=1, engine=CPU)


# --------------------------------------------------------------------------- summarise


def test_summarise_rank_one_stats_per_group() -> None:
    frame = pd.DataFrame(
        {
            "fraction": [0.5] * 6 + [1.0] * 4,
            "rank": [1, 2, 1, 2, 1, 2, 1, 2, 1, 2],
            "distance": np.array([1.0, 9.0, 2.0, 9.0, 4.0, 9.0, 3.0, 9.0, 5.0, 9.0], dtype=np.float32),
        }
    )
    stats = summarise(frame, ["fraction"])
    assert list(stats.columns) == ["fraction", *SUMMARY_COLUMNS]
    half = stats.set_index("fraction").loc[0.5]
    values = np.array([1.0, 2.0, 4.0])
    assert half["count"] == 3 and half["min"] == 1.0 and half["median"] == 2.0
    assert half["mean"] == pytest.approx(values.mean())
    assert half["std"] == pytest.approx(values.std(ddof=1))
    assert half["p05"] == pytest.approx(np.percentile(values, 5))
    assert half["p95"] == pytest.approx(np.percentile(values, 95))
    overall = summarise(frame, [])
    assert list(overall.columns) == list(SUMMARY_COLUMNS) and overall.loc[0, "count"] == 5
    with pytest.raises(AssocmemError, match="lacks column"):
        summarise(frame, ["layer"])


# --------------------------------------------------------------------------- devices and threads


def test_resolve_device() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(AssocmemError, match="train.device: unknown device 'mps'"):
        resolve_device("mps", key="train.device")
    with pytest.raises(AssocmemError, match="train.device: 'gpu' is no longer a device name; write cuda"):
        resolve_device("gpu", key="train.device")


def test_thread_count_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    original = faiss.omp_get_max_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1 and set_threads() == 1
    assert faiss.omp_get_max_threads() == 1 and torch.get_num_threads() == 1
    set_threads(original)
    assert os.environ["OMP_NUM_THREADS"] == str(original) and faiss.omp_get_max_threads() == original
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads() == (os.cpu_count() or 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    with pytest.raises(AssocmemError, match="OMP_NUM_THREADS"):
        default_threads()
    with pytest.raises(AssocmemError, match="threads must be >= 1"):
        set_threads(0)


def test_thread_count_is_granted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count widens to SLURM's grant, split over a torchrun job's processes; None (every knn call) keeps it."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert set_threads(1) == 2 and os.environ["OMP_NUM_THREADS"] == "2"
    assert set_threads() == 2 and faiss.omp_get_max_threads() == 2 and torch.get_num_threads() == 2
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert set_threads(1) == 1


# --------------------------------------------------------------------------- property tests


@st.composite
def point_sets_with_duplicates(draw):
    rows = draw(st.integers(2, 30))
    dim = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):  # coarse integer grid: many exact ties
        x = rng.integers(-2, 3, size=(rows, dim)).astype(np.float32)
    else:
        x = rng.standard_normal((rows, dim)).astype(np.float32)
    n_dups = draw(st.integers(0, rows // 2))
    x[rng.integers(0, rows, n_dups)] = x[rng.integers(0, rows, n_dups)]
    k = draw(st.integers(1, rows - 1))
    db_batch = draw(st.one_of(st.none(), st.integers(1, rows)))
    return x, k, db_batch


@pytest.fixture(params=["faiss", "onednn", "torch"])
def engine(request: pytest.FixtureRequest) -> str:
    """The engine on the CPU (the onednn engine runs every distance product through oneDNN, whatever its size; the
    torch engine is the one CUDA runs)."""
    if request.param == "onednn" and not onednn_available():
        pytest.skip("this torch build has no oneDNN")
    return request.param


FIXTURE_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(point_sets_with_duplicates())
def test_property_self_knn_matches_reference(engine: str, case) -> None:
    x, k, db_batch = case
    rows = np.arange(len(x))
    dist, ids = knn(x, x, k, engine=Engine(engine), exclude_ids=rows, db_batch=db_batch, query_batch=7)
    assert_valid_knn(dist, ids, x, x, k, exclude=rows)
    assert np.all(np.diff(dist, axis=1) >= 0)
    unsharded = knn(x, x, k, engine=Engine(engine), exclude_ids=rows)
    np.testing.assert_array_equal(dist, unsharded[0])
    np.testing.assert_array_equal(ids, unsharded[1])
    # Every exact duplicate of a row must appear (at 0) before any positive distance.
    dup_counts = (reference_distances(x, x, rows) == 0).sum(axis=1)
    for row in range(len(x)):
        expected_zeros = min(dup_counts[row], k)
        assert (dist[row] == 0).sum() == expected_zeros


@st.composite
def grid_points_with_heldout(draw):
    """Small-integer rows: squared distances are exact in float64, so the tie order by id is fully determined."""
    rows = draw(st.integers(2, 40))
    dim = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.integers(-1, 2, size=(rows, dim)).astype(np.float32)
    queries = rng.integers(-1, 2, size=(draw(st.integers(1, 15)), dim)).astype(np.float32)
    return x, queries, draw(st.integers(1, rows - 1)), draw(st.one_of(st.none(), st.integers(1, rows)))


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(grid_points_with_heldout())
def test_property_duplicate_groups_give_the_exact_tie_order(engine: str, case) -> None:
    x, queries, k, db_batch = case
    rows = np.arange(len(x))
    dist, ids = knn(x, x, k, engine=Engine(engine), exclude_ids=rows, db_batch=db_batch, query_batch=5)
    ref_dist, ref_ids = reference_knn(reference_distances(x, x, rows), k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)
    dist, ids = knn(x, queries, k, engine=Engine(engine), db_batch=db_batch)
    ref_dist, ref_ids = reference_knn(reference_distances(x, queries), k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)


def test_duplicate_groups_survive_a_hash_collision() -> None:
    x = np.random.default_rng(33).integers(0, 3, size=(60, 2)).astype(np.float32)
    groups = duplicate_groups(x, 4, row_hash=lambda rows: np.zeros(rows.shape[0], dtype=np.uint64))
    assert groups is not None
    np.testing.assert_array_equal(x[groups.first_row[groups.of_row]], x)  # each row's group holds its value
    assert len(np.unique(x, axis=0)) == len(groups.first_row)
    # the same groups as without the collision, so knn (which searches by the groups) gives the same answer
    expected = duplicate_groups(x, 4)
    assert expected is not None
    for collided, plain in zip(groups, expected, strict=True):
        np.testing.assert_array_equal(collided, plain)
    _, ref_ids = reference_knn(reference_distances(x, x, np.arange(60)), 4)
    np.testing.assert_array_equal(knn(x, x, 4, engine=CPU, exclude_ids=np.arange(60))[1], ref_ids)


def test_duplicate_groups_keep_the_smallest_rows() -> None:
    x = np.array([[1], [0], [1], [1], [2], [0]], dtype=np.float32)
    groups = duplicate_groups(x, 2)
    assert groups is not None
    np.testing.assert_array_equal(groups.first_row, [0, 1, 4])
    np.testing.assert_array_equal(groups.of_row, [0, 1, 0, 0, 2, 1])
    np.testing.assert_array_equal(groups.members, [[0, 2], [1, 5], [4, -1]])
    assert duplicate_groups(np.eye(3, dtype=np.float32), 2) is None


CPUINFO = "vendor_id\t: {vendor}\nflags\t\t: fpu sse2 {flags}\n"


@pytest.mark.parametrize(("vendor", "flags", "core"), [
    ("GenuineIntel", "avx avx2 fma avx512f avx512bw avx512vl avx512dq avx512cd", "SkylakeX"),
    ("AuthenticAMD", "avx avx2 fma avx512f avx512bw avx512vl avx512dq avx512cd", "SkylakeX"),
    ("AuthenticAMD", "avx avx2 fma", "Zen"),
    ("GenuineIntel", "avx avx2 fma", "Haswell"),
    ("GenuineIntel", "avx", None),
])
def test_cpu_openblas_core_from_flags(vendor: str, flags: str, core: str | None) -> None:
    assert cpu_openblas_core(CPUINFO.format(vendor=vendor, flags=flags)) == core


def test_weaker_blas_core_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="assocmem.runtime.blas"):
        found = check_blas_core(BlasCores(faiss="Prescott", cpu="SkylakeX"))
    assert found["faiss_openblas_core"] == "Prescott" and "OPENBLAS_CORETYPE=SkylakeX" in caplog.text
    caplog.clear()
    check_blas_core(BlasCores(faiss="SkylakeX", cpu="SkylakeX"))
    assert "OPENBLAS_CORETYPE" not in caplog.text


def test_faiss_openblas_core_matches_this_cpu() -> None:
    """faiss-cpu's bundled OpenBLAS runs kernels as strong as this CPU supports (OPENBLAS_CORETYPE is chosen
    before faiss loads when the user has not set it). A fresh process that loads faiss as the k-NN does."""
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_CORETYPE"}
    script = ("import json, assocmem.knn; from assocmem.runtime.blas import check_blas_core; "
              "print(json.dumps(check_blas_core()))")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    found = json.loads(run.stdout.strip().splitlines()[-1])
    if found["faiss_openblas_core"] is None or found["cpu_supports"] is None:
        pytest.skip(f"no bundled OpenBLAS or unknown CPU: {found}")
    strong = {"SkylakeX": {"SkylakeX", "Cooperlake", "SapphireRapids"}}.get(
        found["cpu_supports"], {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    assert found["faiss_openblas_core"] in strong


@settings(max_examples=60, deadline=None)
@given(
    st.integers(3, 40),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
    st.sampled_from([(0.5, 1.0), (0.25, 0.75), (1.0,)]),
)
def test_property_self_search_nested(rows: int, dim: int, seed: int, fractions) -> None:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    smallest = round(min(fractions) * rows)
    if smallest < 2:
        with pytest.raises(AssocmemError):
            self_search(x, 1, fractions=fractions, seed=seed, engine=CPU)
        return
    frame = self_search(x, 1, fractions=fractions, seed=seed, engine=CPU)
    sets = [set(frame.loc[frame["fraction"] == f, "query_row"]) for f in fractions]
    assert all(a <= b for a, b in zip(sets, sets[1:], strict=False))
    assert [len(s) for s in sets] == [round(f * rows) for f in fractions]


# --------------------------------------------------------------------------- GPU-only paths


@pytest.mark.gpu
@needs_gpu
def test_gpu_knn_matches_cpu() -> None:
    database, queries = gaussian(5000, 64, seed=21), gaussian(300, 64, seed=22)
    rows = np.arange(300)
    cpu = knn(database, queries, 10, engine=CPU, exclude_ids=rows)
    gpu = knn(database, queries, 10, engine=resolve_engine("cuda"), exclude_ids=rows)
    np.testing.assert_array_equal(gpu[1], cpu[1])
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=RTOL, atol=ATOL)


@pytest.mark.gpu
@needs_gpu
def test_gpu_sharded_and_multi_gpu_match_cpu() -> None:
    database, queries = gaussian(3000, 32, seed=23), gaussian(200, 32, seed=24)
    cpu = knn(database, queries, 8, engine=CPU)
    gpus = tuple(range(faiss_gpu_count()))
    sharded = knn(database, queries, 8, engine=Engine("faiss-gpu", "cuda", gpus), db_batch=700, query_batch=64)
    np.testing.assert_array_equal(sharded[1], cpu[1])
    np.testing.assert_allclose(sharded[0], cpu[0], rtol=RTOL, atol=ATOL)


@pytest.mark.gpu
@needs_gpu
def test_gpu_ivf_full_probe_equals_exact() -> None:
    database, queries = gaussian(2000, 16, seed=25), gaussian(50, 16, seed=26)
    _, ids = ivf_search(database, queries, 5, nlist=8, nprobe=8, engine=resolve_engine("cuda"))
    np.testing.assert_array_equal(ids, knn(database, queries, 5, engine=CPU)[1])


# --------------------------------------------------------------------------- CPU engines (faiss, onednn)

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")


@needs_onednn
@pytest.mark.parametrize("case", ["gaussian", "massive", "duplicates"])
def test_cpu_engines_give_the_exact_answer(case: str) -> None:
    rng = np.random.default_rng(31)
    x = rng.standard_normal((300, 96)).astype(np.float32)
    if case == "massive":  # float32 cancellation misranks most raw neighbours; the verified refine repairs it
        x[:, [3, 7]] += 1e4 * rng.choice([-1, 1], size=(300, 1)).astype(np.float32)
    if case == "duplicates":
        x[[17, 150, 151]] = x[5]
    rows = np.arange(300)
    full = reference_distances(x, x, rows)
    ref_dist, ref_ids = reference_knn(full, 4)
    for engine in ("faiss", "onednn", "torch"):
        dist, ids = knn(x, x, 4, engine=Engine(engine), exclude_ids=rows)
        np.testing.assert_array_equal(ids, ref_ids, err_msg=engine)
        np.testing.assert_allclose(dist, ref_dist, rtol=1e-6, atol=1e-6, err_msg=engine)


@needs_onednn
@pytest.mark.parametrize("column_chunk", [64, 4, 8192])  # merged chunks; chunks narrower than k; one chunk
def test_gemm_knn_keeps_the_faiss_contract(column_chunk: int) -> None:
    blocks = GemmBlocks(query_tile=7, column_chunk=column_chunk)  # query tiles are concatenated
    database, queries = gaussian(500, 48, seed=5), gaussian(40, 48, seed=6)
    want_dist, want_ids = faiss.knn(queries, database, 9)
    got_dist, got_ids = gemm_knn(queries, database, 9, blocks)
    assert got_dist.dtype == np.float32 and got_ids.dtype == np.int64 and got_ids.shape == (40, 9)
    np.testing.assert_array_equal(got_ids, want_ids)  # continuous random data: no ties
    np.testing.assert_allclose(got_dist, want_dist, rtol=1e-4, atol=1e-4)
    assert (np.diff(got_dist, axis=1) >= 0).all()


@needs_onednn
def test_gemm_knn_selects_through_groups_as_topk_does() -> None:
    """The blocks' k smallest through column groups (the default) against topk over whole blocks (group 0)."""
    database, queries = gaussian(3000, 16, seed=8), gaussian(50, 16, seed=9)
    assert groups_pay(3000, 19, DEFAULT_GROUP)
    grouped = gemm_knn(queries, database, 19)
    whole = gemm_knn(queries, database, 19, GemmBlocks(group=0))
    np.testing.assert_array_equal(grouped[0], whole[0])
    np.testing.assert_array_equal(grouped[1], whole[1])  # continuous random data: no ties


@needs_onednn
def test_onednn_engine_through_groups_gives_the_exact_tie_order() -> None:
    """Every point of a 13 x 13 x 13 integer grid, shuffled: distinct rows, each with many neighbours at exactly
    equal distances; the search selects through groups (2,197 columns, pool 14) and still returns the reference
    order, ties by row."""
    axis = np.arange(-6, 7, dtype=np.float32)
    x = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    x = x[np.random.default_rng(10).permutation(len(x))]
    rows = np.arange(len(x))
    assert groups_pay(len(x), 5 + 1 + 8, DEFAULT_GROUP)  # k, the excluded self match, the refine's extra candidates
    dist, ids = knn(x, x, 5, engine=Engine("onednn"), exclude_ids=rows)
    ref_dist, ref_ids = reference_knn(reference_distances(x, x, rows), 5)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)


def test_gemm_knn_reads_a_read_only_memory_map(tmp_path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, gaussian(64, 8, seed=7))
    x = np.load(path, mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist, ids = gemm_knn(x, x, 2)
    np.testing.assert_array_equal(ids[:, 0], np.arange(64))  # itself first, at distance ~0
    assert np.abs(dist[:, 0]).max() < 1e-4


def test_resolve_cpu_engine() -> None:
    """Explicit engines are used as given; auto without a search worth timing, or without oneDNN, is faiss (the
    timed choice: tests/unit/knn/test_engine_choice.py)."""
    assert resolve_cpu_engine("faiss") == "faiss"
    with pytest.raises(AssocmemError, match="neighbours.cpu_engine: 'blas' is not one of auto, faiss, onednn"):
        resolve_cpu_engine("blas")
    assert resolve_cpu_engine("onednn", onednn=True) == "onednn"
    assert resolve_cpu_engine("auto", onednn=True) == "faiss"  # no search shape: nothing to time
    assert resolve_cpu_engine("auto", (100, 1000, 64, 5), onednn=True) == "faiss"  # milliseconds of work
    assert resolve_cpu_engine("auto", (10**5, 10**5, 1024, 5), onednn=False) == "faiss"
    with pytest.raises(AssocmemError, match="onednn needs a torch build with oneDNN"):
        resolve_cpu_engine("onednn", onednn=False)


def test_search_layer_passes_the_engine(engine: str, caplog: pytest.LogCaptureFixture) -> None:
    cfg = {"k": 2, "fractions": [1.0], "device": "cpu", "method": "exact", "cpu_engine": "faiss"}
    with caplog.at_level(logging.DEBUG, logger="assocmem.knn.exact"):
        search_layer(gaussian(30, 4), gaussian(5, 4, seed=1), cfg, seed=0, engine=Engine(engine))
    engines = [used for _, _, used in candidate_searches(caplog)]
    assert engines and set(engines) == {engine}
