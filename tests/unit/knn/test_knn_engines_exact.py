"""Each k-NN engine against the float64 reference: the CPU engines (faiss, oneDNN products, the torch engine) with
their column groups and memory maps, the CPU engine's resolution, and faiss on the GPU (skipped without one)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from test_knn_exact import (  # noqa: F401 - single_thread: the fixture is autouse here too
    ATOL,
    CPU,
    RTOL,
    candidate_searches,
    faiss,
    gaussian,
    needs_gpu,
    reference_distances,
    reference_knn,
    single_thread,
)

from assocmem.errors import AssocmemError
from assocmem.gemm import onednn_available
from assocmem.knn import (
    Engine,
    GemmBlocks,
    gemm_knn,
    ivf_search,
    knn,
    resolve_cpu_engine,
    resolve_engine,
    search_layer,
)
from assocmem.knn.select import DEFAULT_GROUP, groups_pay
from assocmem.runtime import faiss_gpu_count

# --------------------------------------------------------------------------- GPU-only paths


def _assert_same_neighbours(found: tuple[np.ndarray, np.ndarray], cpu: tuple[np.ndarray, np.ndarray]) -> None:
    """The same ids as the CPU search and its distances to the fp32 tolerance."""
    np.testing.assert_array_equal(found[1], cpu[1])
    np.testing.assert_allclose(found[0], cpu[0], rtol=RTOL, atol=ATOL)


@pytest.mark.gpu
@needs_gpu
def test_gpu_knn_matches_cpu() -> None:
    database, queries = gaussian(5000, 64, seed=21), gaussian(300, 64, seed=22)
    rows = np.arange(300)
    cpu = knn(database, queries, 10, engine=CPU, exclude_ids=rows)
    _assert_same_neighbours(knn(database, queries, 10, engine=resolve_engine("cuda"), exclude_ids=rows), cpu)


@pytest.mark.gpu
@needs_gpu
def test_gpu_sharded_and_multi_gpu_match_cpu() -> None:
    database, queries = gaussian(3000, 32, seed=23), gaussian(200, 32, seed=24)
    cpu = knn(database, queries, 8, engine=CPU)
    gpus = tuple(range(faiss_gpu_count()))
    sharded = knn(database, queries, 8, engine=Engine("faiss-gpu", "cuda", gpus), db_batch=700, query_batch=64)
    _assert_same_neighbours(sharded, cpu)


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
