"""Tests for assocmem.knn: exact search (faiss and the torch engine on the CPU) against a float64 numpy brute force,
sharded merges, nested subsamples, IVF and recall, summaries; the reference and the thread fixture the other k-NN
tests share (the CPU engines' fixture: conftest.py)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd
import pytest

from assocmem.errors import AssocmemError
from assocmem.knn import (
    SUMMARY_COLUMNS,
    Engine,
    heldout_search,
    ivf_search,
    ivf_with_recall,
    knn,
    nested_subsample_rows,
    recall_at_k,
    self_search,
    summarise,
)
from assocmem.runtime import faiss_gpu_count
from assocmem.runtime.blas import import_faiss

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
