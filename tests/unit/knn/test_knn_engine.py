"""The k-NN engine, chosen once (assocmem.knn.engine): neighbours.device auto takes the GPU when torch sees one
(faiss-gpu where faiss has GPU support, else the torch engine), the CPU otherwise, and says why; device names
have one spelling (cuda). The device probes are faked: no GPU is needed. And the torch engine's own guarantees (its
exactness on every engine: tests/unit/knn/test_knn_exact.py and test_knn_engines_exact.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from assocmem import runtime
from assocmem.errors import AssocmemError
from assocmem.knn import knn
from assocmem.knn.engine import CPU_BLOCK_BYTES, Engine, resolve_engine
from assocmem.knn.shards import Shards
from assocmem.knn.torch_engine import TorchSearch


@pytest.fixture(autouse=True)
def single_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny searches on a shared box: OpenMP spin-waiting makes 2 threads up to 100x slower."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)


def fake_devices(monkeypatch: pytest.MonkeyPatch, *, torch_cuda: bool, faiss_gpus: int) -> None:
    monkeypatch.setattr(runtime, "cuda_available", lambda: torch_cuda)
    monkeypatch.setattr(runtime, "faiss_gpu_count", lambda: faiss_gpus)


@pytest.mark.parametrize(("torch_cuda", "faiss_gpus", "kind", "device", "reason"), [
    (True, 0, "torch", "cuda", "auto: torch sees CUDA; faiss has no GPU support"),
    (True, 2, "faiss-gpu", "cuda", "auto: faiss has GPU support (2 GPU(s))"),
    (False, 0, "faiss", "cpu", "auto: no CUDA device; cpu_engine explicit"),
])
def test_auto_takes_the_gpu_when_torch_sees_one(monkeypatch: pytest.MonkeyPatch, torch_cuda: bool, faiss_gpus: int,
                                                kind: str, device: str, reason: str) -> None:
    fake_devices(monkeypatch, torch_cuda=torch_cuda, faiss_gpus=faiss_gpus)
    engine = resolve_engine("auto", "faiss")
    assert (engine.kind, engine.device, engine.reason) == (kind, device, reason)
    assert engine.gpu_ids == tuple(range(faiss_gpus))
    record = engine.record()
    assert record["kind"] == kind and record["reason"] == reason and "cpu_choice" not in record
    assert engine.cpu_choice is not None and engine.cpu_choice.how == ("explicit" if kind == "faiss" else "device")


def test_cuda_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_devices(monkeypatch, torch_cuda=True, faiss_gpus=0)
    assert resolve_engine("cuda:1").device == "cuda:1" and resolve_engine("cuda:1").torch_device == "cuda:1"
    assert resolve_engine("cpu", "faiss").kind == "faiss"  # an explicit cpu stays there
    fake_devices(monkeypatch, torch_cuda=True, faiss_gpus=2)
    assert resolve_engine("CUDA:1").gpu_ids == (1,)
    with pytest.raises(AssocmemError, match="neighbours.device: GPU 3 out of range: faiss sees 2 GPU"):
        resolve_engine("cuda:3")
    fake_devices(monkeypatch, torch_cuda=False, faiss_gpus=0)
    with pytest.raises(AssocmemError, match="neighbours.device: 'cuda' requested but CUDA is not available"):
        resolve_engine("cuda")


@pytest.mark.parametrize(("name", "match"), [
    ("gpu", "neighbours.device: 'gpu' is no longer a device name; write cuda"),
    ("gpu:0", "'gpu' is no longer a device name; write cuda"),
    ("mps", "unknown device 'mps'"),
    ("cuda:x", "unknown device 'cuda:x'"),
    ("cpu:0", "unknown device 'cpu:0'"),
])
def test_device_names_have_one_spelling(name: str, match: str) -> None:
    with pytest.raises(AssocmemError, match=match):
        runtime.check_device(name, "neighbours.device")


def test_engine_kinds_and_budgets() -> None:
    with pytest.raises(AssocmemError, match="k-NN engine 'blas' is not one of"):
        Engine("blas")
    assert Engine().block_budget() == CPU_BLOCK_BYTES and Engine(block_bytes=1 << 20).block_budget() == 1 << 20
    assert Engine("faiss-gpu", "cuda", (1,)).torch_device == "cuda:1" and Engine("onednn").torch_device == "cpu"
    assert Engine("faiss-gpu", "cuda", (0,)).max_pool == 2048 and Engine("torch").max_pool is None


@pytest.mark.parametrize("section", ["neighbours", "train", "activations"])
def test_the_config_refuses_gpu_in_one_line(section: str) -> None:
    from helpers import ROOT

    from assocmem.config import ConfigError, load_schema, validate_config

    exp = {"dataset": {"name": "question_formation"}, "models": {"m": {"n_layer": 1, "d_model": 8, "n_head": 2}},
           section: {"device": "gpu"}}
    schema = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    with pytest.raises(ConfigError, match=rf"experiments\.qf\.{section}\.device: 'gpu' is no longer a device name; "
                                          "write cuda$"):
        validate_config({"experiments": {"qf": exp}}, schema)
    assert validate_config({"experiments": {"qf": {**exp, section: {"device": "cuda"}}}}, schema)


def test_the_torch_engine_gives_faiss_ids_on_tie_free_data() -> None:
    """Blocks of 64 KiB of scores: 16 query blocks over the 2,000 rows; the database stays resident between the
    refine's rounds."""
    x = np.random.default_rng(3).standard_normal((2000, 48)).astype(np.float32)
    rows = np.arange(2000)
    faiss_dist, faiss_ids = knn(x, x, 10, engine=Engine("faiss"), exclude_ids=rows)
    torch_dist, torch_ids = knn(x, x, 10, engine=Engine("torch", block_bytes=64 << 10), exclude_ids=rows)
    np.testing.assert_array_equal(torch_ids, faiss_ids)
    np.testing.assert_array_equal(torch_dist, faiss_dist)  # the same ids: the same exact float64 distances


def test_the_torch_engine_keeps_the_database_on_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    shards = Shards(np.random.default_rng(4).standard_normal((50, 4)).astype(np.float32), None, center=True)
    search = TorchSearch(shards, Engine("torch", block_bytes=1 << 20), query_batch=16)
    queries = shards.centre(shards.database, True)
    uploads = []
    monkeypatch.setattr(shards, "block", lambda start, block=shards.block: uploads.append(start) or block(start))
    first = search(queries, 3)
    second = search(queries[:7], 5)
    assert uploads == [0]  # one upload for two searches of several blocks each
    np.testing.assert_array_equal(second[1][:, :3], first[1][:7])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_the_torch_engine_on_cuda_matches_the_cpu() -> None:
    x = np.random.default_rng(5).standard_normal((5000, 64)).astype(np.float32)
    x[:, 3] += 1e3  # a massive dimension: the refine repairs the float32 ranking on both
    rows = np.arange(5000)
    cpu = knn(x, x, 10, engine=Engine("faiss"), exclude_ids=rows)
    cuda = knn(x, x, 10, engine=Engine("torch", "cuda"), exclude_ids=rows)
    small_blocks = knn(x, x, 10, engine=Engine("torch", "cuda", block_bytes=1 << 20), exclude_ids=rows)
    for got in (cuda, small_blocks):
        np.testing.assert_array_equal(got[1], cpu[1])
        np.testing.assert_array_equal(got[0], cpu[0])


def test_the_device_refine_gives_numpy_s_exact_distances() -> None:
    """The refine's float64 distances on the torch device (used on CUDA) against the numpy ones, here on the CPU."""
    from assocmem.knn.exact import _exact_squared_distances
    from assocmem.knn.torch_engine import TorchDistances

    rng = np.random.default_rng(6)
    database = (rng.standard_normal((300, 24)) + 1e3).astype(np.float32)
    queries = (rng.standard_normal((70, 24)) + 1e3).astype(np.float32)
    cand = rng.integers(0, 300, size=(70, 9))
    want = _exact_squared_distances(database, queries, cand)
    got = TorchDistances(database, Engine("torch", block_bytes=1))(queries, cand)  # the smallest chunks
    np.testing.assert_allclose(got, want, rtol=1e-12)
